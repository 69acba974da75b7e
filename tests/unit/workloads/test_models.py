"""The model zoo: name parsing, layouts, narrow variants, features table and the CLI."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from adloader import cli
from adloader.errors import InputError
from adloader.models import PAPER_MODELS, build, features, list_models, parse
from adloader.models.features import default_path, measure, regenerate
from adloader.models.zoo import largest_remainder


@pytest.mark.parametrize(
    "name", ["", "Resnet", "ResNext50", "xlResnet18", "VGG-13", "Resnet18x", "mdsmVGG7", 18]
)
def test_unknown_names_raise_one_line_input_error(name):
    with pytest.raises(InputError, match="unknown model") as exc:
        parse(name)
    assert "\n" not in str(exc.value) and "md/sm prefix" in str(exc.value)


@pytest.mark.parametrize(
    ("name", "rule"), [("Resnet11", "even"), ("Resnet8", ">= 10"), ("VGG3", ">= 4")]
)
def test_invalid_depths_name_the_rule(name, rule):
    with pytest.raises(InputError, match="depth") as exc:
        parse(name)
    assert rule in str(exc.value) and name in str(exc.value)


def test_names_are_canonicalised_case_insensitively():
    assert parse("resnet18").name == "Resnet18"
    assert parse("MDRESNET12").name == "mdResnet12"
    spec = parse("smvgg7")
    assert (spec.name, spec.family, spec.depth, spec.width) == ("smVGG7", "vgg", 7, 0.25)
    assert parse("mdVGG13").widths == (32, 64, 128, 256, 256)
    assert set(list_models()) == set(PAPER_MODELS) and len(PAPER_MODELS) == 33
    assert all(parse(n).name == n for n in PAPER_MODELS)
    assert list_models("vgg") == [n for n in PAPER_MODELS if "VGG" in n]


@pytest.mark.parametrize(
    ("depth", "layout"),
    [(10, (1, 1, 1, 1)), (12, (1, 1, 2, 1)), (18, (2, 2, 2, 2)), (20, (2, 2, 3, 2)),
     (22, (2, 2, 3, 3)), (28, (3, 3, 4, 3)), (32, (3, 3, 6, 3)), (34, (3, 4, 6, 3)),
     (24, (2, 3, 4, 2)), (50, (5, 6, 9, 4))],
)  # fmt: skip
def test_resnet_layouts(depth, layout):
    spec = parse(f"Resnet{depth}")
    assert spec.layout == layout and 2 * sum(layout) + 2 == depth


@pytest.mark.parametrize(
    ("depth", "layout"),
    [(4, (1, 0, 0, 0, 0)), (7, (1, 1, 1, 1, 0)), (11, (1, 1, 2, 2, 2)), (13, (2, 2, 2, 2, 2)),
     (16, (2, 2, 3, 3, 3)), (19, (2, 2, 4, 4, 4))],
)  # fmt: skip
def test_vgg_layouts(depth, layout):
    assert parse(f"VGG{depth}").layout == layout and sum(layout) + 3 == depth


def test_largest_remainder_keeps_every_stage_and_the_total():
    for total in range(4, 60):
        parts = largest_remainder(total, (3, 4, 6, 3))
        assert sum(parts) == total and min(parts) >= 1
    with pytest.raises(ValueError):
        largest_remainder(3, (3, 4, 6, 3))


def test_layers_built_match_the_layout():
    with torch.device("meta"):
        resnet, vgg = build("Resnet28"), build("VGG16", num_classes=10)
    assert [len(stage) for stage in resnet.stages] == [3, 3, 4, 3]
    assert sum(isinstance(m, torch.nn.Conv2d) for m in vgg.features) == 13
    assert vgg.fc.out_features == 10 and resnet.fc.out_features == 1000
    with pytest.raises(InputError, match="num_classes"):
        build("VGG7", num_classes=0)


@pytest.mark.parametrize("base", ["Resnet18", "Resnet34", "VGG13"])
def test_narrow_variants_shrink_parameters(base):
    full, md, sm = (features(p + base).params for p in ("", "md", "sm"))
    assert 3.5 < full / md < 4.3  # stem input (3 channels) and the FC's outputs do not shrink
    assert 12 < full / sm < 16.5


def test_resnet18_matches_the_reference_within_one_percent():
    f = measure("Resnet18")
    assert f.flops_g == pytest.approx(3.63, rel=0.01)
    assert f.params_m == pytest.approx(11.69, rel=0.01)
    assert f.size_bytes == 4 * f.params and f.image_size == 224


def test_paper_table_iii_sizes():
    # A-Dloader Table III gives "FLOPs" as multiply-adds and model size in M parameters.
    for name, macs_g, params_m in [("mdResnet20", 0.5, 3.4), ("Resnet32", 3.4, 21.5),
                                   ("VGG13", 11, 9.9), ("mdResnet12", 0.3, 1.8),
                                   ("smResnet32", 0.2, 1.4), ("Resnet28", 3.0, 19)]:  # fmt: skip
        f = features(name)
        assert f.params_m == pytest.approx(params_m, rel=0.05), name
        assert f.flops_g / 2 == pytest.approx(macs_g, rel=0.2), name


def test_shipped_table_equals_fresh_measurements():
    shipped = json.loads(default_path().read_text())
    assert list(shipped) == list(PAPER_MODELS)
    for name in ("Resnet18", "mdResnet12", "smVGG7"):
        assert features(name) == measure(name)
        assert shipped[name]["flops"] == measure(name).flops


def test_flops_scale_with_image_size_and_are_cached():
    small = features("smResnet12", image_size=112)
    assert small is features("smresnet12", image_size=112)
    assert small.flops == pytest.approx(features("smResnet12").flops / 4, rel=0.05)
    assert small.params == features("smResnet12").params
    with pytest.raises(InputError, match="too small"):
        features("VGG13", image_size=16)


def test_meta_counts_equal_cpu_counts():
    from adloader.models.features import _count

    assert _count("smVGG7", 64, "meta") == _count("smVGG7", 64, "cpu")


@pytest.mark.parametrize("name", ["smResnet12", "smVGG7"])
def test_real_cpu_forward_on_a_tiny_input(name):
    torch.manual_seed(0)
    model = build(name, num_classes=7)
    model.train()
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_regenerate_writes_atomically(tmp_path, monkeypatch):
    # `adloader.models.features` the attribute is the function; the module is in sys.modules
    feats = importlib.import_module("adloader.models.features")
    monkeypatch.setattr(feats, "PAPER_MODELS", ("smResnet12", "smVGG7"))
    target = regenerate(tmp_path / "sub" / "table.json")
    table = json.loads(target.read_text())
    assert list(table) == ["smResnet12", "smVGG7"]
    assert table["smVGG7"]["params"] == features("smVGG7").params
    assert [p.name for p in target.parent.iterdir()] == ["table.json"]  # no temp file left


@pytest.fixture
def models_cli():
    return cli.main  # only the chosen command's module is imported


def test_cli_unknown_model_exits_2_with_one_line(models_cli, capsys):
    assert models_cli(["models", "features", "Resnet99x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("adloader: error: unknown model 'Resnet99x'")


def test_cli_features_and_list(models_cli, capsys):
    assert models_cli(["models", "features", "resnet18", "--image-size", "224"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "Resnet18" and shown["params"] == 11689512
    assert models_cli(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "smVGG16" in out and "3.628" in out
