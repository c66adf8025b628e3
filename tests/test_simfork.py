"""A simulator script ends as under ``python -c`` (``tests/simfork.py``, ``tests/cudasim.py``).

A forked child that left at once (``os._exit``) would neither wait for the script's threads nor
run its exit functions: a script whose thread hangs, fails or writes late would pass there and
not under ``python -c``.
"""

from __future__ import annotations

from cudasim import assert_simulator_ok

_SCRIPT = """
import atexit, threading, time
done = []

def late():
    time.sleep(0.2)
    done.append(1)

threading.Thread(target=late).start()  # not a daemon: the interpreter waits for it
atexit.register(lambda: print("SIMULATOR-OK" if done else "the thread was not waited for"))
"""


def test_a_script_ends_with_its_threads_joined_then_its_exit_functions():
    assert_simulator_ok(_SCRIPT, timeout=60)
