"""The CUDA runtime every kernel family shares: device helpers and fixed point (``device``,
``nvvm``), kernel arguments and launch configurations (``args``), launches through the driver
from a kept parameter block (``rawlaunch``), the model's upload (``upload``), the one
``DeviceModel`` behind one bounded cache (``model``, ``caches``), PTX checks (``ptx``) and the
stages of an explainer's GPU preparation (``prepare``, :mod:`distshap.kernels.prepare`)."""
