"""Model names, parsed without torch: ``[md|sm]Resnet<depth>`` and ``[md|sm]VGG<depth>``.

A name is checked, canonicalised and turned into its per-stage layout here (A-Dloader §IV-A;
the layouts are described in ``adloader.models.zoo``), so the daemon, the job spec and the
CLI can validate a model without importing torch. Depth is bounded (``MAX_DEPTH``): a name
is a tenant's input, and the cost of counting a model's FLOPs grows with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from adloader.errors import InputError

RESNET_WIDTHS = (64, 128, 256, 512)
VGG_WIDTHS = (64, 128, 256, 512, 512)
WIDTH_PREFIXES = {"": 1.0, "md": 0.5, "sm": 0.25}
_FAMILIES = {"resnet": "Resnet", "vgg": "VGG"}
MAX_DEPTH = 1000
_NAME = re.compile(r"^(md|sm)?(resnet|vgg)(\d{1,6})$", re.IGNORECASE)
_EXPECTED = "expected Resnet<depth>, VGG<depth>, with optional md/sm prefix"

# Fixed ResNet layouts: He et al.'s 18/34 and those matching A-Dloader Table III's sizes.
RESNET_LAYOUTS: dict[int, tuple[int, ...]] = {
    12: (1, 1, 2, 1),
    18: (2, 2, 2, 2),
    20: (2, 2, 3, 2),
    22: (2, 2, 3, 3),
    28: (3, 3, 4, 3),
    32: (3, 3, 6, 3),
    34: (3, 4, 6, 3),
}
_RESNET_WEIGHTS = (3, 4, 6, 3)

PAPER_MODELS: tuple[str, ...] = tuple(
    prefix + base
    for base in (
        "Resnet12", "Resnet18", "Resnet20", "Resnet22", "Resnet28", "Resnet32", "Resnet34",
        "VGG7", "VGG11", "VGG13", "VGG16",
    )
    for prefix in ("", "md", "sm")
)  # fmt: skip


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name: family, depth, width multiplier and the per-stage layout."""

    name: str  # canonical, e.g. "mdResnet12"
    family: str  # "resnet" | "vgg"
    depth: int
    width: float  # 1.0, 0.5 (md) or 0.25 (sm)
    layout: tuple[int, ...]  # ResNet: blocks per stage; VGG: convs per stage

    @property
    def widths(self) -> tuple[int, ...]:
        """Channel width of each stage, scaled by the width multiplier."""
        base = RESNET_WIDTHS if self.family == "resnet" else VGG_WIDTHS
        return tuple(int(w * self.width) for w in base)


def largest_remainder(total: int, weights: tuple[int, ...], minimum: int = 1) -> tuple[int, ...]:
    """Split ``total`` in proportion to ``weights`` (Hamilton's method), each part >= minimum."""
    if total < minimum * len(weights):
        raise ValueError(f"cannot split {total} into {len(weights)} parts of >= {minimum}")
    quotas = [total * w / sum(weights) for w in weights]
    parts = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - parts[i]), -weights[i], i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    for i in range(len(parts)):  # lift any stage below the minimum, taking from the largest
        while parts[i] < minimum:
            donor = max(range(len(parts)), key=lambda j: (parts[j], weights[j]))
            parts[donor] -= 1
            parts[i] += 1
    return tuple(parts)


def resnet_layout(depth: int) -> tuple[int, ...]:
    """Basic blocks per stage for a ResNet of ``depth`` = 2·blocks + 2 (see module docstring)."""
    if depth < 10 or depth % 2 or depth > MAX_DEPTH:
        raise ValueError(f"ResNet depth must be even, >= 10 and <= {MAX_DEPTH} "
                         "(depth = 2 x blocks + 2)")
    return RESNET_LAYOUTS.get(depth) or largest_remainder((depth - 2) // 2, _RESNET_WEIGHTS)


def vgg_layout(depth: int) -> tuple[int, ...]:
    """Convs per stage for a VGG of ``depth`` = convs + 3 (see module docstring)."""
    if depth < 4 or depth > MAX_DEPTH:
        raise ValueError(f"VGG depth must be >= 4 and <= {MAX_DEPTH} (depth = convolutions + 3)")
    convs = depth - 3
    layout = [1 if i < convs else 0 for i in range(5)]
    extra, first = convs - sum(layout), True
    while extra > 0:
        for stage in (4, 3, 2, 1, 0) if first else (4, 3, 2):
            if extra == 0:
                break
            layout[stage] += 1
            extra -= 1
        first = False
    return tuple(layout)


def parse(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a model name; InputError for an unknown name or bad depth."""
    match = _NAME.match(name.strip()) if isinstance(name, str) and len(name) <= 64 else None
    if not match:
        raise InputError(f"unknown model {name!r}: {_EXPECTED}")
    prefix, family, depth = (match.group(1) or "").lower(), match.group(2).lower(), match.group(3)
    canonical = f"{prefix}{_FAMILIES[family]}{int(depth)}"
    try:
        layout = resnet_layout(int(depth)) if family == "resnet" else vgg_layout(int(depth))
    except ValueError as exc:
        raise InputError(f"invalid depth in model {name!r}: {exc}") from None
    return ModelSpec(canonical, family, int(depth), WIDTH_PREFIXES[prefix], layout)


def canonical_name(name: str) -> str:
    """The canonical spelling of a model name (``resnet18`` -> ``Resnet18``)."""
    return parse(name).name


def list_models(family: str | None = None) -> list[str]:
    """The paper's model names (PAPER_MODELS), optionally only one family ('resnet'|'vgg')."""
    return [n for n in PAPER_MODELS if family is None or parse(n).family == family.lower()]
