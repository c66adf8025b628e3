"""The executors of :mod:`benchmarks.serve`'s peers: the floor (values without work) and the
baseline (XGBoost's ``pred_contribs`` a request), behind the same HTTP front as distshap's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["NullExecutor", "XGBoostExecutor"]


class NullExecutor:
    """Values without work (zeros of the right shape, at once): the front's own ceiling."""

    name = "null"

    def __init__(self, features: int) -> None:
        self.features = features

    def slots(self) -> int:
        return 1

    def ready(self) -> bool:
        return True

    def workers(self) -> int:
        return 1

    def idle(self) -> bool:
        return True

    def run_here(self, resident, rows, output, k):
        """The values of a batch run on the server's loop (small ones, as distshap's)."""
        return {output: np.zeros((len(rows), self.features + 1), np.float32)}

    def submit(self, resident, rows, output, k):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result(self.run_here(resident, rows, output, k))
        return future

    def close(self) -> None:
        pass


class XGBoostExecutor:
    """The baseline: XGBoost's pred_contribs on each request as it comes (no batching)."""

    name = "xgboost"

    def __init__(self, booster, threads: int) -> None:
        self.booster = booster
        self._pool = ThreadPoolExecutor(threads)
        self._threads = threads

    def slots(self) -> int:
        return self._threads

    def ready(self) -> bool:
        return True

    def workers(self) -> int:
        return 1

    def submit(self, resident, rows, output, k):
        import xgboost as xgb

        def run():
            values = self.booster.predict(xgb.DMatrix(rows), pred_contribs=True)
            return {output: values}

        return self._pool.submit(run)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
