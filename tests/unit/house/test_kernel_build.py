"""The compiled loops are built from the source in the tree: a ``.py`` kernel edited after its
build would have every test run the old loops (an extension module shadows the ``.py`` of the
same name)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["ftf_kernel", "jct_kernel"])
def test_each_kernel_is_built_from_its_source(name):
    module = importlib.import_module(f"adloader.scheduling.kernels.{name}")
    built = Path(module.__file__)
    kernels = Path(__file__).resolve().parents[3] / "adloader" / "scheduling" / "kernels"
    source = kernels / f"{name}.py"
    assert built.suffix == ".so" and module.COMPILED, f"{name} is not compiled: {built}"
    if built.parent == source.parent:  # an editable install: built beside its source
        assert built.stat().st_mtime >= source.stat().st_mtime, (
            f"{source.name} changed after its build: run `pip install -e . --no-deps`")
