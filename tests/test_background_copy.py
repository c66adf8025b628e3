"""A background keeps its own copy of the rows: writing the caller's array afterwards changes
no value (the margins, the CPU pattern tables and the rows must describe the same data)."""

from __future__ import annotations

import numpy as np
from test_interventional import pack

from distshap.dispatch import explain_rows
from distshap.interventional import build_background
from distshap.plan.config import config_context

import tiny


def test_writing_the_background_array_afterwards_changes_no_value():
    ens = tiny.random_ensemble(4, n_features=6, n_trees=3, depth=5)
    packed = pack(ens)
    assert packed.encoding.identity  # float32 rows reach the background as they are
    X = tiny.random_rows(1, ens, n=8)
    B = np.ascontiguousarray(tiny.random_rows(2, ens, n=9), dtype=np.float32)
    original = B.copy()
    background = build_background(packed, B)
    assert not np.shares_memory(background.rows, B)
    # some paths through pattern tables (kept with the background), the others read its rows
    with config_context(interventional_table_max_features=2):
        before = explain_rows(packed, X, False, "cpu", background=background)
        B += 1.0
        after = explain_rows(packed, X, False, "cpu", background=background)
        fresh = explain_rows(packed, X, False, "cpu",
                             background=build_background(packed, original))  # fmt: skip
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(after, fresh)
