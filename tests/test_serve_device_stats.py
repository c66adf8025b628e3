"""A device process's counters (:mod:`distshap.serve.device_stats`): busy seconds count the time
any call runs once, calls' seconds and batches' waits add up, the file round trip."""

from __future__ import annotations

import os
import time

import pytest

from distshap.serve.device_stats import DeviceCounters, read_device_stats


def test_busy_seconds_count_calls_side_by_side_once(tmp_path):
    counters = DeviceCounters()
    first = counters.start()
    time.sleep(0.05)
    second = counters.start()  # runs beside the first
    time.sleep(0.05)
    counters.end(first, [first - 0.01], 3)
    time.sleep(0.05)
    counters.end(second, [second - 0.02, second - 0.03], 5)
    v = counters.values
    assert 0.15 <= v["busy"] < v["ran"]  # the union of the calls, less than their sum
    assert v["ran"] >= 0.2
    assert v["waited"] == pytest.approx(0.06)
    assert (v["calls"], v["rows"], v["merged"], v["batches"]) == (2, 8, 1, 3)
    counters.start()  # a call still running counts as busy in the file
    time.sleep(0.05)
    counters.write(os.fspath(tmp_path / "device-0.json"))
    read = read_device_stats(os.fspath(tmp_path), 2)  # device 1 has written nothing
    assert read["busy"][(("device", "0"),)] >= v["busy"] + 0.05
    assert read["calls"] == {(("device", "0"),): 2} and read["waited"][(("device", "0"),)] > 0
