"""The server's Prometheus metrics, rendered in the text exposition format at ``/metrics``.

Counters of requests (by model, output and status), rows, errors (by status) and seconds spent
in each stage of answering (decoding, waiting in the queue, batch assembly, running,
encoding); histograms of
batch sizes (rows) and request latency (seconds) per model and output; gauges of queued rows
and connected workers, read when scraped. A server of several processes renders the sum of
every process's series (:meth:`Metrics.snapshot` of the others, merged by :meth:`render`), and
each process's requests as ``distshap_serve_process_requests_total{process="i"}``.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_ROW_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
#: Gauges whose processes see the same thing (the cluster's workers): the largest, not the sum.
_SHARED_GAUGES = ("distshap_serve_workers",)
_COUNTERS = (
    ("requests", "distshap_serve_requests_total", "infer requests answered"),
    ("rows", "distshap_serve_rows_total", "rows explained"),
    ("errors", "distshap_serve_errors_total", "requests refused or failed"),
    ("stages", "distshap_serve_stage_seconds_total", "seconds spent per stage: decode, queue "
     "(summed over requests), assemble, run (batches), encode"),
)  # fmt: skip
_DECODE, _ENCODE = (("stage", "decode"),), (("stage", "encode"),)
_HISTOGRAMS = (
    ("latency", "distshap_serve_request_seconds", "infer request latency", _LATENCY_BUCKETS),
    ("batch_rows", "distshap_serve_batch_rows", "rows per batch", _ROW_BUCKETS),
)


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
        #: This process's index in a server of several processes (None: the only one).
        self.process: int | None = None

    def request(self, model: str, output: str, status: int, rows: int, seconds: float,
                decode: float = 0.0, encode: float = 0.0) -> None:  # fmt: skip
        """One answered request (``output``: the outputs asked for, comma-separated), with the
        seconds its decoding and encoding took (0: not done), as :meth:`stage` adds them."""
        key = (("model", model), ("output", output))
        with self._lock:
            if decode:
                self.stages[_DECODE] += decode
            if encode:
                self.stages[_ENCODE] += encode
            self.requests[(*key, ("status", str(status)))] += 1
            if status == 200:
                self.rows[key] += rows
                hist = self.latency.get(key)
                if hist is None:
                    hist = self.latency[key] = _Histogram(_LATENCY_BUCKETS)
                hist.observe(seconds)
            else:
                self.errors[(("status", str(status)),)] += 1

    def batch(self, model: str, output: str, rows: int, seconds: float = 0.0,
              waited: float = 0.0) -> None:  # fmt: skip
        """One batch handed to the executor (``seconds``: taking and joining its rows;
        ``waited``: its requests' seconds in the queue, summed)."""
        key = (("model", model), ("output", output))
        with self._lock:
            hist = self.batch_rows.get(key)
            if hist is None:
                hist = self.batch_rows[key] = _Histogram(_ROW_BUCKETS)
            hist.observe(rows)
            self.stages[(("stage", "assemble"),)] += seconds
            self.stages[(("stage", "queue"),)] += waited

    def stage(self, name: str, seconds: float) -> None:
        """Seconds spent in one stage of answering (decode, assemble, run, encode)."""
        with self._lock:
            self.stages[(("stage", name),)] += seconds

    def gauge(self, name: str, help_text: str, read: Callable[[], dict[tuple, float]]) -> None:
        """A gauge read when scraped: ``read()`` -> ``{labels: value}``."""
        self.gauges[name] = (help_text, read)

    def snapshot(self) -> dict:
        """Every series now, as JSON-able lists (gauges read): what :meth:`render` merges."""
        with self._lock:
            out: dict = {"process": self.process}
            for attr, *_ in _COUNTERS:
                out[attr] = [[list(k), v] for k, v in getattr(self, attr).items()]
            for attr, *_ in _HISTOGRAMS:
                out[attr] = [[list(k), h.counts, h.sum] for k, h in getattr(self, attr).items()]
        out["gauges"] = {
            name: [help_text, [[list(k), v] for k, v in read().items()]]
            for name, (help_text, read) in self.gauges.items()
        }
        return out

    def render(self, peers: list[dict] = ()) -> str:
        """The metrics in Prometheus's text format: this process's series summed with those of
        ``peers`` (other processes' :meth:`snapshot`)."""
        parts = [self.snapshot(), *peers] if peers else [self.snapshot()]
        merged = _merge(parts)
        lines: list[str] = []
        for attr, name, help_text in _COUNTERS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            lines += [f"{name}{_labels(k)} {v}" for k, v in sorted(merged[attr].items())]
        for attr, name, help_text, _ in _HISTOGRAMS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
            for key, hist in sorted(merged[attr].items()):
                lines += hist.lines(name, key)
        for name, (help_text, series) in sorted(merged["gauges"].items()):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
            lines += [f"{name}{_labels(k)} {v}" for k, v in sorted(series.items())]
        if peers:
            name = "distshap_serve_process_requests_total"
            lines += [f"# HELP {name} infer requests answered by each server process",
                      f"# TYPE {name} counter"]  # fmt: skip
            for part in sorted(parts, key=lambda p: p.get("process") or 0):
                total = sum(v for _, v in part["requests"])
                lines.append(f'{name}{{process="{part.get("process") or 0}"}} {total}')
        return "\n".join(lines) + "\n"


def _key(pairs: list) -> tuple:
    return tuple((str(a), str(b)) for a, b in pairs)


def _merge(parts: list[dict]) -> dict:
    """Snapshots -> one set of series: counters, histograms and gauges summed (the gauges of
    :data:`_SHARED_GAUGES`: their largest)."""
    out: dict = {attr: defaultdict(float) for attr, *_ in _COUNTERS}
    for attr, *_ in _HISTOGRAMS:
        out[attr] = {}
    gauges: dict = {}
    for part in parts:
        for attr, *_ in _COUNTERS:
            for k, v in part[attr]:
                out[attr][_key(k)] += v
        for attr, *_, buckets in _HISTOGRAMS:
            for k, counts, total in part[attr]:
                hist = out[attr].setdefault(_key(k), _Histogram(buckets))
                hist.counts = [a + b for a, b in zip(hist.counts, counts, strict=True)]
                hist.sum += total
        for name, (help_text, series) in part["gauges"].items():
            held = gauges.setdefault(name, (help_text, {}))[1]
            for k, v in series:
                k = _key(k)
                if name in _SHARED_GAUGES:
                    held[k] = max(held.get(k, v), v)
                else:
                    held[k] = held.get(k, 0) + v
    for attr, *_ in _COUNTERS:  # integers stay integers
        out[attr] = {k: int(v) if attr != "stages" else v for k, v in out[attr].items()}
    out["gauges"] = gauges
    return out
