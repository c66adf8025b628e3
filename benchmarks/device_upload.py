"""The device model's lane columns: host build + copies against the device build, one process.

``before``: :func:`distshap.kernels.cuda.runtime.model.lane_arrays` (the host builds ``lane_f``,
``lane_i``, ``lane_d``, ``lane_cat``) and ``cuda.to_device`` of those four; ``after``:
:func:`distshap.kernels.cuda.runtime.upload.lane_columns` (the packed model's own arrays copied, the
columns assembled by a kernel). Both synchronised. Alternated ``--repeats`` times (the first
``after`` includes loading or compiling the fill kernel, printed apart), then the columns are
compared bit for bit. Wall and process CPU seconds.

Usage::

    DISTSHAP_BENCH_DEVICE=cuda python -m benchmarks.device_upload --shape cal_housing-large
"""

from __future__ import annotations

import argparse
import time

import numpy as np

_COLUMNS = ("lane_f", "lane_i", "lane_d", "lane_cat")


def _packed(shape: str):
    from benchmarks.shapes import model_path
    from distshap.explainer import TreeExplainer

    name, size = shape.rsplit("-", 1)
    path = model_path(name, size)
    if not path.exists():
        raise SystemExit(f"{path} is missing: train it with benchmarks.shapes.train_model")
    return TreeExplainer(str(path)).packed


def _before(packed) -> dict:
    from numba import cuda

    from distshap.kernels.cuda.runtime import model

    host = model.lane_arrays(packed)
    out = {name: cuda.to_device(host[name]) for name in _COLUMNS}
    cuda.synchronize()
    return out


def _after(packed) -> dict:
    from distshap.kernels.cuda.runtime.upload import lane_columns

    return lane_columns(packed)


def _timed(f, packed) -> tuple[dict, float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = f(packed)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="cal_housing-large")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    t = time.perf_counter()
    packed = _packed(args.shape)
    lanes = int(packed.feature.shape[0])
    print(f"{args.shape}: {packed.num_paths:,} paths, {lanes:,} lanes "
          f"(built in {time.perf_counter() - t:.2f} s)")  # fmt: skip
    a = b = None
    for r in range(args.repeats):
        a = b = None  # free the previous copies first
        a, wall_a, cpu_a = _timed(_before, packed)
        del a
        b, wall_b, cpu_b = _timed(_after, packed)
        note = " (first: fill kernel loaded/compiled)" if r == 0 else ""
        print(f"  before (host columns + copies): {wall_a:6.3f} s wall {cpu_a:6.3f} s cpu | "
              f"after (device build): {wall_b:6.3f} s wall {cpu_b:6.3f} s cpu{note}")  # fmt: skip
    a = _before(packed)
    for name in _COLUMNS:
        x, y = a[name].copy_to_host(), b[name].copy_to_host()
        same = x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        print(f"  {name}: {x.dtype} {x.shape} bit-identical={same}")
        if not same:
            raise SystemExit(f"{name} differs: {np.argwhere(x != y)[:5].tolist()}")


if __name__ == "__main__":
    main()
