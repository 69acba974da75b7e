"""docs/layout.md is the map of the tree: every module is on it, and every path on it exists
(the paper-to-path table included); and no folder of code or tests holds more than 15 modules
at its top (more go into sub-folders by concept)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYOUT = ROOT / "docs" / "layout.md"


def _modules() -> set[str]:
    """Every Python or Cython module of the package, as a path from the repository root."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                            *dirs.values()], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return {f for f in files if f.endswith((".py", ".pyx")) and (ROOT / f).exists()}


def _paths_named() -> set[str]:
    return set(re.findall(r"`([\w/.-]+\.pyx?)`", LAYOUT.read_text()))


@pytest.mark.processes  # git ls-files
def test_every_module_is_on_the_map():
    missing = sorted(_modules() - _paths_named())
    assert not missing, f"docs/layout.md does not list: {', '.join(missing)}"


def test_every_path_on_the_map_exists():
    gone = sorted(p for p in _paths_named() if not (ROOT / p).exists())
    assert not gone, f"docs/layout.md names paths that do not exist: {', '.join(gone)}"


def test_every_paper_maps_to_paths():
    text = LAYOUT.read_text()
    table = text[text.index("## Each paper"):text.index("## Where a new thing goes")]
    for paper in ("A-Dloader", "Locality-aware loading", "Lobster", "SOLAR", "NoPFS"):
        rows = [r for r in table.splitlines() if r.startswith(f"| {paper}")]
        assert rows, f"no row for {paper}"
        assert all(re.search(r"`[\w/.-]+\.pyx?`", r) for r in rows), rows


# The folders of code and tests, each looked at with every folder below it.
CODE_FOLDERS = ("adloader", "daemon", "client", "bench", "models", "workloads", "tests")
MOST_MODULES = 15  # .py files at a folder's top, __init__.py and conftest.py included
# Not ours, or not code: PyTorch's test file fetched by hand; and the tests' data folders.
NOT_LOOKED_AT = (Path("tests", "torch_suite", "upstream"),)


def _crowded_folders() -> dict[str, int]:
    """Each folder under CODE_FOLDERS holding more than MOST_MODULES modules at its top."""
    crowded = {}
    for top in CODE_FOLDERS:
        for folder, subfolders, files in os.walk(ROOT / top):
            here = Path(folder).relative_to(ROOT)
            subfolders[:] = sorted(
                d for d in subfolders
                if d != "__pycache__" and not d.startswith(".")
                and here / d not in NOT_LOOKED_AT
                and not (here.parts[0] == "tests" and d == "data"))
            modules = sum(f.endswith(".py") for f in files)
            if modules > MOST_MODULES:
                crowded[here.as_posix()] = modules
    return crowded


def test_no_folder_holds_more_than_15_modules_at_its_top():
    crowded = _crowded_folders()
    assert not crowded, (f"more than {MOST_MODULES} modules in one folder (split it into "
                         f"sub-folders by concept): {crowded}")
