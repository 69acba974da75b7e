"""The job side installs alone (``pip install adloader``): importing the client loads none of
the daemon's packages, and the package's plain requirements are the client's own
(``adloader bench install`` times the import against ``import torch``)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAEMON_ONLY = ("fastapi", "uvicorn", "starlette", "sklearn", "scipy", "matplotlib", "PIL",
               "rich", "httpx", "prometheus_client")
PROBE = ("import sys\n"
         "import adloader.client, adloader.client.run\n"
         "from adloader import ElasticDataLoader, JobCancelled, PathTable, ShardedStream, attach\n"
         "print(','.join(m for m in {mods!r} if m in sys.modules))\n")


def test_the_client_loads_none_of_the_daemon_s_packages():
    done = subprocess.run([sys.executable, "-c", PROBE.format(mods=DAEMON_ONLY)],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ""


BLOCKED = """
import importlib, importlib.abc, pkgutil, sys
class Absent(importlib.abc.MetaPathFinder):  # an install without the daemon extra
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {mods!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
import adloader.client, adloader.models
for pkg in (adloader.client, adloader.models):
    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
from adloader.cli import main
sys.exit(main(["run", "--", sys.executable, "-c", "pass"]))
"""


def test_every_client_module_and_adloader_run_work_without_the_daemon_s_packages():
    done = subprocess.run([sys.executable, "-c", BLOCKED.format(mods=DAEMON_ONLY)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_pip_install_adloader_is_the_job_side_and_the_daemon_an_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {r.split(">")[0].split("=")[0].split("<")[0].strip()
             for r in project["dependencies"]}
    assert names == {"torch", "numpy", "pydantic", "pyzmq", "psutil"}
    daemon = " ".join(project["optional-dependencies"]["daemon"])
    for name in ("fastapi", "uvicorn", "scikit-learn", "scipy", "matplotlib", "httpx"):
        assert name in daemon


DAEMON_COMMAND = BLOCKED.split("import adloader.client")[0] + """
from adloader.cli import main
sys.exit(main([{args}]))
"""


def test_a_daemon_command_on_the_job_side_names_the_extra_in_one_line():
    for args in ('"bench", "static"', '"sim", "paper-static"', '"jobs"'):
        done = subprocess.run(
            [sys.executable, "-c", DAEMON_COMMAND.format(mods=DAEMON_ONLY, args=args)],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.count("\n") == 1 and 'pip install "adloader[daemon]"' in done.stderr
