"""The model zoo: ImageNet-style ResNet and VGG networks in plain ``torch.nn``, looked up by name.

A name is ``[md|sm]Resnet<depth>`` or ``[md|sm]VGG<depth>`` (A-Dloader §IV-A): ``md`` is the
2x narrower variant (every channel width halved), ``sm`` the 4x narrower one (widths / 4).

ResNet (basic blocks): depth = 2·blocks + 2, so depth is even and >= 10. ImageNet stem (7x7/2
conv, BN, ReLU, 3x3/2 max-pool), four stages of widths 64, 128, 256, 512, global average pool,
one Linear. Blocks per stage:

    depth  12        18        20        22        28        32        34
    stages 1,1,2,1   2,2,2,2   2,2,3,2   2,2,3,3   3,3,4,3   3,3,6,3   3,4,6,3

18 and 34 are He et al.'s; 12..32 are the layouts whose parameter counts match the paper's
Table III (mdResnet12 1.8 M, mdResnet20 3.4 M, smResnet22 1.2 M, Resnet28 19 M, Resnet32
21.5 M, smResnet32 1.4 M). Any other depth apportions its (depth-2)/2 blocks over the stages
by largest remainder with weights 3, 4, 6, 3, each stage >= 1 (e.g. 14 -> 1,2,2,1;
24 -> 2,3,4,2; 50 -> 5,6,9,4).

VGG: depth - 3 conv3x3+BN+ReLU layers in five stages of widths 64, 128, 256, 512, 512, a
2x2 max-pool after each non-empty stage, global average pool, one Linear (VGG13: 9.9 M
parameters, as in Table III). Every stage gets one conv, front to back, until they run out;
extra convs go in rounds from the last stage backwards, the first round over stages 5..1,
later rounds over 5..3: VGG7 1,1,1,1,0; VGG11 1,1,2,2,2; VGG13 2,2,2,2,2; VGG16 2,2,3,3,3;
VGG19 2,2,4,4,4.
"""

from __future__ import annotations

from torch import Tensor, nn

from adloader.errors import InputError

from .names import (  # noqa: F401  (the zoo's names, for its users)
    MAX_DEPTH,
    PAPER_MODELS,
    RESNET_LAYOUTS,
    RESNET_WIDTHS,
    VGG_WIDTHS,
    WIDTH_PREFIXES,
    ModelSpec,
    canonical_name,
    largest_remainder,
    list_models,
    parse,
    resnet_layout,
    vgg_layout,
)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with BN, identity (or 1x1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ImageNet ResNet with basic blocks; ``layout`` gives blocks per stage."""

    def __init__(self, layout: tuple[int, ...], widths: tuple[int, ...], num_classes: int):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages, cin = [], widths[0]
        for i, (blocks, cout) in enumerate(zip(layout, widths, strict=True)):
            layers = [BasicBlock(cin if b == 0 else cout, cout, 2 if i and b == 0 else 1)
                      for b in range(blocks)]  # fmt: skip
            stages.append(nn.Sequential(*layers))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(self.stages(self.stem(x))).flatten(1))


class VGG(nn.Module):
    """VGG with BN: ``layout`` gives 3x3 convs per stage, a 2x2 max-pool after each used stage."""

    def __init__(self, layout: tuple[int, ...], widths: tuple[int, ...], num_classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for convs, cout in zip(layout, widths, strict=True):
            for _ in range(convs):
                layers += [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                           nn.ReLU(inplace=True)]  # fmt: skip
                cin = cout
            if convs:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(self.features(x)).flatten(1))


def _init(model: nn.Module) -> None:
    """He-normal conv weights, as torchvision (free on the ``meta`` device)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def build(name: str, num_classes: int = 1000) -> nn.Module:
    """A freshly initialised model for ``name``; honours ``torch.device(...)`` as a context."""
    spec = parse(name)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise InputError(f"num_classes for model {spec.name!r} must be >= 1, got {num_classes!r}")
    cls = ResNet if spec.family == "resnet" else VGG
    return cls(spec.layout, spec.widths, num_classes)
