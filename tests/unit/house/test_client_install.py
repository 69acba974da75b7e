"""The job side installs alone (``pip install adloader``): importing the client loads none of
the daemon's packages, and the package's plain requirements are the client's own
(``adloader bench install`` times the import against ``import torch``)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DAEMON_ONLY = ("fastapi", "uvicorn", "starlette", "sklearn", "scipy", "matplotlib", "PIL",
               "rich", "httpx", "prometheus_client")
PROBE = ("import sys\n"
         "import adloader.client, adloader.client.master.run\n"
         "from adloader import ElasticDataLoader, JobCancelled, PathTable, ShardedStream, attach\n"
         "print(','.join(m for m in {mods!r} if m in sys.modules))\n")


def test_the_client_loads_none_of_the_daemon_s_packages():
    done = subprocess.run([sys.executable, "-c", PROBE.format(mods=DAEMON_ONLY)],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ""


def _probe(code: str) -> str:
    """What ``code`` prints in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def test_attach_is_the_function_whatever_was_imported_first():
    """``adloader.client.attach`` is the function, not its module
    (``adloader.client.master.attach``): the package binds it, so ``from adloader.client import
    attach`` gets it after ``from adloader import attach`` (which imports the module) as before
    it."""
    probe = ("from adloader import attach as a\n"
             "from adloader.client import attach as b\n"
             "import sys, importlib\n"
             "mod = importlib.import_module('adloader.client.master.attach')\n"
             "from adloader.client import attach as c\n"
             "print(a is b is c is mod.attach is sys.modules['adloader.client'].attach, "
             "callable(c))\n")
    assert _probe(probe).split() == ["True", "True"]


def test_the_loader_alone_loads_neither_the_protocol_nor_zeromq():
    """A script that only builds an ElasticDataLoader pays for neither the master's
    messages (msgspec) nor its ZeroMQ channel (``adloader bench install`` times the import);
    ``attach`` loads them, and still not pydantic: a job starting beside others on a busy
    node does not pay its 0.18 CPU-s (the REST API's models are the daemon's and the CLI's)."""
    probe = ("import sys\n"
             "from adloader import ElasticDataLoader\n"
             "import adloader.client\n"
             "print(','.join(m for m in ('msgspec', 'zmq', 'adloader.protocol') "
             "if m in sys.modules))\n"
             "from adloader.client import JobMaster, attach\n"
             "print(','.join(m for m in ('pydantic', 'msgspec', 'zmq') if m in sys.modules))\n")
    assert _probe(probe).splitlines() == ["", "msgspec,zmq"]


BLOCKED = """
import importlib, importlib.abc, pkgutil, sys
class Absent(importlib.abc.MetaPathFinder):  # an install without the daemon extra
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {mods!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
import adloader.client, adloader.models
for pkg in (adloader.client, adloader.models):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):  # sub-packages too
        if info.name == "adloader.client.integrations.hf_trainer":
            continue  # the Hugging Face Trainer's: transformers brings its own httpx
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
    assert names == {"torch", "numpy", "pydantic", "msgspec", "pyzmq", "psutil"}
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


def test_every_lazy_export_is_visible_to_type_checkers():
    """``adloader`` and ``adloader.client`` resolve their exports on first use
    (``__getattr__``); each name in ``__all__`` is also imported under ``TYPE_CHECKING``, so
    a type checker sees the class or function, not ``Any``."""
    import ast

    for path in (ROOT / "adloader" / "__init__.py", ROOT / "client" / "__init__.py"):
        tree = ast.parse(path.read_text())
        exported = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", "") == "__all__" for t in n.targets))
        checked = {alias.asname or alias.name for n in tree.body if isinstance(n, ast.If)
                   and getattr(n.test, "id", "") == "TYPE_CHECKING"
                   for imp in n.body for alias in imp.names}
        checked |= {alias.asname or alias.name for n in tree.body  # bound at import
                    if isinstance(n, ast.ImportFrom) for alias in n.names}
        assert set(exported) - {"__version__"} <= checked, (path.name, exported, checked)
