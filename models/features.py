"""Model features: forward FLOPs per sample f and parameters M, the inputs of the TPM (eq. 6).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` (2 FLOPs per multiply-add, ops
with a registered formula only: convs and the Linear; BN, ReLU and pooling count 0), on the
``meta`` device so no memory is touched. The table for 224x224 inputs ships as
``features.json``; other names and sizes are measured on first use and kept in memory.
Reading the table needs no torch; measuring imports it. ``main([NAME])`` prints one
measurement as JSON (the daemon measures that way, in a process of its own).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from adloader.errors import InputError
from adloader.host.atomic import write_json

from .names import PAPER_MODELS, parse

TABLE = "features.json"
DEFAULT_IMAGE_SIZE = 224


@dataclass(frozen=True)
class ModelFeatures:
    """One model's features for ``image_size`` x ``image_size`` RGB inputs."""

    name: str
    flops: float  # forward FLOPs per sample
    params: int
    size_bytes: int  # float32 parameters
    image_size: int = DEFAULT_IMAGE_SIZE

    @property
    def flops_g(self) -> float:
        """f: forward GFLOPs per sample."""
        return self.flops / 1e9

    @property
    def params_m(self) -> float:
        """M: parameters in millions."""
        return self.params / 1e6


def _count(name: str, image_size: int, device: str) -> tuple[float, int]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from .zoo import build

    with torch.device(device):
        model = build(name).eval()
        x = torch.empty(1, 3, image_size, image_size)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x)
    return float(counter.get_total_flops()), sum(p.numel() for p in model.parameters())


def measure(name: str, image_size: int = DEFAULT_IMAGE_SIZE) -> ModelFeatures:
    """Count a model's features now (no table, no cache): meta device, CPU as a fallback."""
    canonical = parse(name).name
    if not isinstance(image_size, int) or image_size < 1:
        raise InputError(f"image size for model {canonical!r} must be >= 1, got {image_size!r}")
    try:
        try:
            flops, params = _count(canonical, image_size, "meta")
        except NotImplementedError:  # an op without a meta kernel: count on real tensors
            flops, params = _count(canonical, image_size, "cpu")
    except RuntimeError as exc:  # e.g. a feature map pooled below 1x1
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(
            f"image size {image_size} too small for model {canonical!r}: {first}"
        ) from None
    return ModelFeatures(canonical, flops, params, 4 * params, image_size)


@cache
def _table() -> dict[tuple[str, int], ModelFeatures]:
    """The shipped table, keyed (name, image_size)."""
    try:
        text = resources.files(__package__).joinpath(TABLE).read_text(encoding="utf-8")
    except FileNotFoundError:  # not generated yet: everything is measured on demand
        return {}
    return {(k, v["image_size"]): ModelFeatures(name=k, **v) for k, v in json.loads(text).items()}


_measured: dict[tuple[str, int], ModelFeatures] = {}


def features(name: str, image_size: int = DEFAULT_IMAGE_SIZE) -> ModelFeatures:
    """A model's features: from the shipped table, else measured once and kept in memory."""
    key = (parse(name).name, image_size)
    found = _table().get(key) or _measured.get(key)
    if found is None:
        found = _measured[key] = measure(*key)
    return found


def default_path() -> Path:
    """Where the shipped table lives (inside the installed package)."""
    return Path(__file__).with_name(TABLE)


def regenerate(path: str | os.PathLike | None = None) -> Path:
    """Measure every PAPER_MODELS entry at 224x224 and write the table atomically."""
    target = Path(path) if path is not None else default_path()
    table = {}
    for name in PAPER_MODELS:
        row = asdict(measure(name, DEFAULT_IMAGE_SIZE))
        del row["name"]
        table[name] = row
    target.parent.mkdir(parents=True, exist_ok=True)
    write_json(target, table, indent=1, mode=0o644)  # it ships with the package
    if target.resolve() == default_path().resolve():
        _table.cache_clear()
    return target


def count(module, sample_shape: tuple[int, ...], name: str = "") -> ModelFeatures:
    """f and M of any ``torch.nn.Module``: FLOPs of one forward pass on one sample of
    ``sample_shape`` (counted by ``FlopCounterMode`` on a ``meta`` copy, nothing computed),
    parameters summed. For a user's own model, as a zoo model's are counted."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for p in module.parameters())
    try:
        ghost = copy.deepcopy(module).to("meta").eval()
        x = torch.empty((1, *sample_shape), device="meta")
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            ghost(x)
        flops = float(counter.get_total_flops())
    except Exception as exc:  # a model that cannot run on meta tensors, or a wrong shape
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"cannot count the FLOPs of {name or type(module).__name__} on an "
                         f"input of shape {tuple(sample_shape)}: {first}; pass features="
                         "(flops_g, params_m) instead") from None
    if flops <= 0:
        raise InputError(f"{name or type(module).__name__}: no FLOPs counted (no op with a "
                         "registered formula ran); pass features=(flops_g, params_m) instead")
    return ModelFeatures(name or type(module).__name__, flops, params, 4 * params,
                         int(sample_shape[-1]) if sample_shape else 0)


def lookup(name: str, image_size: int = DEFAULT_IMAGE_SIZE) -> ModelFeatures | None:
    """A model's features if known without measuring (the table, or measured before)."""
    key = (parse(name).name, image_size)
    return _table().get(key) or _measured.get(key)


def measured() -> list[ModelFeatures]:
    """What was measured in this process (or remembered), beyond the shipped table."""
    return list(_measured.values())


def remember(found: ModelFeatures) -> None:
    """Keep a measurement made elsewhere (another process) for later lookups."""
    _measured[(found.name, found.image_size)] = found


def main(argv: list[str] | None = None) -> int:
    """``NAME [IMAGE_SIZE]``: print one measurement as JSON (for ``MEASURE_COMMAND``)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        size = int(args[1]) if len(args) > 1 else DEFAULT_IMAGE_SIZE
        found = features(args[0], size)
    except (InputError, ValueError, IndexError) as exc:
        print(json.dumps({"error": str(exc) or "usage: NAME [IMAGE_SIZE]"}))
        return 2
    print(json.dumps(asdict(found)))
    return 0


MEASURE_COMMAND = [sys.executable, "-c", "import sys; from adloader.models.features import main; "
                   "sys.exit(main(sys.argv[1:]))"]
