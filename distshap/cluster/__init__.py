"""Dask layer: start a (GPU or CPU) cluster and explain row partitions of Dask collections.

The distributed functions call the single-device kernels of :mod:`distshap.kernels` on each
row chunk; they never re-implement them. Importing this package imports neither CUDA nor
dask-cuda.
"""

from distshap.cluster.dask_explain import compute, explain_dask, warm_up
from distshap.cluster.local import ClusterError, count_gpus, start_cluster
from distshap.cluster.shipping import clear_model_cache, model_future

__all__ = [
    "ClusterError",
    "clear_model_cache",
    "compute",
    "count_gpus",
    "explain_dask",
    "model_future",
    "start_cluster",
    "warm_up",
]
