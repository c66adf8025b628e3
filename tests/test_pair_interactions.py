"""Interactions at scale: pair slots, per-row top pairs and data-set summaries.

The judge is the full interaction matrix: top pairs must equal sorting its upper triangle
(``|phi_ij|`` descending, ties by ``(i, j)``) bit for bit, and summaries must equal the mean of
the full matrices. CPU here; the CUDA kernels in the simulator (subprocess) and, marked
``gpu``, on a real device.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

import distshap
from distshap import pair_interactions as pi
from distshap import pair_rows
from distshap.additivity_rule import AdditivityError
from distshap.dispatch import explain_rows
from distshap.kernels import cpu, cuda_available
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots, interaction_shift, pair_slots
from distshap.paths import extract_paths
from distshap.plan import launches as plan_launches
from distshap.plan import tables as plan_tables

import tiny
import xgb_models
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available


def _packed(ens, budget=1 << 30):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget,
                              margin=margin_model(ens))  # fmt: skip


def sorted_pairs(full: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: sort each row's whole upper triangle (feature pairs, bias excluded)."""
    full = to_host(full)
    n, G, F1, _ = full.shape
    iu, ju = np.triu_indices(F1 - 1, 1)
    pairs = np.empty((n, G, k, 2), np.int64)
    values = np.empty((n, G, k), np.float32)
    for r in range(n):
        for g in range(G):
            v = full[r, g][iu, ju]
            order = np.lexsort((ju, iu, -np.abs(v.astype(np.float64))))[:k]
            pairs[r, g, :, 0], pairs[r, g, :, 1], values[r, g] = iu[order], ju[order], v[order]
    return pairs, values


def assert_same_top(got, full, k):
    pairs, values = (to_host(a) for a in got)
    want_pairs, want_values = sorted_pairs(full, k)
    assert pairs.dtype == np.int32 and values.dtype == np.float32
    assert np.array_equal(pairs, want_pairs)
    assert np.array_equal(values.view(np.uint32), want_values.view(np.uint32))


def _slot_groups(slots):
    return np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))


# ------------------------------------------------------------------------------------------
# slots
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_slot_values_have_the_bits_of_the_matrix_entries(seed):
    ens = tiny.random_ensemble(seed, n_features=9, n_trees=8, depth=5, n_groups=1 + seed % 3,
                               n_categorical=seed % 2)  # fmt: skip
    X = tiny.random_rows(seed + 1, ens, 40, 0.1)
    packed = _packed(ens)
    slots = build_pair_slots(packed)
    full = cpu.interaction_values(packed, X)
    got = cpu.interaction_slot_values(packed, X, slots)
    group = _slot_groups(slots)
    assert np.array_equal(got.view(np.uint32),
                          full[:, group, slots.slot_i, slots.slot_j].view(np.uint32))  # fmt: skip
    # every other entry (but the slots' mirror images and the bias) is exactly zero
    covered = np.zeros(full.shape[1:], bool)
    covered[group, slots.slot_i, slots.slot_j] = True
    covered[group, slots.slot_j, slots.slot_i] = True
    covered[:, -1, -1] = True
    assert not full[:, ~covered].any()
    # slot layout: per group, pairs (i < j, lexicographic) then the diagonal by feature
    for g in range(slots.num_groups):
        a, mid = slots.pair_range(g)
        b = slots.slot_offsets[g + 1]
        i, j = slots.slot_i[a:mid], slots.slot_j[a:mid]
        assert (i < j).all() and (np.diff(i.astype(np.int64) * 1000 + j) > 0).all()
        assert (slots.slot_i[mid:b] == slots.slot_j[mid:b]).all()
        assert (np.diff(slots.slot_i[mid:b]) > 0).all()


def test_slot_map_names_each_element_pair():
    ens = tiny.random_ensemble(5, n_features=7, n_trees=6, depth=4, n_groups=2)
    packed = _packed(ens)
    slots = pair_slots(packed)
    assert pair_slots(packed) is slots  # cached by digest
    for p in range(packed.num_paths):
        feats = packed.feature[packed.path_offsets[p] + 1 : packed.path_offsets[p + 1]]
        k = feats.size
        block = slots.path_map[slots.map_offsets[p] : slots.map_offsets[p + 1]].reshape(k, k)
        g = packed.path_group[p]
        a, b = slots.slot_offsets[g], slots.slot_offsets[g + 1]
        for c in range(k):
            for i in range(k):
                s = block[c, i]
                if c > i:
                    assert s == -1
                else:
                    assert a <= s < b
                    assert (slots.slot_i[s], slots.slot_j[s]) == (feats[c], feats[i])


def test_chunk_tiles_number_each_chunks_slots():
    from distshap.plan.launches import chunk_tiles

    ens = tiny.random_ensemble(8, n_features=8, n_trees=12, depth=5, n_groups=2)
    packed = _packed(ens)
    slots = pair_slots(packed)
    k = plan_tables.path_features(packed.path_offsets)
    launches = plan_launches.quadrature_launches(k, packed.path_group, np.ones(k.size, bool),
                                            (2, 4, 8), 5)  # fmt: skip
    local_map, tiles, most = chunk_tiles(slots, [(q["paths"], q["offsets"]) for q in launches])
    sizes = []
    for q, (offsets, chunk_slots) in zip(launches, tiles, strict=True):
        assert offsets.size == q["n_chunks"] + 1
        for c in range(q["n_chunks"]):
            mine = chunk_slots[offsets[c] : offsets[c + 1]]
            assert (np.diff(mine) > 0).all()  # distinct, increasing
            sizes.append(mine.size)
            used = []
            for p in q["paths"][q["offsets"][c] : q["offsets"][c + 1]]:
                span = slice(slots.map_offsets[p], slots.map_offsets[p + 1])
                glob, loc = slots.path_map[span], local_map[span]
                assert ((glob < 0) == (loc < 0)).all()
                assert np.array_equal(mine[loc[loc >= 0]], glob[glob >= 0])
                used.extend(glob[glob >= 0])
            assert set(used) == set(mine)
    assert most == max(sizes)


def test_interaction_shift_is_the_cuda_backends():
    from distshap.kernels.cuda.runtime import model as km

    for seed in range(3):
        packed = _packed(tiny.random_ensemble(seed, n_features=6, n_trees=5, n_groups=2))
        assert interaction_shift(packed) == km.lane_arrays(packed)["interaction_shift"]


# ------------------------------------------------------------------------------------------
# top pairs (CPU)
# ------------------------------------------------------------------------------------------


def _xgb(kind):
    booster, X = xgb_models.MODEL_KINDS[kind]()
    return distshap.TreeExplainer(booster, backend="cpu"), X[:60]


@pytest.mark.parametrize("kind", ["regression", "multiclass", "missing", "categorical"])
def test_top_pairs_equal_sorting_the_full_matrix_xgboost(kind):
    explainer, X = _xgb(kind)
    full = explain_rows(explainer.packed, X, True, "cpu")
    F = explainer.num_features
    for k in (1, 4, F * (F - 1) // 2):  # the last: every pair, zero ones in (i, j) order
        assert_same_top(pi.top_interactions(explainer.packed, X, k, "cpu"), full, k)


def test_top_pairs_equal_sorting_the_full_matrix_lightgbm_and_sklearn():
    lgb = pytest.importorskip("lightgbm")
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) * np.nan_to_num(X[:, 1]) + np.nan_to_num(X[:, 2])
    Xc = np.nan_to_num(X)
    models = [
        lgb.LGBMRegressor(n_estimators=15, num_leaves=12, verbose=-1, n_jobs=1).fit(X, y),
        lgb.LGBMClassifier(n_estimators=6, num_leaves=8, verbose=-1, n_jobs=1).fit(
            X, np.digitize(y, [-0.5, 0.5])
        ),
        (RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0).fit(Xc, y), Xc),
        (GradientBoostingClassifier(n_estimators=5, max_depth=3, random_state=0), Xc),
    ]
    models[-1][0].fit(Xc, np.digitize(y, [-0.5, 0.5]))
    for model in models:
        model, rows = model if isinstance(model, tuple) else (model, X)
        explainer = distshap.TreeExplainer(model, backend="cpu")
        full = explain_rows(explainer.packed, rows[:50], True, "cpu")
        for k in (1, 6):
            got = pi.top_interactions(explainer.packed, rows[:50], k, "cpu")
            assert_same_top(got, full, k)


def test_ties_and_rows_with_few_pairs_follow_the_documented_order():
    # two stumps-of-two on disjoint feature pairs with the same values: exact ties
    ens = tiny.build_ensemble(
        [
            tiny.Split(0, 0.5, tiny.Split(1, 0.5, tiny.Leaf(1.0), tiny.Leaf(-1.0)),
                       tiny.Split(1, 0.5, tiny.Leaf(-1.0), tiny.Leaf(1.0))),
            tiny.Split(2, 0.5, tiny.Split(3, 0.5, tiny.Leaf(1.0), tiny.Leaf(-1.0)),
                       tiny.Split(3, 0.5, tiny.Leaf(-1.0), tiny.Leaf(1.0))),
        ],
        num_features=5,
    )  # fmt: skip
    packed = _packed(ens)
    X = np.array([[0.2, 0.2, 0.2, 0.2, 0.0], [0.7, 0.2, 0.7, 0.2, 0.0]], np.float32)
    full = cpu.interaction_values(packed, X)
    assert full[0, 0, 0, 1] == full[0, 0, 2, 3] != 0  # a tie
    k = 10  # every pair of 5 features: 2 non-zero, 8 zero ones after them
    pairs, values = pi.top_interactions(packed, X, k, "cpu", squeeze=True)
    assert pairs[0, :2].tolist() == [[0, 1], [2, 3]]  # tie: (i, j) ascending
    assert pairs[0, 2:].tolist() == [[0, 2], [0, 3], [0, 4], [1, 2], [1, 3], [1, 4], [2, 4],
                                     [3, 4]]  # fmt: skip
    assert (values[0, 2:] == 0).all()
    assert_same_top((pairs[:, None], values[:, None]), full, k)


def test_top_pairs_do_not_depend_on_batches_and_never_build_matrices(monkeypatch):
    ens = tiny.random_ensemble(6, n_features=8, n_trees=10, depth=5, n_groups=2)
    X = tiny.random_rows(7, ens, 37, 0.1)
    packed = _packed(ens)
    slots = pair_slots(packed)
    whole = pi.top_interactions(packed, X, 5, "cpu")
    seen = []
    real = cpu.interaction_slot_values

    def recording(packed, rows, slots):
        out = real(packed, rows, slots)
        seen.append(out.shape)
        return out

    def forbidden(*args, **kwargs):
        raise AssertionError("the full interaction matrices were computed")

    monkeypatch.setattr(cpu, "interaction_slot_values", recording)
    monkeypatch.setattr(cpu, "interaction_values", forbidden)
    batched = pi.top_interactions(packed, X, 5, "cpu", batch_rows=4)
    assert all(np.array_equal(a, b) for a, b in zip(whole, batched, strict=True))
    assert seen and all(shape[0] <= 4 and shape[1] == slots.num_slots for shape in seen)
    # the default batch is bounded by CPU_BATCH_BYTES of slot values
    seen.clear()
    monkeypatch.setattr(pair_rows, "CPU_BATCH_BYTES", 16 * slots.num_slots)
    pi.interaction_summary(packed, X, backend="cpu")
    assert max(shape[0] for shape in seen) == 4 and len(seen) == 10


def test_bad_arguments_are_refused():
    packed = _packed(tiny.random_ensemble(1, n_features=4, n_trees=3))
    X = tiny.random_rows(1, tiny.random_ensemble(1, n_features=4, n_trees=3), 3)
    with pytest.raises(ValueError, match="1 <= k <= 6"):
        pi.top_interactions(packed, X, 7, "cpu")
    with pytest.raises(ValueError, match="1 <= k <= 6"):
        pi.top_interactions(packed, X, 0, "cpu")
    with pytest.raises(TypeError, match="integer"):
        pi.top_interactions(packed, X, 2.5, "cpu")
    with pytest.raises(ValueError, match="shape|columns|features"):
        pi.top_interactions(packed, X[:, :3], 2, "cpu")
    with pytest.raises(ValueError, match="zero rows"):
        pi.interaction_summary(packed, X[:0], backend="cpu")
    with pytest.raises(ValueError, match="batch_rows"):
        pi.interaction_summary(packed, X, backend="cpu", batch_rows=0)
    with pytest.raises(ValueError, match="shape"):
        pi.top_pairs(np.zeros((4, 5)))


def test_additivity_is_checked(monkeypatch):
    ens = tiny.random_ensemble(2, n_features=5, n_trees=4, n_groups=2)
    packed = _packed(ens)
    X = tiny.random_rows(3, ens, 9)
    real = cpu.interaction_slot_values

    def broken(packed, rows, slots):
        out = real(packed, rows, slots)
        out[2, 0] += 1.0
        return out

    monkeypatch.setattr(cpu, "interaction_slot_values", broken)
    with pytest.raises(AdditivityError, match="interaction values"):
        pi.top_interactions(packed, X, 2, "cpu")
    with pytest.raises(AdditivityError, match="rows \\[2\\]"):
        pi.interaction_summary(packed, X, backend="cpu")
    pi.top_interactions(packed, X, 2, "cpu", check_additivity=False)  # the check is the guard


# ------------------------------------------------------------------------------------------
# summaries (CPU)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signed", [False, True])
def test_summary_is_the_mean_of_the_full_matrices_and_chunking_free(signed):
    explainer, X = _xgb("multiclass")
    packed = explainer.packed
    full = explain_rows(packed, X, True, "cpu").astype(np.float64)
    want = (full if signed else np.abs(full)).mean(axis=0)
    got = pi.interaction_summary(packed, X, signed, "cpu")
    assert got.shape == want.shape and got.dtype == np.float64
    # the upper triangle (phi_ij) and diagonal exactly, the mirrored lower one to 1e-5
    iu = np.triu_indices(want.shape[-1])
    assert np.abs(got[:, iu[0], iu[1]] - want[:, iu[0], iu[1]]).max() <= 1e-12 * np.abs(want).max()
    nz = want != 0
    assert (got[~nz] == 0).all()
    assert (np.abs(got - want)[nz] / np.abs(want[nz])).max() <= 1e-5
    assert (got.min() < 0) == signed
    # bits: batches, and partials of any split combined in any order
    assert np.array_equal(got, pi.interaction_summary(packed, X, signed, "cpu", batch_rows=7))
    parts = [pair_rows.summary_partial(packed, X[a:b], signed, "cpu")
             for a, b in ((0, 13), (13, 14), (14, 60))]  # fmt: skip
    combined = pair_rows.combine_partials(parts[2], pair_rows.combine_partials(*parts[:2]))
    again = pair_rows.finish_summary(combined, packed, signed)
    assert np.array_equal(got, again)


def test_top_pairs_table_ranks_a_summary():
    explainer, X = _xgb("regression")
    summary = pi.interaction_summary(explainer.packed, X, backend="cpu", squeeze=True)
    assert summary.shape == (7, 7)
    table = pi.top_pairs(summary, 4, ["a", "b", "c", "d", "e", "f"])
    assert list(table.columns) == ["rank", "i", "j", "feature_i", "feature_j", "value"]
    upper = np.abs(summary[:-1, :-1][np.triu_indices(6, 1)])
    assert np.allclose(np.sort(upper)[::-1][:4], np.abs(table["value"]))
    assert (table["i"] < table["j"]).all()
    assert table["feature_i"].iloc[0] == "abcdef"[table["i"].iloc[0]]
    explainer, X = _xgb("multiclass")
    multi = pi.interaction_summary(explainer.packed, X, backend="cpu")
    assert set(pi.top_pairs(multi, 2)["group"]) == {0, 1, 2}


def test_tidy_frame():
    explainer, X = _xgb("multiclass")
    pairs, values = pi.top_interactions(explainer.packed, X[:3], 2, "cpu")
    frame = pi.top_interactions_frame(pairs, values, first_row=10)
    assert len(frame) == 3 * 3 * 2
    assert list(frame.columns) == ["row", "group", "rank", "i", "j", "feature_i", "feature_j",
                                   "value"]  # fmt: skip
    first = frame.iloc[0]
    assert (first["row"], first["group"], first["rank"]) == (10, 0, 0)
    assert (first["i"], first["j"]) == tuple(pairs[0, 0, 0])
    assert first["value"] == values[0, 0, 0]
    single = pi.top_interactions_frame(pairs[:, 0], values[:, 0])
    assert "group" not in single.columns and len(single) == 6


# ------------------------------------------------------------------------------------------
# Dask
# ------------------------------------------------------------------------------------------


def test_dask_results_equal_in_memory(scheduler):
    from distributed import Client

    ens = tiny.random_ensemble(4, n_features=9, n_trees=8, depth=5, n_groups=2, n_categorical=1)
    X = tiny.random_rows(5, ens, 60, 0.1)
    packed = _packed(ens)
    with Client(scheduler) as client:
        pairs, values = pi.top_interactions(packed, X, 5, "cpu")
        lazy = pi.top_interactions(packed, da.from_array(X, chunks=(17, 4)), 5, "cpu",
                                   client=client)  # fmt: skip
        assert isinstance(lazy[0], da.Array) and lazy[0].chunks[0] == (17, 17, 17, 9)
        got_pairs, got_values = dask.compute(*lazy)
        assert np.array_equal(got_pairs, pairs) and np.array_equal(got_values, values)
        assert got_pairs.dtype == np.int32 and got_values.dtype == np.float32
        summary = pi.interaction_summary(packed, X, backend="cpu")
        for rows, split_every in ((17, None), (5, 2), (60, None)):
            lazy = pi.interaction_summary(packed, da.from_array(X, chunks=(rows, 9)),
                                          backend="cpu", client=client,
                                          split_every=split_every)  # fmt: skip
            assert isinstance(lazy, da.Array)
            assert np.array_equal(lazy.compute(), summary), (rows, split_every)


# ------------------------------------------------------------------------------------------
# plot and command line
# ------------------------------------------------------------------------------------------


def test_interaction_heatmap():
    pytest.importorskip("matplotlib")
    from distshap.plots import interaction_heatmap

    explainer, X = _xgb("multiclass")
    summary = pi.interaction_summary(explainer.packed, X, backend="cpu")
    fig = interaction_heatmap(summary, max_display=4)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 4 and "summed over 3 classes" in fig.axes[0].get_title()
    strongest = pi.top_pairs(summary.sum(axis=0), 1).iloc[0]
    assert {strongest["feature_i"], strongest["feature_j"]} <= set(labels)
    fig = interaction_heatmap(pi.interaction_summary(explainer.packed, X, True, "cpu"), group=1)
    assert fig.axes[0].get_title() == "class 1"
    with pytest.raises(ValueError, match="group=5"):
        interaction_heatmap(summary, group=5)
    with pytest.raises(ValueError, match="max_display"):
        interaction_heatmap(summary, max_display=1)


def test_cli_plot_interactions(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from distshap.cli import main

    booster, X = xgb_models.build_regression()
    model = tmp_path / "m.json"
    booster.save_model(model)
    data = tmp_path / "d.npy"
    np.save(data, X[:50])
    out = tmp_path / "pairs.png"
    args = ["plot", "interactions", str(model), str(data), "-o", str(out), "--backend", "cpu"]
    assert main([*args, "--top", "3"]) == 0
    printed = capsys.readouterr().out
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"
    assert "feature_i" in printed and "50 rows" in printed
    assert len([line for line in printed.splitlines() if line.strip()]) == 1 + 3 + 1
    assert main([*args, "--top", "-1", "--overwrite"]) == 2
    assert "--top" in capsys.readouterr().err
    assert main(args) == 2  # an existing output needs --overwrite
    assert "overwrite" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# CUDA: compilation (no GPU), the simulator, a real device
# ------------------------------------------------------------------------------------------


def slot_kernel_signatures() -> dict:
    from distshap.kernels.cuda import pairs as kp
    from distshap.kernels.cuda.fallback import oversize_kernel
    from distshap.kernels.cuda.slot_quadrature import gathered_slot_kernel, split_slot_kernel
    from distshap.kernels.cuda.tables import table_kernel
    from distshap.plan.config import get_config

    xa = "float32[:, ::1], int64[:, ::1], float64"
    table = (f"void(float32[:, ::1], int32[:, ::1], int64[::1], int64[::1], uint32[::1], "
             f"float32[::1], int64[::1], int32[::1], int32[::1], {xa}, int64, int64, int32[::1], "
             "int64[::1])")  # fmt: skip
    sigs = {
        "table_slot_kernel": (table_kernel(False, slots=True), table),
        "table_slot_shared_kernel": (table_kernel(True, slots=True), table),
        "oversize_slot_kernel": (
            oversize_kernel(slots=True),
            f"void(float32[:, ::1], int32[:, ::1], int64[::1], float64[:, ::1], uint32[::1], "
            f"int64[::1], int32[::1], {xa}, int32[::1], int64[::1])",
        ),
        "topk_kernel": (
            kp.topk_kernel,
            "void(int64[:, ::1], int64[::1], int64[::1], int32[::1], int32[::1], float64, "
            "float64, int64, int64, int32[:, :, :, ::1], float32[:, :, ::1], int64)",
        ),
        "summary_kernel": (
            kp.summary_kernel,
            "void(int64[:, ::1], float64, float64, boolean, int64[::1], int64[::1], int64)",
        ),
        "slot_sums_kernel": (
            kp.slot_sums_kernel,
            "void(int64[:, ::1], int64[::1], int64[::1], float64, float64[::1], "
            "float64[:, ::1], float64[:, ::1], int64)",
        ),
    }
    rows = (f"void(float32[:, ::1], int32[:, ::1], int64[:, ::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[:, ::1], int64[::1], int32[::1], {xa}, "
            "int64, int64[::1], int64[::1], int64)")  # fmt: skip
    flat = (f"void(float32[::1], int32[::1], int64[::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[::1], int64[::1], int32[::1], {xa}, "
            "int64, int64[::1], int64[::1], int64)")  # fmt: skip
    nodes = get_config().quadrature_nodes
    for n in (nodes[0], nodes[-1]):  # (compile time)
        for cache_x in (False, True) if n == nodes[0] else (True,):
            name = f"quadrature_slot_kernel_{n}{'_cache_x' if cache_x else ''}"
            sigs[name] = (split_slot_kernel(n, 2, cache_x), flat)
            sigs[f"gathered_{name}"] = (gathered_slot_kernel(n, 2, cache_x), rows)
    return sigs


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit) not installed")
def test_slot_kernels_compile_with_integer_atomics_only():
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in slot_kernel_signatures().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom.global.add.f32" not in ptx and "atom.global.add.f64" not in ptx, name
            if "table" in name or "quadrature" in name or "summary" in name:
                assert "atom.global.add.u64" in ptx, name
                assert ".local" not in ptx, f"{name} spills to local memory"
            if "table" in name:
                assert "vote.sync" in ptx, name


_SIM_COMMON = r"""
from distshap.plan import gpu as plan_gpu
import numpy as np
import tiny
from test_pair_interactions import sorted_pairs, _packed
import distshap.kernels.cuda as kc
from distshap import pair_interactions as pi
from distshap.additivity_rule import AdditivityError
from distshap.dispatch import explain_rows
from distshap.kernels.cuda import pairs as kp
from distshap.pair_slots import build_pair_slots
from distshap.plan.config import reset_config, set_config
from distshap.warmup import chain_ensemble

from distshap import pair_rows
pair_rows.resolve_backend = lambda name, cupy_data=False: "cuda"  # no CuPy in the simulator
pair_rows.get_backend = lambda name: kc

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def slots_match(packed, X, what, full=None, **kw):
    # full: the matrices of the same model and rows where only the slot kernels' settings changed
    slots = build_pair_slots(packed)
    full = kc.interaction_values(packed, X) if full is None else full
    group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
    same(kp.interaction_slot_values(packed, X, slots, **kw),
         full[:, group, slots.slot_i, slots.slot_j], what)
    return full

kp.TOPK_MAX_THREADS = 8  # simulated threads are slow; 8 still merge across threads
set_config(small_max_paths=0)  # no one-launch route for these tiny models: the slot kernels
ens = tiny.random_ensemble(3, n_features=6, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 4, 0.15)
"""

_SIM_SLOT_KERNELS = r"""  # after _SIM_COMMON
full_q = slots_match(_packed(ens, 0), X, "quadrature", batch_rows=3)
set_config(slot_quadrature_rows=3)  # blocks of 3 rows: one full, one of a single row
slots_match(_packed(ens, 0), X, "three rows a block", full_q)
set_config(slot_quadrature_rows=1)  # the one-row kernel
slots_match(_packed(ens, 0), X, "one row a block", full_q)
set_config(slot_quadrature_rows=2, quadrature_chunk_paths=3)  # several blocks
slots_match(_packed(ens, 0), X, "chunks of 3 paths")
set_config(quadrature_chunk_paths=256)
# the table kernel adding to global memory, the quadrature kernel without a shared tile
set_config(min_tile_rows=1 << 30, quadrature_shared_bytes=0)
assert plan_gpu.strategy_stats(_packed(ens, 700))["interaction_table_paths"] > 0  # tables still run
slots_match(_packed(ens, 700), X, "global")
set_config(min_tile_rows=8)
# small chunks, small tiles: some blocks sum in a tile, the others add to the row directly
# (with the rows' features in shared memory, then without)
set_config(quadrature_chunk_paths=3)
tiles = {}
for shared_bytes in (8 * 8 + 2 * 6 * 4, 8 * 8):
    set_config(quadrature_shared_bytes=shared_bytes)
    tiles[shared_bytes] = slots_match(_packed(ens, 0), X, ("mixed tiles", shared_bytes))
reset_config()
set_config(small_max_paths=0)
# launches too large for 32-bit offsets run the gathered kernel: forced here
import distshap.kernels.cuda.slot_quadrature as sq
flat_views = sq.slot_kernel_arrays
sq.slot_kernel_arrays = lambda lay: None
slots_match(_packed(ens, 700), X, "gathered kernel")
set_config(quadrature_chunk_paths=3, quadrature_shared_bytes=8 * 8 + 2 * 6 * 4)
slots_match(_packed(ens, 0), X, "gathered kernel, mixed tiles", tiles[8 * 8 + 2 * 6 * 4])
sq.slot_kernel_arrays = flat_views
reset_config()
set_config(small_max_paths=0)
# paths of 32 features (longer than a warp): the fallback kernel
Xc = np.full((1, 32), 0.25, np.float32)
Xc[0, 5] = 0.75
Xc[0, 30] = np.nan
slots_match(_packed(chain_ensemble(32, 32), 0), Xc, "fallback")
print("SIMULATOR-OK")
"""

_SIM_TOP_PAIRS = r"""  # after _SIM_COMMON
packed = _packed(ens, 700)  # tables beside quadrature
full = slots_match(packed, X, "mixed")
tops = {}
for k in (4, 15):  # 15: every pair, the zero ones last
    pairs, values = tops[k] = pi.top_interactions(packed, X, k, backend="cuda")
    want = sorted_pairs(full, k)
    assert np.array_equal(pairs, want[0]), k
    same(values, want[1], k)
# a model too wide for interaction tables (81 columns): quadrature only, global sums
wide = tiny.random_ensemble(4, n_features=80, n_trees=3, depth=3)
Xw = tiny.random_rows(5, wide, 2, 0.1)  # 2 rows: the finish launch simulates a thread an entry
packed_w = _packed(wide, 1 << 30)
assert plan_gpu.strategy_stats(packed_w)["interaction_tables_too_wide"]
full_w = slots_match(packed_w, Xw, "wide")
pairs, values = pi.top_interactions(packed_w, Xw, 3, backend="cuda")
want = sorted_pairs(full_w, 3)
assert np.array_equal(pairs, want[0])
same(values, want[1], "wide")
batched = pi.top_interactions(packed, X, 4, backend="cuda", batch_rows=3)
assert len(X) == 4 and all(np.array_equal(a, b) for a, b in zip(batched, tops[4]))
for signed in (False, True):
    got = pi.interaction_summary(packed, X, signed, backend="cuda")
    ref = full.astype(np.float64)
    ref = (ref if signed else np.abs(ref)).mean(axis=0)
    iu = np.triu_indices(ref.shape[-1])
    assert np.array_equal(got[:, iu[0], iu[1]], ref[:, iu[0], iu[1]]), signed  # exact
assert np.array_equal(got, pi.interaction_summary(packed, X, True, backend="cuda", batch_rows=3))
# large k: selection from the slot values on the host
kp.TOPK_SHARED_BYTES = 16
pairs, values = pi.top_interactions(packed, X, 4, backend="cuda")
assert np.array_equal(pairs, sorted_pairs(full, 4)[0])
kp.TOPK_SHARED_BYTES = 44 * 1024
print("SIMULATOR-OK")
"""


def test_pair_kernels_under_cuda_simulator():
    """The slot kernels in Numba's CUDA simulator against the GPU's own full matrices (which
    the simulator runs too): same bits in every variant (rows a block, chunks, tiles, tables,
    gathered and fallback kernels)."""
    assert_simulator_ok(_SIM_COMMON + _SIM_SLOT_KERNELS, timeout=900)


def test_pair_top_and_summary_under_cuda_simulator():
    """The top-k and summary kernels in Numba's CUDA simulator against the GPU's own full
    matrices: same top pairs and bits, exact sums."""
    assert_simulator_ok(_SIM_COMMON + _SIM_TOP_PAIRS, timeout=900)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("kind", ["regression", "multiclass", "missing", "categorical"])
@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["quadrature", "tables"])
def test_gpu_top_pairs_and_summary_equal_the_full_matrices(kind, budget):
    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = distshap.TreeExplainer(booster, backend="cuda", table_budget_bytes=budget).packed
    full = to_host(explain_rows(packed, X, True, "cuda"))
    F = packed.num_features
    for k in (1, 5, F * (F - 1) // 2):
        assert_same_top(pi.top_interactions(packed, X, k, "cuda"), full, k)
    for signed in (False, True):
        got = pi.interaction_summary(packed, X, signed, "cuda")
        ref = full.astype(np.float64)
        ref = (ref if signed else np.abs(ref)).mean(axis=0)
        iu = np.triu_indices(ref.shape[-1])
        assert np.array_equal(got[:, iu[0], iu[1]], ref[:, iu[0], iu[1]])
        nz = ref != 0
        assert (np.abs(got - ref)[nz] / np.abs(ref[nz])).max() <= 1e-5
        assert np.array_equal(got, pi.interaction_summary(packed, X, signed, "cuda",
                                                          batch_rows=7))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("kind", ["regression", "multiclass", "missing", "categorical"])
@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["quadrature", "tables"])
def test_gpu_slot_kernels_give_the_matrix_bits(kind, budget):
    """The slot kernels at 1-3 rows a block and small chunks give the bits of the full
    matrices' entries."""
    from distshap.kernels.cuda import pairs as kp
    from distshap.plan.config import config_context

    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = distshap.TreeExplainer(booster, backend="cuda", table_budget_bytes=budget).packed
    # the regular kernels for both (small models otherwise take the one-launch route)
    with config_context(small_max_paths=0):
        full = to_host(explain_rows(packed, X, True, "cuda"))
    slots = pair_slots(packed)
    group = _slot_groups(slots)
    want = full[:, group, slots.slot_i, slots.slot_j]
    for rows, chunk_paths in ((1, 256), (2, 16), (3, 16)):
        with config_context(small_max_paths=0, slot_quadrature_rows=rows,
                            quadrature_chunk_paths=chunk_paths):  # fmt: skip
            got = to_host(kp.interaction_slot_values(packed, X, slots, batch_rows=7))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (rows, chunk_paths)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_wide_models_cupy_in_out_and_batches():
    cp = pytest.importorskip("cupy")
    ens = tiny.random_ensemble(13, n_features=60, n_trees=20, depth=6, n_groups=3)
    X = tiny.random_rows(14, ens, 40, 0.1)
    packed = _packed(ens)
    full = to_host(explain_rows(packed, X, True, "cuda"))
    got = pi.top_interactions(packed, cp.asarray(X), 10, "cuda")
    assert isinstance(got[0], cp.ndarray) and isinstance(got[1], cp.ndarray)
    assert_same_top(got, full, 10)
    again = pi.top_interactions(packed, X, 10, "cuda", batch_rows=3)
    assert all(np.array_equal(to_host(a), b) for a, b in zip(got, again, strict=True))
    # large k: selection on the host
    assert_same_top(pi.top_interactions(packed, X, 1700, "cuda"), full, 1700)
    # the oversize (fallback) kernel
    from distshap.warmup import chain_ensemble

    chain = _packed(chain_ensemble(40, 45), 0)
    rng = np.random.default_rng(0)
    Xc = rng.choice(np.float32([0.25, 0.75, np.nan]), size=(30, 45), p=[0.9, 0.05, 0.05])
    full = to_host(explain_rows(chain, Xc, True, "cuda"))
    assert_same_top(pi.top_interactions(chain, Xc, 8, "cuda"), full, 8)
