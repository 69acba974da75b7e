"""``adloader models list | features NAME | regenerate``: the zoo and its features table."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from rich.table import Table

from adloader.models.features import ModelFeatures, features, regenerate
from adloader.models.names import PAPER_MODELS

from . import _output


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``models`` and its actions to the ``adloader`` parser."""
    parser = sub.add_parser("models", help="the model zoo and its FLOPs/parameter table")
    parser.set_defaults(func=lambda args: _help(parser))
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION")

    p = actions.add_parser("list", help="the paper's models with GFLOPs, parameters and size")
    p.set_defaults(func=_list)

    p = actions.add_parser("features", help="one model's features as JSON")
    p.add_argument("name", metavar="NAME", help="e.g. Resnet18, mdResnet12, smVGG7")
    p.add_argument("--image-size", type=int, default=224,
                   help="input height and width in pixels (default 224)")  # fmt: skip
    p.set_defaults(func=_features)

    p = actions.add_parser("regenerate", help="recompute the shipped features table")
    p.add_argument("-o", "--output", default=None,
                   help="write here instead of the package's features.json")  # fmt: skip
    p.set_defaults(func=_regenerate)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _list(args: argparse.Namespace) -> int:
    table = Table(title="forward per sample, 224x224")
    table.add_column("model")
    for col in ("GFLOPs", "params M", "size MB"):
        table.add_column(col, justify="right")
    for name in PAPER_MODELS:
        f = features(name)
        table.add_row(name, f"{f.flops_g:.3f}", f"{f.params_m:.3f}", f"{f.size_bytes / 1e6:.1f}")
    _output.console().print(table)
    return 0


def _json(f: ModelFeatures) -> str:
    return json.dumps({**asdict(f), "flops_g": f.flops_g, "params_m": f.params_m}, indent=2)


def _features(args: argparse.Namespace) -> int:
    print(_json(features(args.name, args.image_size)))
    return 0


def _regenerate(args: argparse.Namespace) -> int:
    print(f"wrote {regenerate(args.output)}")
    return 0
