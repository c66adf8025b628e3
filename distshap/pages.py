"""Large host arrays of a model's build in memory mappings of their own.

The walk's second pass and the packing write arrays of a large model, a gigabyte for millions
of paths, once each. :func:`page_array` gives them pages without NumPy's transparent-huge-page
hint (see its docstring for why).
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["PAGE_ARRAY_BYTES", "page_array"]

#: Arrays of at least this many bytes come from :func:`page_array`'s own mapping (NumPy's
#: threshold for its huge-page hint); smaller ones from ``np.empty``.
PAGE_ARRAY_BYTES = 1 << 22


def page_array(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An array of ``n`` items of ``dtype`` for the build to fill, in an anonymous memory
    mapping of its own: without the transparent-huge-page hint NumPy gives its arrays of 4 MB
    and more (``madvise(MADV_HUGEPAGE)``).

    The second pass writes a large model's lanes, a gigabyte for millions of paths, in packed
    order. Where the kernel compacts memory into huge pages when an advised page is first
    touched (``/sys/kernel/mm/transparent_hugepage/defrag`` ``madvise``), that compaction was
    most of a large model's build (``benchmarks/RESULTS.md``, the host build stage by stage);
    unadvised, the pages are the kernel's usual ones. Its contents are undefined (as
    ``numpy.empty``'s): the caller writes every item. The mapping is released with the array.
    """
    dtype = np.dtype(dtype)
    if n * dtype.itemsize < PAGE_ARRAY_BYTES:
        return np.empty(n, dtype)
    try:
        return np.frombuffer(mmap.mmap(-1, n * dtype.itemsize), dtype, count=n)
    except (OSError, ValueError):  # no anonymous mappings here: NumPy's allocation
        return np.empty(n, dtype)
