"""The interventional game's arithmetic and its background, written once for every backend.

For an explained row ``x`` and one background row ``r``, a merged path (leaf value ``v``) is
the game ``v * [X subset of S] * [S disjoint from R]``: ``X`` the elements only ``x`` follows,
``R`` those only ``r`` follows (a path some element of which neither follows contributes
nothing; elements both follow are dummies). Its Shapley values and interaction indices depend
only on ``a = |X|`` and ``b = |R|``: :func:`weight_tables` holds them, exact float64 ratios of
factorials, for every ``a + b <= max_k``.

``model_output`` transforms (shap's ``dense_independent``): each ``(x, r)`` pair's values are
scaled by :func:`rescale` of the two margins (the secant slope of ``T``, written without
cancellation), so that they sum to ``T(m_x) - T(m_r)``.
:func:`transformed` and :func:`rescale` use :mod:`math` only, so the CPU backend compiles them
with ``njit`` and the CUDA backend with ``cuda.jit(device=True)`` (the
:mod:`distshap.kernels.treeshap` pattern); :func:`weight_tables` runs on the host.

:class:`Background` is the background data set as every backend reads it (built above the
kernels by :func:`distshap.interventional.build_background`); :func:`check_background` is the
one check of it that every entry point runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "Background",
    "IR_RR",
    "IR_XR",
    "IR_XX",
    "LOG_LOSS",
    "PROBABILITY",
    "RAW",
    "SHAP_R",
    "SHAP_X",
    "check_background",
    "rescale",
    "transformed",
    "weight_tables",
]

#: Transform ids (:func:`distshap.interventional.transform_id`).
RAW, PROBABILITY, LOG_LOSS = 0, 1, 2

#: Rows of :func:`weight_tables`.
SHAP_X, SHAP_R, IR_XX, IR_XR, IR_RR = 0, 1, 2, 3, 4


def transformed(m, y, transform):
    """``T(m, y)``: the margin (0), ``1 / (1 + exp(-m))`` (1) or ``log(1 + exp(m)) - y m`` (2).

    Written without overflow for any finite ``m``.
    """
    if transform == 1:
        if m >= 0.0:
            return 1.0 / (1.0 + math.exp(-m))
        e = math.exp(m)
        return e / (1.0 + e)
    if transform == 2:
        return max(m, 0.0) + math.log1p(math.exp(-abs(m))) - y * m
    return m


def rescale(mx, mr, y, transform):
    """``s = (T(m_x, y) - T(m_r, y)) / (m_x - m_r)`` without cancellation; 1 for the raw margin.

    ``m_x == m_r`` gives exactly 1: the one discontinuity (the limit is ``T'(m)``, at most 1/4
    for the probability), kept for parity with shap, whose pairs of equal margins contribute
    ``1 *`` their (then zero-sum) raw values. Every other pair gets the secant slope to a few
    ulps, also when the margins differ by an ulp (subtracting two rounded ``T`` would leave
    rounding noise there, not the slope). With ``a = max``, ``b = min`` of the margins and
    ``d = a - b > 0`` (``sigma`` the sigmoid, ``sp(m) = log(1 + exp(m))``):

    * probability: ``sigma(a) - sigma(b) = sigma(a) sigma(-b) (1 - exp(-d))``, so
      ``s = sigma(a) sigma(-b) (-expm1(-d) / d)``: a product of positive factors, each exact
      to an ulp or so (``-expm1(-d) / d -> 1`` as ``d -> 0``);
    * log loss ``T = sp(m) - y m``: with ``Q(p, q) = (sp(p) - sp(q)) / (p - q)`` (``p > q``)
      and ``sp(m) - m = sp(-m)``, ``s = Q(a, b) - y = (1 - y) Q(a, b) - y Q(-b, -a)`` (both
      terms non-negative: for labels 0 and 1 one of them, no cancellation). ``sp(p) - sp(q) =
      log((1 + e^p) / (1 + e^q)) = log1p(u)``, ``u = sigma(q) expm1(d) = e^p (-expm1(-d)) /
      (1 + e^q)``; ``Q = v log1p(u) / u`` with ``v = u / d`` computed from the first form for
      ``q > 0`` and the second for ``q <= 0`` (no overflow for ``d <= 700``, no subnormal
      ``u`` in ``v``), and ``Q = (sp(p) - sp(q)) / d`` for ``d > 700``, where that difference
      is well conditioned.

    Written out flat with :mod:`math` only (compiled code calls no plain Python function).
    """
    if transform == 0 or mx == mr:
        return 1.0
    a = mx
    b = mr
    if mr > mx:
        a = mr
        b = mx
    d = a - b
    if transform == 1:
        e = math.exp(-abs(a))
        sa = 1.0 / (1.0 + e) if a >= 0.0 else e / (1.0 + e)  # sigma(a)
        e = math.exp(-abs(b))
        snb = e / (1.0 + e) if b >= 0.0 else 1.0 / (1.0 + e)  # sigma(-b)
        return sa * snb * (-math.expm1(-d) / d)
    out = 0.0
    for side in range(2):  # Q(a, b) weighted 1 - y, then Q(-b, -a) weighted -y
        w = 1.0 - y if side == 0 else -y
        if w == 0.0:
            continue
        p = a if side == 0 else -b
        q = b if side == 0 else -a
        if d > 700.0:
            sp_p = (p if p > 0.0 else 0.0) + math.log1p(math.exp(-abs(p)))  # no max(): CUDA
            sp_q = (q if q > 0.0 else 0.0) + math.log1p(math.exp(-abs(q)))
            quotient = (sp_p - sp_q) / d
        else:
            if q > 0.0:
                v = math.expm1(d) / d / (1.0 + math.exp(-q))
            else:
                v = math.exp(p) * (-math.expm1(-d) / d) / (1.0 + math.exp(q))
            u = v * d
            quotient = v * (math.log1p(u) / u) if u > 0.0 else v
        out += w * quotient
    return out


def _ratio(num: tuple[int, int], den: int) -> float:
    """``p! q! / d!`` as the nearest float64 (exact integer arithmetic)."""
    return float(Fraction(math.factorial(num[0]) * math.factorial(num[1]), math.factorial(den)))


@lru_cache(maxsize=8)
def _tables(max_k: int) -> np.ndarray:
    K = max_k + 1
    out = np.zeros((5, K, K), np.float64)
    for a in range(K):
        for b in range(K - a):
            if a >= 1:  # i in X: +v (a-1)! b! / (a+b)!
                out[SHAP_X, a, b] = _ratio((a - 1, b), a + b)
            if b >= 1:  # j in R: -v a! (b-1)! / (a+b)!
                out[SHAP_R, a, b] = _ratio((a, b - 1), a + b)
            if a >= 2:  # i, j in X: +v (a-2)! b! / (a+b-1)!
                out[IR_XX, a, b] = _ratio((a - 2, b), a + b - 1)
            if a >= 1 and b >= 1:  # i in X, j in R: -v (a-1)! (b-1)! / (a+b-1)!
                out[IR_XR, a, b] = _ratio((a - 1, b - 1), a + b - 1)
            if b >= 2:  # i, j in R: +v a! (b-2)! / (a+b-1)!
                out[IR_RR, a, b] = _ratio((a, b - 2), a + b - 1)
    out.setflags(write=False)
    return out


def weight_tables(max_k: int) -> np.ndarray:
    """Float64 ``(5, max_k + 1, max_k + 1)``: the game's weights by ``(a, b)``.

    Rows (unsigned; the sign is the caller's): :data:`SHAP_X` ``(a-1)! b! / (a+b)!`` (SHAP
    value of each element of ``X``, +), :data:`SHAP_R` ``a! (b-1)! / (a+b)!`` (of each element
    of ``R``, -), :data:`IR_XX` ``(a-2)! b! / (a+b-1)!`` (interaction index of two elements of
    ``X``, +), :data:`IR_XR` ``(a-1)! (b-1)! / (a+b-1)!`` (one of ``X``, one of ``R``, -),
    :data:`IR_RR` ``a! (b-2)! / (a+b-1)!`` (two of ``R``, +). Entries outside their domain
    (``a < 1`` for :data:`SHAP_X`, ...) and with ``a + b > max_k`` are 0. Each entry is the
    nearest float64 of the exact ratio. Read-only, cached.
    """
    if max_k < 0:
        raise ValueError(f"max_k must be >= 0, got {max_k}")
    return _tables(int(max_k))


@dataclass(frozen=True, eq=False)
class Background:
    """A background data set for one model, as every backend reads it (picklable).

    Attributes
    ----------
    rows : float32 (B, F)
        The background rows as the kernels compare them (the model's raw values through its
        input encoding, like :func:`distshap.inputs.prepare_rows`).
    margin : float64 (B, G)
        The model's margin of each row (:func:`distshap.kernels.margin.predict_margin`).
    digest : str
        SHA-256 of ``rows``, ``margin`` and the model's digest: device caches key on it.
    model_digest : str
        Digest of the packed model the rows were encoded for (checked by
        :func:`check_background`).
    """

    rows: np.ndarray
    margin: np.ndarray
    digest: str
    model_digest: str = ""

    @property
    def num_rows(self) -> int:
        return int(self.rows.shape[0])


def check_background(background: Any, packed: Any) -> None:
    """Raise unless ``background`` is a :class:`Background` built for ``packed``."""
    if not isinstance(background, Background):
        raise TypeError(
            f"background is a {type(background).__name__}: pass the Background of the data, "
            "distshap.interventional.build_background(packed, data)"
        )
    if background.rows.ndim != 2 or background.rows.shape[1] != packed.num_features:
        raise ValueError(
            f"the background has rows of shape {background.rows.shape} for a model of "
            f"{packed.num_features} features: build it with build_background(packed, data)"
        )
    if background.margin.shape != (background.rows.shape[0], packed.num_groups):
        raise ValueError(
            f"the background's margins have shape {background.margin.shape}, expected "
            f"({background.rows.shape[0]}, {packed.num_groups}) for this model"
        )
    if background.model_digest and packed.digest and background.model_digest != packed.digest:
        raise ValueError(
            "this background was built for another model (its rows are encoded and its margins "
            "computed by that model): build it again with build_background(packed, data)"
        )
