"""The DNN zoo that workloads train (ResNet / VGG and the papers' md/sm narrow variants) and
each model's features (forward FLOPs f, parameters M) for the throughput model.

Names and the features table load without torch; ``build`` (the zoo itself) imports torch
on first use. Note: ``adloader.models.features`` as an attribute is the function; import the
module's other names with ``from adloader.models.features import ...``."""

from .features import ModelFeatures, features
from .names import PAPER_MODELS, ModelSpec, list_models, parse

__all__ = [
    "PAPER_MODELS",
    "ModelFeatures",
    "ModelSpec",
    "build",
    "features",
    "list_models",
    "parse",
]


def __getattr__(name: str):
    if name == "build":
        from .zoo import build

        return build
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
