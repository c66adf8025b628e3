"""The interventional ``model_output`` rescale factor: the secant slope, without cancellation.

For an explained row of margin ``m_x`` and a background row of margin ``m_r`` the pair's
values are scaled by ``(T(m_x) - T(m_r)) / (m_x - m_r)`` (1 at equal margins, shap's
convention). Subtracting two rounded ``T`` leaves rounding noise when the margins are ulps
apart (found by differential fuzzing: a HistGradientBoostingClassifier whose row and
background row margins differ by 1.1e-16 got the factor 0.5 for the limit 0.245, values off
by 0.19 on the probability scale). Checked here:

* :func:`distshap.kernels.interventional_math.rescale` (and its compiled CPU copy) against
  the exact secant (decimal arithmetic) at margin distances from one ulp to 800, both signs,
  both transforms, labels 0, 1 and a fraction; the oracle's :func:`naive.output_secant`
  against a fixed-precision evaluation;
* a tiny model whose two rows' margins differ by one ulp: values equal the continuous limit
  and the oracle, and add up;
* the CUDA device function ``_scaling`` and the per-pair ``factor_kernel`` under the CUDA
  simulator against the CPU function.
"""

from __future__ import annotations

from decimal import Context, Decimal

import numpy as np
import pytest

from distshap.dispatch import explain_rows
from distshap.encoding import encode_ensemble
from distshap.interventional import build_background
from distshap.kernels import interventional_math as im
from distshap.kernels.interventional_cpu import _rescale
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

import naive
import tiny
from cudasim import assert_simulator_ok

EPS = float(np.finfo(np.float64).eps)
OUTPUTS = {1: "probability", 2: "log_loss"}
BASES = [-800.0, -35.0, -3.0, -0.28097875401800704, 0.0, 0.5, 4.0, 35.0, 800.0]
DISTANCES = ["ulp", 1e-12, 1e-6, 1.0, 30.0, 800.0]
LABELED = [(1, 0.0), (2, 0.0), (2, 1.0), (2, 0.3)]  # (transform, label)


def _pairs() -> list[tuple[float, float]]:
    """Margin pairs at every distance of :data:`DISTANCES` from every base, both directions;
    plus a subnormal distance."""
    out = [(0.0, 5e-324), (5e-324, 0.0)]
    for m in BASES:
        for dist in DISTANCES:
            for sign in (1.0, -1.0):
                other = float(np.nextafter(m, sign * np.inf)) if dist == "ulp" else m + sign * dist
                out.append((m, other))
    return out


PAIRS = _pairs()


def _exact(mx: float, mr: float, y: float, transform: int, prec: int = 420) -> float:
    """The secant in decimal arithmetic with ``prec`` digits (enough for ``|m| <= 801`` and a
    gap of one ulp: ``T`` saturates over ``800 / ln 10 = 348`` digits, the gap takes 16 more)."""
    ctx = Context(prec=prec)
    a, b, yd = Decimal(mx), Decimal(mr), Decimal(y)
    if transform == 1:

        def t(m):
            return ctx.divide(1, ctx.add(1, ctx.exp(ctx.minus(m))))
    else:

        def t(m):
            return ctx.subtract(ctx.ln(ctx.add(1, ctx.exp(m))), ctx.multiply(yd, m))

    return float(ctx.divide(ctx.subtract(t(a), t(b)), ctx.subtract(a, b)))


def _assert_secant(got: float, want: float, y: float, what) -> None:
    """A few ulps of ``want`` (or below float64's smallest normal number); labels strictly
    between 0 and 1 subtract two terms of sum 1, so a few ulps of 1 there."""
    err = abs(got - want)
    if 0.0 < y < 1.0:
        assert err <= 4 * EPS, (what, got, want)
    else:
        assert err <= 4 * EPS * abs(want) or err <= 1e-300, (what, got, want)


@pytest.mark.parametrize(("transform", "y"), LABELED)
def test_rescale_is_the_exact_secant(transform, y):
    name = OUTPUTS[transform]
    for mx, mr in PAIRS:
        want = naive.output_secant(mx, mr, y, name)
        got = im.rescale(mx, mr, y, transform)
        _assert_secant(got, want, y, (mx, mr))
        assert _rescale(mx, mr, y, transform) == got, (mx, mr)  # the compiled CPU copy
        assert got == im.rescale(mr, mx, y, transform)  # a secant: symmetric
    # equal margins: exactly 1 (shap's convention); raw margin: 1
    for m in BASES:
        assert im.rescale(m, m, y, transform) == 1.0
        assert naive.output_secant(m, m, y, name) == 1.0
        assert im.rescale(m, m + 1.0, y, 0) == 1.0


def test_rescale_one_ulp_apart_is_the_derivative():
    # the fuzzing case: margins 1.1e-16 apart near -0.281
    a = -0.2809787540180071
    b = float(np.nextafter(a, np.inf))
    sig = 1.0 / (1.0 + np.exp(-a))
    assert im.rescale(a, b, 0.0, 1) == pytest.approx(sig * (1.0 - sig), rel=1e-15)
    for y in (0.0, 1.0):
        assert im.rescale(a, b, y, 2) == pytest.approx(sig - y, rel=1e-15)
    # the plain difference of the two rounded sigmoids is noise there
    naive_diff = (im.transformed(a, 0.0, 1) - im.transformed(b, 0.0, 1)) / (a - b)
    assert abs(naive_diff - sig * (1.0 - sig)) > 0.1


def test_the_oracle_secant_is_converged():
    """:func:`naive.output_secant` (digits chosen per pair) against 420 digits everywhere."""
    for transform, y in LABELED:
        for mx, mr in PAIRS:
            if abs(mx - mr) > 1e-6 and max(abs(mx), abs(mr)) < 100.0:
                continue  # only the hard pairs (the easy ones are covered above)
            got = naive.output_secant(mx, mr, y, OUTPUTS[transform])
            assert got == _exact(mx, mr, y, transform), (transform, y, mx, mr)


def _one_ulp_model():
    """Three one-split trees, features 0, 1, 2: row ``x`` (all 0) takes leaves 0.1, 0.2, 0.3,
    row ``r`` (all 1) 0.3, 0.2, 0.1; the margins are the same sum in another order, one ulp
    apart in float64."""
    trees = [
        tiny.Split(f, 0.5, tiny.Leaf(left), tiny.Leaf(right))
        for f, (left, right) in enumerate([(0.1, 0.3), (0.2, 0.2), (0.3, 0.1)])
    ]
    ens = tiny.build_ensemble(trees, num_features=3, model_kind="xgboost:binary:logistic")
    encoded, encoding = encode_ensemble(ens)
    packed = build_packed_model(
        extract_paths(encoded),
        feature_names=ens.feature_names,
        encoding=encoding,
        margin=margin_model(ens),
        model_kind=ens.model_kind,
    )
    return ens, packed


@pytest.mark.parametrize("model_output", ["probability", "log_loss"])
def test_margins_one_ulp_apart_give_the_continuous_limit(model_output):
    ens, packed = _one_ulp_model()
    X = np.zeros((2, 3))
    R = np.ones((1, 3))
    mx = naive.predict_margin(ens, X)[0, 0]
    mr = naive.predict_margin(ens, R)[0, 0]
    assert mx != mr and abs(mx - mr) < 1e-15  # the case under test
    y = np.array([0.0, 1.0])
    phi = explain_rows(packed, X, backend="cpu", background=build_background(packed, R),
                       model_output=model_output, y=y)  # fmt: skip
    oracle = naive.interventional_shap_rows(ens, X, R, model_output=model_output, y=y)
    sig = 1.0 / (1.0 + np.exp(-mx))
    for i in range(2):
        slope = sig * (1.0 - sig) if model_output == "probability" else sig - y[i]
        # tree 0 gives feature 0 (0.1 - 0.3) of the raw margin, tree 2 feature 2 (0.3 - 0.1)
        limit = np.array([-0.2 * slope, 0.0, 0.2 * slope])
        np.testing.assert_allclose(oracle[i, 0, :3], limit, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(phi[i, 0, :3], limit, rtol=1e-6, atol=1e-7)
        target = sig if model_output == "probability" else np.logaddexp(0.0, mx) - y[i] * mx
        assert float(phi[i, 0].astype(np.float64).sum()) == pytest.approx(target, abs=1e-6)


_SIM_SCRIPT = r"""
import numpy as np
from numba import cuda
from distshap.kernels import interventional_math as im
from distshap.kernels.cuda.interventional.common import scaling
from distshap.kernels.cuda.interventional.direct import factor_kernel

@cuda.jit
def scale_kernel(t, mx, mr, y, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = scaling(t[i], mx[i], y[i], mr[i])

rows = []
for m in (-800.0, -3.0, -0.2809787540180071, 0.0, 0.6, 35.0):
    for other in (np.nextafter(m, np.inf), m - 1e-9, m + 1.0, m - 30.0, m + 800.0, m):
        for t, y in ((0, 0.0), (1, 0.0), (2, 0.0), (2, 1.0), (2, 0.25)):
            rows.append((t, m, float(other), y))
t, mx, mr, y = (np.array(c) for c in zip(*rows))
t = t.astype(np.int64)
out = np.zeros(len(rows))
scale_kernel[(len(rows) + 63) // 64, 64](t, mx, mr, y, out)
want = np.array([im.rescale(a, b, c, int(d)) for d, a, b, c in rows])
assert np.array_equal(out, want), np.flatnonzero(out != want)
assert out[t == 0].tolist() == [1.0] * int((t == 0).sum())

# the factor kernel: every (row, background row) pair of a chunk, the same function
m_bg = np.array([-800.0, -3.0, 0.0, np.nextafter(0.0, 1.0), 0.6, 0.6 + 1e-15, 35.0])
m_x = np.array([-3.0, np.nextafter(0.6, 1.0), 0.0, 800.0, -0.2809787540180071])
labels = np.array([0.0, 1.0, 0.25, 1.0, 0.0])
for transform in (1, 2):
    got = np.full((m_x.size, m_bg.size), np.nan)
    factor_kernel[2, 16](transform, m_x, labels, m_bg, got)  # 32 threads: a stride loop
    want = np.array([[im.rescale(a, b, labels[i] if transform == 2 else 0.0, transform)
                      for b in m_bg] for i, a in enumerate(m_x)])
    assert np.array_equal(got, want), (transform, np.argwhere(got != want))
print("SIMULATOR-OK")
"""


def test_cuda_scaling_under_the_simulator():
    """The GPU's ``scaling`` and ``factor_kernel`` are the CPU's :func:`rescale` (simulator;
    PTX typing is checked by tests/test_cuda_interventional.py's compile test)."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=120)
