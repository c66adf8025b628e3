"""One Python per test process that imports the simulator's dependencies once, then forks a
child for each simulator script (``tests/cudasim.py``).

A script in a forked child starts from the same state as in a fresh ``python -c``: the parent
only imported NumPy, Numba (``NUMBA_ENABLE_CUDASIM=1`` in its environment), XGBoost and pandas
and never runs anything, so no state passes from one script to the next; the child gets the
script's exit status, stdout and stderr as ``python -c`` would give them.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys

__all__ = ["run_forked"]

_PARENT = r"""
import json, os, signal, sys, tempfile, time, traceback

# the simulator's block manager polls its threads without ever blocking: a shorter interval
# hands the interpreter lock sooner to the simulated threads it waits for
sys.setswitchinterval(0.0005)
import numpy, numba, numba.cuda  # noqa: the shared imports, done once before any fork
for name in ("xgboost", "pandas"):
    try:
        __import__(name)
    except ImportError:
        pass


def child(script, out, err):
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 0
    try:
        exec(compile(script, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:  # as python -c: None is 0, an int its status, else printed, 1
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # as the interpreter ends: its threads joined, then its exit functions
        import atexit, threading
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


for line in sys.stdin:
    request = json.loads(line)
    files = [tempfile.TemporaryFile() for _ in range(2)]
    pid = os.fork()
    if pid == 0:
        child(request["script"], files[0].fileno(), files[1].fileno())
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = None
            break
        time.sleep(0.02)
    texts = []
    for f in files:
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    sys.stdout.write(json.dumps({"code": code, "stdout": texts[0], "stderr": texts[1]}) + "\n")
    sys.stdout.flush()
"""

_STARTED: dict[str, object] = {}


def _parent(env: dict[str, str]) -> subprocess.Popen:
    """The forking parent for ``env`` and the working directory (a new one where either
    changed)."""
    key = (dict(env), os.getcwd())
    proc = _STARTED.get("proc")
    if proc is not None and (_STARTED["key"] != key or proc.poll() is not None):
        _stop()
        proc = None
    if proc is None:
        proc = subprocess.Popen([sys.executable, "-c", _PARENT], env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        _STARTED.update(proc=proc, key=key)
    return proc


def _stop() -> None:
    proc = _STARTED.pop("proc", None)
    _STARTED.pop("key", None)
    if proc is not None:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


atexit.register(_stop)


def run_forked(script: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Runs ``script`` as ``python -c`` would in environment ``env``, in a child forked from
    the parent started for ``env``. Raises ``subprocess.TimeoutExpired`` past ``timeout``
    seconds (the child is killed)."""
    proc = _parent(env)
    try:
        proc.stdin.write(json.dumps({"script": script, "timeout": timeout}) + "\n")
        proc.stdin.flush()
    except BrokenPipeError:
        _stop()
        raise
    ready, _, _ = select.select([proc.stdout], [], [], timeout + 60)
    line = proc.stdout.readline() if ready else ""
    if not line:
        _stop()
        raise subprocess.TimeoutExpired([sys.executable, "-c", script], timeout)
    reply = json.loads(line)
    if reply["code"] is None:
        raise subprocess.TimeoutExpired([sys.executable, "-c", script], timeout)
    return subprocess.CompletedProcess([sys.executable, "-c", script], reply["code"],
                                       reply["stdout"], reply["stderr"])  # fmt: skip
