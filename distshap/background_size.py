"""A warning for a background large enough to make interventional values slow.

Interventional SHAP values integrate every explained row over every background row, so the
time of a call grows linearly with the background's row count. shap's ``TreeExplainer`` warns
above :data:`LARGE_BACKGROUND_ROWS` rows and suggests sampling; :func:`warn_large_background`
does the same, once per explainer (it is called where the explainer reads its background).
distshap uses the background whole, as shap's ``TreeExplainer`` does when given the rows
themselves.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["LARGE_BACKGROUND_ROWS", "warn_large_background"]

#: Backgrounds of more rows than this draw the warning (shap's threshold).
LARGE_BACKGROUND_ROWS = 1_000

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points the warning at the first frame outside distshap."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn_large_background(n_rows: int) -> None:
    """Warn (``UserWarning``) when a background of ``n_rows`` rows will make calls slow.

    Parameters
    ----------
    n_rows : int
        Rows of the background the explainer integrates over (it uses them all).
    """
    if n_rows <= LARGE_BACKGROUND_ROWS:
        return
    warnings.warn(
        f"the background has {n_rows:,} rows and is used whole: interventional values take "
        f"time linear in the background's rows (each explained row is compared with all "
        f"{n_rows:,}); 100 to 1,000 rows are typical, e.g. shap.sample(X, 100) or "
        "X[np.random.default_rng(0).choice(len(X), 100, replace=False)]",
        UserWarning,
        stacklevel=_caller_stacklevel(),
    )
