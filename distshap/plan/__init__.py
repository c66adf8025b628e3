"""Planning below the kernels: the configuration, which path runs on which kernel, the cost
model and the tile geometry. Host arithmetic only: nothing here imports a kernel module."""

from distshap.plan.config import Config, config_context, get_config, reset_config, set_config

__all__ = ["Config", "config_context", "get_config", "reset_config", "set_config"]
