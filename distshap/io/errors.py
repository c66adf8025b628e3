"""The error every file problem of :mod:`distshap.io` raises (a ``ValueError``, exit code 2)."""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad input or output files: the message names the file, what is wrong and the fix."""
