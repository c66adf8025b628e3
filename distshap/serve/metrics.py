"""The server's Prometheus metrics, rendered in the text exposition format at ``/metrics``.

Counters of requests (by model, output and status), rows, errors (by status) and seconds spent
in each stage of answering (decoding, waiting in the queue, batch assembly, running,
encoding); histograms of
batch sizes (rows) and request latency (seconds) per model and output; gauges of queued rows
and connected workers, read when scraped.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_ROW_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{str(v).replace(chr(92), "/").replace(chr(34), chr(39))}"'
                     for k, v in pairs)  # fmt: skip
    return "{" + inner + "}"


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str, labels: tuple[tuple[str, str], ...]) -> list[str]:
        out, total = [], 0
        for bound, count in zip((*self.buckets, "+Inf"), self.counts, strict=True):
            total += count
            out.append(f"{name}_bucket{_labels((*labels, ('le', str(bound))))} {total}")
        out.append(f"{name}_sum{_labels(labels)} {self.sum}")
        out.append(f"{name}_count{_labels(labels)} {total}")
        return out


class Metrics:
    """Thread-safe counters and histograms of a server; :meth:`render` is ``/metrics``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple, int] = defaultdict(int)
        self.rows: dict[tuple, int] = defaultdict(int)
        self.errors: dict[tuple, int] = defaultdict(int)
        self.latency: dict[tuple, _Histogram] = {}
        self.batch_rows: dict[tuple, _Histogram] = {}
        self.stages: dict[tuple, float] = defaultdict(float)
        self.gauges: dict[str, tuple[str, Callable[[], dict[tuple, float]]]] = {}

    def request(self, model: str, output: str, status: int, rows: int, seconds: float) -> None:
        """One answered request (``output``: the outputs asked for, comma-separated)."""
        key = (("model", model), ("output", output))
        with self._lock:
            self.requests[(*key, ("status", str(status)))] += 1
            if status == 200:
                self.rows[key] += rows
                self.latency.setdefault(key, _Histogram(_LATENCY_BUCKETS)).observe(seconds)
            else:
                self.errors[(("status", str(status)),)] += 1

    def batch(self, model: str, output: str, rows: int, seconds: float = 0.0,
              waited: float = 0.0) -> None:  # fmt: skip
        """One batch handed to the executor (``seconds``: taking and joining its rows;
        ``waited``: its requests' seconds in the queue, summed)."""
        key = (("model", model), ("output", output))
        with self._lock:
            self.batch_rows.setdefault(key, _Histogram(_ROW_BUCKETS)).observe(rows)
            self.stages[(("stage", "assemble"),)] += seconds
            self.stages[(("stage", "queue"),)] += waited

    def stage(self, name: str, seconds: float) -> None:
        """Seconds spent in one stage of answering (decode, assemble, run, encode)."""
        with self._lock:
            self.stages[(("stage", name),)] += seconds

    def gauge(self, name: str, help_text: str, read: Callable[[], dict[tuple, float]]) -> None:
        """A gauge read when scraped: ``read()`` -> ``{labels: value}``."""
        self.gauges[name] = (help_text, read)

    def render(self) -> str:
        """The metrics in Prometheus's text format."""
        lines: list[str] = []
        with self._lock:
            for name, kind, help_text, series in (
                ("distshap_serve_requests_total", "counter", "infer requests answered",
                 self.requests),
                ("distshap_serve_rows_total", "counter", "rows explained", self.rows),
                ("distshap_serve_errors_total", "counter", "requests refused or failed",
                 self.errors),
                ("distshap_serve_stage_seconds_total", "counter", "seconds spent per stage: "
                 "decode, queue (summed over requests), assemble, run (batches), encode",
                 self.stages),
            ):  # fmt: skip
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                lines += [f"{name}{_labels(k)} {v}" for k, v in sorted(series.items())]
            for name, help_text, series in (
                ("distshap_serve_request_seconds", "infer request latency", self.latency),
                ("distshap_serve_batch_rows", "rows per batch", self.batch_rows),
            ):
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
                for key, hist in sorted(series.items()):
                    lines += hist.lines(name, key)
        for name, (help_text, read) in sorted(self.gauges.items()):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            lines += [f"{name}{_labels(k)} {v}" for k, v in sorted(read().items())]
        return "\n".join(lines) + "\n"
