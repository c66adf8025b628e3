"""What one call asks for: a :class:`Request`, validated once and consumed unchanged.

The explainer builds one for in-memory rows (:func:`make_request`), and
:func:`~distshap.cluster.explain_dask` one for a Dask collection on the client; the
single-device path (:func:`distshap.dispatch.run_request`) and every Dask chunk read it as it
is. The rules of what can be asked live here and nowhere else: interaction values explain the
margin only; ``model_output`` other than ``"raw"`` needs a background; a background must be the
model's; the backend is resolved where the rows are known (in memory: here; Dask: on the client
from the chunk kind, NumPy chunks with ``"auto"`` left to each worker's own GPU).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from distshap import kernels
from distshap.interventional import MODEL_OUTPUTS, transform_id
from distshap.kernels.interventional_math import LOG_LOSS, PROBABILITY, RAW, check_background

__all__ = ["METHODS", "Request", "make_request"]

#: The values a request can ask for: Shapley (SHAP) or Banzhaf.
METHODS = ("shap", "banzhaf")

_TARGETS = {
    RAW: "the model's margin",
    PROBABILITY: "the model's probability (the logistic of its margin)",
    LOG_LOSS: "the log loss of the model's probability for the labels y",
}


@dataclass(frozen=True)
class Request:
    """One call's question, as every device and chunk runs it.

    Attributes
    ----------
    interactions : bool
        SHAP interaction values instead of SHAP values.
    backend : {"auto", "cpu", "cuda"}
        Resolved (``"cpu"`` / ``"cuda"``) where the rows are known; ``"auto"`` only for Dask
        NumPy chunks, which each worker resolves for its own device.
    check : bool
        Check additivity (each row's values sum to its margin, or ``T(margin, y)``).
    model_output : {"raw", "probability", "log_loss"}
        What interventional values explain.
    transform : int
        The kernels' transform of ``model_output`` (:func:`distshap.interventional.transform_id`).
    background : distshap.interventional.Background or None
        Interventional values over these rows; ``None``: tree-path-dependent values.
    method : {"shap", "banzhaf"}
        Shapley values (and Shapley interaction values) or Banzhaf values (and Banzhaf
        interaction values; raw margin only, no additivity check).
    """

    interactions: bool = False
    backend: str = "auto"
    check: bool = True
    model_output: str = "raw"
    transform: int = RAW
    background: Any = None
    method: str = "shap"

    @property
    def needs_labels(self) -> bool:
        """Whether each row needs a label ``y`` (the log loss)."""
        return self.transform == LOG_LOSS

    @property
    def what(self) -> str:
        """The values' name in messages (``"interventional SHAP values"``, ...)."""
        values = "interaction values" if self.interactions else "SHAP values"
        if self.method == "banzhaf":
            values = "Banzhaf " + ("interaction values" if self.interactions else "values")
        return values if self.background is None else "interventional " + values

    @property
    def target(self) -> str:
        """What each row's values sum to, in messages."""
        return _TARGETS[self.transform]

    def for_chunks(self, kind: str) -> Request:
        """This request for Dask chunks of ``kind`` (``"numpy"`` or ``"cupy"``).

        CuPy chunks need CUDA, which the client can check (it holds CuPy); NumPy chunks keep
        ``"auto"``, which each worker resolves for its own device.
        """
        if kind != "cupy":
            return self
        backend = kernels.resolve_backend(self.backend, cupy_data=True)
        return dataclasses.replace(self, backend=backend)


def make_request(
    packed: Any,
    *,
    interactions: bool = False,
    backend: str = "auto",
    check: bool = True,
    background: Any = None,
    model_output: str = "raw",
    cupy_data: bool | None = False,
    method: str = "shap",
) -> Request:
    """Validate a call once -> its :class:`Request`.

    Parameters
    ----------
    packed : PackedModel
        The model the request runs on (its background must be built for it).
    interactions, backend, check, background, model_output
        As :class:`Request` names them; ``backend`` as the user gave it.
    cupy_data : bool or None
        Whether the rows are CuPy: the backend is resolved here for them. ``None``: rows of a
        Dask collection whose chunk kind is not known yet (only the name is checked;
        :meth:`Request.for_chunks` resolves it).
    method : {"shap", "banzhaf"}
        As :class:`Request` names it (Banzhaf: the raw margin only, never checked).

    Raises
    ------
    ValueError
        An unknown backend or ``model_output``; ``model_output`` other than ``"raw"`` without a
        background or for a model that has no such output; interactions of a transformed
        output; a background of another model.
    TypeError
        CuPy rows with ``backend="cpu"``; a background that is no ``Background``.
    RuntimeError
        ``backend="cuda"`` for in-memory rows where no GPU is usable.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown: use one of {METHODS}")
    transform = RAW
    if background is not None:
        check_background(background, packed)
        transform = transform_id(model_output, packed)
    elif model_output != "raw":
        if model_output not in MODEL_OUTPUTS:
            transform_id(model_output, packed)  # an unknown name says so first
        raise ValueError(
            f"model_output={model_output!r} is defined for interventional SHAP only: pass "
            "background data (e.g. a sample of the training rows), or use model_output='raw'"
        )
    if method == "banzhaf" and transform != RAW:
        raise ValueError(
            f"Banzhaf values explain the raw margin only, not model_output={model_output!r}: "
            "use a TreeExplainer built with model_output='raw'"
        )
    if interactions and transform != RAW:
        raise ValueError(
            f"SHAP interaction values explain the margin (the raw margin only), not "
            f"model_output={model_output!r}: shap has none of the {model_output} either; use "
            "model_output='raw' (a TreeExplainer built with it), or SHAP values for the "
            "transformed output"
        )
    if cupy_data is None:
        if backend not in kernels.BACKENDS:
            kernels.resolve_backend(backend)  # an unknown name, before anything is sent
    else:
        backend = kernels.resolve_backend(backend, cupy_data=cupy_data)
    check = bool(check) and method == "shap"  # Banzhaf values sum to no traversal's output
    return Request(bool(interactions), backend, check, model_output, transform, background, method)
