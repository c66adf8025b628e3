"""A fresh process's first GPU SHAP calls: import, the explainer of cal_housing-med's model file,
then the first call of 1, 16, 512 and 4,000 rows (the plans of each row count), with the
seconds NVVM spent compiling among them. Run it twice on one ``NUMBA_CACHE_DIR``: the first run
fills the cache, the second is a new process on a filled cache.

Needs a GPU and the model (``python3 -m benchmarks.shapes --only cal_housing-med``)::

    NUMBA_CACHE_DIR=/tmp/nc python3 -m benchmarks.first_calls fill
    NUMBA_CACHE_DIR=/tmp/nc python3 -m benchmarks.first_calls again
"""

from __future__ import annotations

import sys
import time

__all__ = ["main"]


def main(label: str = "") -> None:
    t0 = time.perf_counter()
    import numpy as np
    from numba.cuda.cudadrv import nvvm

    import distshap
    from benchmarks.shapes import make_data, model_path

    spent = [0.0]
    compile_ir = nvvm.CompilationUnit.compile

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return compile_ir(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    nvvm.CompilationUnit.compile = timed
    t1 = time.perf_counter()
    explainer = distshap.TreeExplainer(str(model_path("cal_housing", "med")), backend="cuda")
    X = np.ascontiguousarray(make_data("cal_housing", 4000, seed=1)[0], np.float32)
    t2 = time.perf_counter()
    firsts = []
    for n in (1, 16, 512, 4000):
        t = time.perf_counter()
        explainer.shap_values(X[:n])
        firsts.append(f"{n} rows {time.perf_counter() - t:.3f}")
    print(f"{label}: import {t1 - t0:.2f} s, build {t2 - t1:.2f} s, first calls: "
          + ", ".join(firsts) + f"; NVVM {spent[0]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]))
