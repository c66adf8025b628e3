"""distshap: exact SHAP values of tree ensembles on CPUs, GPUs and Dask clusters."""

from distshap.compile_cache import configure as _configure_cache

_configure_cache()  # before distshap imports Numba: where its compiled kernels are kept

from distshap.explainer import TreeExplainer  # noqa: E402
from distshap.models import Ensemble, UnsupportedModelError, load_model  # noqa: E402
from distshap.plan.config import (  # noqa: E402
    Config,
    config_context,
    get_config,
    reset_config,
    set_config,
)

__all__ = [
    "Config",
    "Ensemble",
    "TreeExplainer",
    "UnsupportedModelError",
    "config_context",
    "get_config",
    "load_model",
    "reset_config",
    "set_config",
    "start_cluster",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "start_cluster":
        from distshap.cluster import start_cluster

        return start_cluster
    raise AttributeError(f"module 'distshap' has no attribute {name!r}")
