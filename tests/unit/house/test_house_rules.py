"""The house rules as import-linter contracts (pyproject.toml, ``[tool.importlinter]``), run on
the layout a wheel installs (``daemon/`` is ``adloader/daemon/`` there): the daemon and the
client share only contracts, nothing imports the command line, the pure core imports no edge,
the daemon imports no simulator, scheduling and the data path stay two halves, and no import
circle at any depth — imports inside functions included. Each rule is also shown to fail on a
planted violation."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def _installed_layout(dst: Path) -> Path:
    """The source tree copied as a wheel lays it out (``tool.setuptools.package-dir``)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "static", "traces", "profiles")
    shutil.copytree(ROOT / dirs["adloader"], dst / "adloader", ignore=skip)
    for package, folder in dirs.items():
        if package != "adloader":
            shutil.copytree(ROOT / folder, dst / Path(*package.split(".")), ignore=skip)
    return dst


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT, str(ROOT / "pyproject.toml"),
                           "--no-cache"], cwd=tree, env={"PYTHONPATH": str(tree), "PATH": ""},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path) -> Path:
    return _installed_layout(tmp_path)


def test_every_contract_is_kept(tree):
    done = _lint(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and " KEPT" in done.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("daemon/store/store.py", "from adloader.client import attach", "share only contracts"),
    ("daemon/store/store.py", "def f():\n    from adloader.client import attach", "share only"),
    ("scheduling/planner.py", "from adloader.host import cores", "pure core"),
    ("datapath/reuse.py", "from adloader.scheduling import samples", "two halves"),
    ("sim/trace.py", "from adloader.cli import main", "command line"),
    ("daemon/model/refit.py", "def f():\n    from adloader.sim import trace", "no simulator"),
    ("scheduling/planner.py", "from adloader.device import synth", "pure core"),
    ("datapath/reuse.py", "def f():\n    from adloader.datapath import eviction", "circles"),
])
def test_a_planted_violation_breaks_its_contract(tree, module, line, broken):
    path = tree / "adloader" / module
    path.write_text(path.read_text() + "\n\n" + line + "\n")
    done = _lint(tree)
    assert done.returncode != 0
    report = done.stdout[done.stdout.index("Broken contracts"):]
    assert broken in report, report
