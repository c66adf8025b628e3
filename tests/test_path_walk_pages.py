"""The walk's output arrays in mappings of their own (:func:`distshap.pages.page_array`).

Large ones come from an anonymous memory mapping (no transparent-huge-page hint), small ones
from ``np.empty``; either is an ordinary writable NumPy array to NumPy, Numba and pickle.
"""

from __future__ import annotations

import mmap
import pickle

import numpy as np
from numba import njit

from distshap.pages import PAGE_ARRAY_BYTES, page_array


@njit(cache=False)
def _write(a, step):
    for i in range(0, a.shape[0], step):
        a[i] = i


def test_a_large_array_is_mapped_zeroed_writable_and_pickles() -> None:
    n = PAGE_ARRAY_BYTES // 8 + 3
    a = page_array(n, np.float64)
    assert isinstance(getattr(a.base, "obj", a.base), mmap.mmap)  # a view of the mapping
    assert a.dtype == np.float64 and a.shape == (n,)
    assert a.flags.writeable and a.flags.c_contiguous and not a.any()
    _write(a, 4097)  # a compiled function writes it, as the walk does
    assert a[4097] == 4097.0 and a[1] == 0.0
    back = pickle.loads(pickle.dumps(a))
    assert back.dtype == a.dtype and np.array_equal(back, a)
    buffers: list = []  # protocol 5, out-of-band buffers (as Dask sends arrays)
    data = pickle.dumps(a, protocol=5, buffer_callback=buffers.append)
    assert np.array_equal(pickle.loads(data, buffers=buffers), a)


def test_a_small_array_is_numpys_own() -> None:
    a = page_array(10, np.int32)
    assert a.base is None and a.dtype == np.int32 and a.shape == (10,)
    assert page_array(0, np.bool_).shape == (0,)
