"""The DNN zoo that workloads train (ResNet / VGG and the papers' md/sm narrow variants) and
each model's features (forward FLOPs f, parameters M) for the throughput model.

Note: ``adloader.models.features`` as an attribute is the function; import the module's other
names with ``from adloader.models.features import ...``."""

from .features import ModelFeatures, features
from .zoo import PAPER_MODELS, ModelSpec, build, list_models, parse

__all__ = [
    "PAPER_MODELS",
    "ModelFeatures",
    "ModelSpec",
    "build",
    "features",
    "list_models",
    "parse",
]
