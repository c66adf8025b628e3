"""Planning below the kernels: the configuration, which path runs on which kernel, the cost
model and the tile geometry. Host arithmetic only: nothing here imports a kernel module (the
kernels read the plan).

:mod:`.config` the one configuration; :mod:`.geometry` what fits a block's shared memory;
:mod:`.tables` which paths get pattern tables; :mod:`.launches` quadrature launches and their
chunks; :mod:`.routes` the small-model route; :mod:`.costs` the kernels' cost constants and the
calibration cache; :mod:`.predict` predicted times; :mod:`.gpu` a model's CUDA plan and
``strategy_stats``; :mod:`.interventional` the interventional tables.
"""

from distshap.plan.config import Config, config_context, get_config, reset_config, set_config

__all__ = ["Config", "config_context", "get_config", "reset_config", "set_config"]
