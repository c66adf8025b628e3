"""Interventional SHAP values on the GPU: explained rows against a background data set.

For an explained row ``x`` and a background row ``r``, a merged path of leaf value ``v`` is the
game ``v [X subset of S] [S disjoint from R]``: ``X`` the elements only ``x`` follows (``a`` of
them), ``R`` those only ``r`` follows (``b``); elements both follow are dummies, and an element
neither follows zeroes the path. Element ``i`` in ``X`` gets ``v W(a, b)``, ``j`` in ``R`` gets
``-v W(b, a)``, ``W(a, b) = (a-1)! b! / (a+b)!`` (interaction weights:
:func:`.common.shapley_weights`). The values of ``x`` are the mean over the ``B`` background
rows, each pair scaled by ``s(x, r)`` for the probability and log-loss outputs
(:mod:`distshap.interventional`).

The modules, bottom to top: :mod:`.common` (device helpers, weights), :mod:`.background` (the
background's masks and pattern counts on a device, kept on the device model), :mod:`.tables`
(background pattern tables: fill kernels and the table kernel), :mod:`.direct` (the direct and
factor kernels), :mod:`.oversize` (paths longer than a warp), :mod:`.driver` (the batches and
the finish kernel: :func:`~.driver.interventional_values`) and :mod:`.ptx`.
"""

from distshap.kernels.cuda.interventional.driver import interventional_values

__all__ = ["interventional_values"]
