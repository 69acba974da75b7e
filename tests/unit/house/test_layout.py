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


SOURCE_FOLDERS = ("adloader", "daemon", "client", "bench", "models", "workloads")


def _classes() -> list[tuple[str, str, list[str]]]:
    """(file, class, the names of its bases) for every class of the project's source."""
    import ast

    found = []
    for top in SOURCE_FOLDERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = []
                    for base in node.bases:
                        base = base.value if isinstance(base, ast.Subscript) else base
                        if isinstance(base, ast.Name):
                            bases.append(base.id)
                        elif isinstance(base, ast.Attribute):
                            bases.append(base.attr)
                    found.append((path.relative_to(ROOT).as_posix(), node.name, bases))
    return found


def test_no_class_is_spread_over_mixins():
    """Composed, not mixed in: no class named a mixin, and none that inherits from two or
    more of the project's own classes (a class spread over files)."""
    classes = _classes()
    ours = {name for _, name, _ in classes}
    mixins = [f"{f}: {c}" for f, c, _ in classes if c.endswith("Mixin")]
    spread = [f"{f}: {c}({', '.join(b)})" for f, c, b in classes
              if sum(base in ours for base in b) >= 2]
    assert not mixins and not spread, f"mixins: {mixins}; classes over several: {spread}"


@pytest.mark.parametrize("planted", ["class NodeMixin:\n    pass\n",
                                     "class A:\n    pass\nclass B:\n    pass\n"
                                     "class C(A, B):\n    pass\n"])
def test_a_planted_mixin_is_found(planted, monkeypatch):
    module = ROOT / "adloader" / "_planted_for_test.py"
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: [module]
                        if self == ROOT / "adloader" else [])
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: planted)
    with pytest.raises(AssertionError, match="mixins|several"):
        test_no_class_is_spread_over_mixins()
