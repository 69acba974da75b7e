"""docs/layout.md is the map of the tree: every module is on it, and every path on it exists
(the paper-to-path table included)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
