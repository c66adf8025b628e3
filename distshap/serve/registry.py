"""The models a server answers for: registered by name (and version) from files, packed once.

A model is given as ``NAME[:VERSION]=PATH[,background=FILE][,output=raw|probability]``: the
model file (XGBoost ``.json`` / ``.ubj``, LightGBM ``.txt``; parsed, never unpickled) and,
optionally, a background file (Parquet, CSV or ``.npy``) whose rows make its interventional
values, of the margin or of a binary logistic model's probability. Each model is loaded and
packed once, at start; the interventional explainer shares the packed model.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distshap.plan.config import Config, get_config
from distshap.serve.protocol import ProtocolError

__all__ = [
    "OUTPUTS",
    "ModelSpec",
    "Registry",
    "RegisteredModel",
    "Resident",
    "check_files",
    "output_ks",
    "output_label",
    "parse_model_spec",
]

#: Output name -> what it is, for metadata and errors.
OUTPUTS = {
    "shap_values": "SHAP values, XGBoost's pred_contribs layout (bias last)",
    "margin": "the model's margin (raw score) from an independent tree traversal",
    "interaction_values": "SHAP interaction values, XGBoost's pred_interactions layout",
    "top_interactions": "the k strongest feature pairs of each row (parameter k)",
    "interventional_values": "interventional SHAP values over the registered background, "
    "XGBoost's pred_contribs layout (bias last)",
}
#: The extra tensor that comes with top_interactions: the pairs' feature indices.
PAIRS_OUTPUT = "top_interactions_pairs"


@dataclass(frozen=True)
class ModelSpec:
    """A model to register: name, version, model file, background file and output."""

    name: str
    path: str
    version: str = "1"
    background: str | None = None
    output: str = "raw"


def parse_model_spec(text: str) -> ModelSpec:
    """``NAME[:VERSION]=PATH[,background=FILE][,output=raw|probability]`` -> :class:`ModelSpec`.

    Raises
    ------
    ValueError
        A malformed spec, an unknown option or output.
    """
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--model {text!r}: expected NAME=PATH (e.g. housing=model.json)")
    name, _, version = name.partition(":")
    path, *options = rest.split(",")
    kwargs: dict[str, str] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if key not in ("background", "output") or not sep or not value:
            raise ValueError(
                f"--model {text!r}: unknown option {option!r}; options are background=FILE "
                "and output=raw|probability"
            )
        kwargs[key] = value
    if kwargs.get("output", "raw") not in ("raw", "probability"):
        raise ValueError(f"--model {text!r}: output must be raw or probability")
    if "output" in kwargs and "background" not in kwargs:
        raise ValueError(f"--model {text!r}: output= needs background=FILE (interventional)")
    return ModelSpec(name, path, version or "1", **kwargs)


@dataclass(frozen=True, eq=False)
class Resident:
    """What every worker keeps of a model: its explainers (``digest`` keys the shipping)."""

    digest: str
    explainer: Any
    interventional: Any = None
    #: The configuration in force when the model was registered: every block runs under it,
    #: in this process and on the workers, so served values are the explainer's.
    config: Config = field(default_factory=get_config)


def _read_background(path: str, explainer: Any) -> np.ndarray:
    from distshap import io

    ds = io.select_features(io.read_data(path), explainer.packed)
    rows = io.model_rows(ds, explainer.packed).compute(scheduler="threads")
    if len(rows) == 0:
        raise ValueError(f"background {path!r} has no rows: give at least one")
    return np.asarray(rows)


@dataclass(eq=False)
class RegisteredModel:
    """One registered model: its explainers, shape and the outputs it offers."""

    spec: ModelSpec
    resident: Resident
    num_features: int
    groups: int
    feature_names: tuple[str, ...]
    outputs: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def version(self) -> str:
        return self.spec.version

    def check_output(self, name: str, params: dict) -> int:
        """The ``k`` of an output asked for (0 when it takes none); 400 for what it refuses."""
        if name not in self.outputs:
            why = " (register the model with background=FILE)" if name in OUTPUTS else ""
            raise ProtocolError(
                400,
                f"outputs: unknown output {name!r} for model {self.name!r}{why}; choose "
                f"among {', '.join(self.outputs)}",
            )
        allowed = {"k"} if name == "top_interactions" else set()
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ProtocolError(
                400,
                f"outputs[{name}].parameters: unknown parameter {unknown[0]!r}; "
                + ("top_interactions takes k" if allowed else f"{name} takes none"),
            )
        if name != "top_interactions":
            return 0
        k = params.get("k", 10)
        pairs = self.num_features * (self.num_features - 1) // 2
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= pairs:
            raise ProtocolError(
                400, f"outputs[top_interactions].parameters.k must be an integer in 1..{pairs}, "
                f"got {k!r}",
            )  # fmt: skip
        return k

    def metadata(self) -> dict:
        """The protocol's model metadata (inputs, outputs, feature names, output groups)."""
        F, G = self.num_features, self.groups
        lead = [-1] if G == 1 else [-1, G]
        shapes = {
            "shap_values": ("FP32", [*lead, F + 1]),
            "margin": ("FP64", lead),
            "interaction_values": ("FP32", [*lead, F + 1, F + 1]),
            "top_interactions": ("FP32", [*lead, -1]),
            PAIRS_OUTPUT: ("INT32", [*lead, -1, 2]),
            "interventional_values": ("FP32", [*lead, F + 1]),
        }
        names = (
            [*self.outputs, PAIRS_OUTPUT] if "top_interactions" in self.outputs else self.outputs
        )
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": "distshap",
            "inputs": [{"name": "rows", "datatype": "FP32", "shape": [-1, F]}],
            "outputs": [
                {"name": n, "datatype": shapes[n][0], "shape": shapes[n][1]} for n in names
            ],
            "parameters": {
                "feature_names": list(self.feature_names),
                "output_groups": G,
                "model_output": self.spec.output if self.spec.background else "raw",
                "background": self.spec.background is not None,
            },
        }


def check_files(spec: ModelSpec) -> None:
    """FileNotFoundError naming the model or background file of ``spec`` that is missing."""
    for what, path in (("model", spec.path), ("background", spec.background)):
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(f"{what} file {path!r} of model {spec.name!r} does not exist")


def load_model(spec: ModelSpec, backend: str = "auto") -> RegisteredModel:
    """Load, pack and check one model (and read its background) -> :class:`RegisteredModel`."""
    from distshap.explainer import TreeExplainer

    check_files(spec)
    explainer = TreeExplainer(spec.path, layout="xgboost", backend=backend)
    interventional = None
    digest = explainer.packed.digest
    if spec.background is not None:
        rows = _read_background(spec.background, explainer)
        interventional = explainer._with_background(rows, spec.output)
        bg = hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest()[:16]
        digest = f"{digest}-{bg}-{spec.output}"
    outputs = ["shap_values", "margin", "interaction_values", "top_interactions"]
    if explainer.num_features < 2:
        outputs.remove("top_interactions")
    if interventional is not None:
        outputs.append("interventional_values")
    return RegisteredModel(
        spec,
        Resident(digest, explainer, interventional),
        explainer.num_features,
        int(np.size(explainer.expected_value)),
        explainer.output_feature_names(),
        tuple(outputs),
    )


class Registry:
    """The registered models by name (one version each)."""

    def __init__(self, models: list[RegisteredModel]) -> None:
        self.models: dict[str, RegisteredModel] = {}
        for model in models:
            if model.name in self.models:
                raise ValueError(f"model name {model.name!r} registered twice: give each a name")
            self.models[model.name] = model

    @classmethod
    def from_specs(cls, specs: list[ModelSpec], backend: str = "auto") -> Registry:
        """Load every model of ``specs``."""
        return cls([load_model(spec, backend) for spec in specs])

    def get(self, name: str, version: str | None = None) -> RegisteredModel:
        """The model ``name`` (at ``version``); 404 when there is none."""
        model = self.models.get(name)
        if model is None or (version not in (None, "", model.version)):
            known = ", ".join(f"{m.name} (version {m.version})" for m in self.models.values())
            raise ProtocolError(404, f"unknown model {name!r} version {version!r}; known: {known}")
        return model


def output_ks(model: Any, specs: tuple, parameters: dict) -> list[int]:
    """Each output's ``k`` (0 for outputs that take none); the request's ``k`` (as tritonclient
    sends parameters) applies to ``top_interactions`` unless the output gives its own."""
    unknown = sorted(set(parameters) - {"k"})
    if unknown:
        raise ProtocolError(
            400, f"parameters: unknown parameter {unknown[0]!r}; the request takes k (for "
            "top_interactions) and the protocol's binary_data_output",
        )  # fmt: skip
    if "k" in parameters and not any(s.name == "top_interactions" for s in specs):
        raise ProtocolError(400, "parameters.k applies to top_interactions: ask for that output")
    names = [spec.name for spec in specs]
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ProtocolError(400, f"outputs: {twice[:80]!r} is asked for twice: name each output "
                                 "once")  # fmt: skip
    ks = []
    for spec in specs:
        params = spec.parameters
        if spec.name == "top_interactions":
            params = {**parameters, **params}
        ks.append(model.check_output(spec.name, params))
    return ks


def output_label(specs: tuple) -> str:
    """The metrics' ``output`` label of a request: its outputs' names, sorted (one series for
    the same outputs in any order)."""
    return ",".join(sorted(spec.name for spec in specs))
