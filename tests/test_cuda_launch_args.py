"""What the launches of a GPU call are handed: arrays made once, kept with the device model.

Under the CUDA simulator (a subprocess): every array of a device model, its SHAP and
interaction plans, their quadrature launches and its pair slots is a device array (none a
NumPy array copied at each launch); the read-only hints of the launches
(:meth:`~distshap.kernels.cuda.runtime.model.DeviceModel.read_only`) are made on the first
call and the same objects afterwards; values keep their bits call after call and against a
fresh model; and a model's kept arrays go with it (a model without a digest, dropped, is
freed). On a GPU (``gpu``-marked): the same arrays are Numba device arrays (the filled tables
too, which CuPy allocates), and the values keep their bits with the hints kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distshap.kernels import cuda_available

from conftest import to_host
from cudasim import assert_simulator_ok


def device_arrays(obj, where: str = ""):
    """``(name, array)`` of every array field of ``obj`` (dataclasses and tuples of them)."""
    if isinstance(obj, (tuple, list)):
        for i, o in enumerate(obj):
            yield from device_arrays(o, f"{where}[{i}]")
        return
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if f.name.startswith("_") or f.name in ("packed", "config"):
                continue
            yield from device_arrays(getattr(obj, f.name), f"{where}.{f.name}")
        return
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        yield where, obj


def assert_made_once(model, plans, slots) -> None:
    """No array of the device model, its ``plans`` and ``slots`` is a NumPy array (which a
    launch would copy to the device every time); tables and quadrature launches among them."""
    names = []
    for where, a in device_arrays((model, plans, slots)):
        assert not isinstance(a, np.ndarray), f"{where} is a NumPy array"
        names.append(where)
    assert any("tables" in n for n in names) and any("quadrature" in n for n in names), names


_SCRIPT = r"""
import dataclasses
import gc
import numpy as np
import weakref
import tiny
from distshap.kernels.cuda import launch
from distshap.kernels.cuda.runtime import caches
from distshap.kernels.cuda.runtime.model import device_model, interaction_plan, slot_arrays
from distshap.kernels.cuda.traversal import check_rows
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.pair_slots import pair_slots
from distshap.paths import extract_paths
from distshap.plan.config import set_config
from test_cuda_launch_args import assert_made_once

set_config(small_max_paths=0)  # the batched route: tables, quadrature, finish
ens = tiny.random_ensemble(6, n_features=5, n_trees=3, depth=3, n_groups=1)
X = tiny.random_rows(2, ens, 2, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=700,  # tables + quadrature
                            margin=margin_model(ens))

def bits(inter):
    f = launch.interaction_values if inter else launch.shap_values
    return np.asarray(f(packed, X)).view(np.uint32).copy()

first = [bits(False), bits(True)]
model = device_model(packed)
plans = (model.shap, interaction_plan(packed, model))
slots = slot_arrays(packed, model, pair_slots(packed), plans[1])
assert_made_once(model, plans, slots)
kept = {k: v for k, v in model._forms.items() if k[0] == "read_only"}
assert {k[1][0] for k in kept if isinstance(k[1], tuple)} >= {"tables", "shap_quadrature",
                                                                 "interaction_quadrature"}, kept
assert ("read_only", "expected_value") in kept, kept
# the kept hints: the same objects, the same bits
assert all(np.array_equal(a, b) for a, b in zip([bits(False), bits(True)], first))
again = {k: v for k, v in model._forms.items() if k[0] == "read_only"}
assert all(again[k] is v for k, v in kept.items()), "a hint was made again"
# pair slots (split kernel, then the gathered one forced): the full matrices' entries
from distshap.kernels.cuda import pairs, slot_quadrature
ps = pair_slots(packed)
full = launch.interaction_values(packed, X)
group = np.repeat(np.arange(ps.num_groups), np.diff(ps.slot_offsets))
want = np.asarray(full)[:, group, ps.slot_i, ps.slot_j].view(np.uint32)
got = np.asarray(pairs.interaction_slot_values(packed, X, ps)).view(np.uint32)
assert np.array_equal(got[:, : want.shape[1]], want)
real = slot_quadrature.slot_kernel_arrays
slot_quadrature.slot_kernel_arrays = lambda lay: None
got = np.asarray(pairs.interaction_slot_values(packed, X, ps)).view(np.uint32)
slot_quadrature.slot_kernel_arrays = real
assert np.array_equal(got[:, : want.shape[1]], want), "gathered kernel"
assert {k[1][2] for k in model._forms if k[0] == "read_only" and k[1][0] == "slot_quadrature"
        } == {False, True}
# the margin's arrays, kept as hints by the fused check
flag, _ = check_rows(packed, X[:1], launch.shap_values(packed, X[:1]), 1e-3)
assert flag[0] == 0 and ("read_only", "margin") in model._forms
caches.clear_cache()  # a fresh model: the same bits
assert np.array_equal(bits(False), first[0])
# a model without a digest (not cached) is freed with its kept arrays and hints
plain = dataclasses.replace(packed, digest="")
m = device_model(plain)
assert device_model(plain) is not m, "a model without a digest was cached"
from distshap.kernels.cuda import traversal
made, real_model = [], traversal.device_model
traversal.device_model = lambda p: made.append(p) or real_model(p)
traversal.check_rows(plain, X[:1], launch.shap_values(plain, X[:1]), 1e-3)
traversal.device_model = real_model
assert len(made) == 1, f"the check made {len(made)} device models of a model without a digest"
hints = m.read_only(("probe",), lambda: (m.lane_f, m.path_offsets))
assert m.read_only(("probe",), lambda: ()) is hints
ref = weakref.ref(m)
del m, hints
gc.collect()
assert ref() is None, "a device model outlived its last reference"
print("SIMULATOR-OK")
"""


def test_launch_arrays_made_once_and_kept_with_the_model():
    assert_simulator_ok(_SCRIPT, timeout=900)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
def test_gpu_launch_arrays_are_numba_device_arrays():
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda.runtime.model import interaction_plan, slot_arrays
    from distshap.packed import build_packed_model
    from distshap.pair_slots import pair_slots
    from distshap.paths import extract_paths
    from distshap.plan import costs as plan_costs
    from distshap.plan.config import config_context

    import tiny

    ens = tiny.random_ensemble(6, n_features=8, n_trees=20, depth=5, n_groups=2)
    X = tiny.random_rows(2, ens, 50, 0.15)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=6000)
    with config_context(small_max_paths=0), plan_costs.use_costs(plan_costs.tables_everywhere()):
        first = to_host(kc.shap_values(packed, X)).view(np.uint32).copy()
        model = kc.device_model(packed)
        plans = (model.shap, interaction_plan(packed, model))
        slots = slot_arrays(packed, model, pair_slots(packed), plans[1])
        assert_made_once(model, plans, slots)
        for where, a in device_arrays((model, plans, slots)):
            assert hasattr(a, "__cuda_memory__"), f"{where} is a {type(a).__name__}"
        kept = {k: v for k, v in model._forms.items() if k[0] == "read_only"}
        assert {"tables", "shap_quadrature"} <= {k[1][0] for k in kept}, kept
        for _ in range(2):
            again = to_host(kc.shap_values(packed, X)).view(np.uint32)
            assert np.array_equal(again, first)
            assert all(model._forms[k] is v for k, v in kept.items()), "a hint was made again"
