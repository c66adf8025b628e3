"""The additivity rule every output obeys: its tolerance and the error raised when a row breaks it.

SHAP values of a row (bias included) sum to the model's margin, and so do its interaction
values. Float32 outputs hold each value to a relative ``2**-24`` and the kernels' own rounding
is far below that, so a row passes when ``|sum - margin| <= RTOL * max(1, |margin| + sum
|values|)``; a row that takes another branch in a tree misses by a difference of leaf values,
which is far larger on any model whose leaves are not negligible. Kept apart from the check
itself (:mod:`distshap.additivity`) so that kernels checking rows in place can read it.
"""

from __future__ import annotations

__all__ = ["KERNEL_RTOL", "RTOL", "AdditivityError"]

#: Relative tolerance of the additivity check (see the module docstring).
RTOL = 1e-4

#: The tolerance of a kernel checking rows in place: it flags every row the full check fails
#: (and a few more, which the full check then passes).
KERNEL_RTOL = 0.5 * RTOL


class AdditivityError(ValueError):
    """SHAP values that do not sum to the model's margin (a distshap fault, never ignored)."""
