"""A device process's counters: what its calls held and how long they and their batches took.

:class:`DeviceCounters` is kept by a :class:`~distshap.serve.device_process.DeviceLoop` and
written as JSON every half second; the fronts read every device process's file
(:func:`read_device_stats`) into their ``/metrics`` gauges (``distshap_serve_device_*``).
``busy`` over wall seconds is the share of the time the device process had a call running
(on a GPU: the share of the time the GPU could have work from it).
"""

from __future__ import annotations

import json
import os
import threading
import time

__all__ = ["COUNTERS", "DeviceCounters", "read_device_stats"]

#: The counters a device process writes (:class:`DeviceCounters`), seconds among them.
COUNTERS = ("calls", "rows", "merged", "batches", "busy", "ran", "waited")
_SECONDS = ("busy", "ran", "waited")


class DeviceCounters:
    """Calls run, rows they held, calls that merged several batches, batches; seconds during
    which at least one call ran (``busy``), of the calls summed (``ran``) and of the batches'
    waits from being read whole to their call's start, summed (``waited``)."""

    def __init__(self) -> None:
        self.values: dict = {name: 0.0 if name in _SECONDS else 0 for name in COUNTERS}
        self._lock = threading.Lock()
        self._active, self._since = 0, 0.0

    def _step(self, change: int) -> float:
        """A call starts (``1``) or ends (``-1``), the lock held: the busy seconds counted to
        now (returned)."""
        now = time.perf_counter()
        if self._active:
            self.values["busy"] += now - self._since
        self._since, self._active = now, self._active + change
        return now

    def start(self) -> float:
        """A call starts: its start (``time.perf_counter``)."""
        with self._lock:
            return self._step(1)

    def end(self, start: float, read: list[float], rows: int) -> None:
        """The call begun at ``start`` ended, having held ``rows`` rows of batches read whole
        at ``read`` (``time.perf_counter``), one a batch."""
        with self._lock:
            end = self._step(-1)
            v = self.values
            v["ran"] += end - start
            v["waited"] += sum(start - at for at in read)
            v["calls"] += 1
            v["rows"] += rows
            v["merged"] += len(read) > 1
            v["batches"] += len(read)

    def write(self, path: str) -> None:
        """The counters as JSON at ``path`` (replaced whole: readers never see half a file);
        a call still running counts as busy up to now."""
        with self._lock:
            values = dict(self.values)
            if self._active:
                values["busy"] += time.perf_counter() - self._since
        with open(path + ".tmp", "w") as f:
            f.write(json.dumps(values))
        os.replace(path + ".tmp", path)


def read_device_stats(folder: str, devices: int) -> dict:
    """``{counter: {(("device", "i"),): value}}`` of the device processes' counters in
    ``folder`` (those not written yet left out): the fronts' ``/metrics`` gauges."""
    out: dict = {name: {} for name in COUNTERS}
    for index in range(devices):
        try:
            with open(os.path.join(folder, f"device-{index}.json")) as f:
                stats = json.load(f)
        except (OSError, ValueError):
            continue
        for name, series in out.items():
            series[(("device", str(index)),)] = stats.get(name, 0)
    return out
