"""The sdist installs where no C compiler can run: built from the tree's files, installed into a
fresh virtual environment with ``CC`` pointing at a program that fails, it imports the client
and makes an ``ftf`` decision with the loops' source run as plain Python — the same decision
as the compiled loops here. A binary wheel would prove nothing, so it is the sdist (a wheel is
built beside it, with this machine's compiler: it carries the compiled loops).

The environment sees the system's packages (torch is not downloaded again), but what it
imports of adloader must be the sdist's own, checked. Skipped where it cannot be built
(no ``build`` module, no ``venv``), except under CI=true, where that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from ci_rules import cannot, run

ROOT = Path(__file__).resolve().parents[3]
JOB_SIDE = {"torch", "numpy", "pydantic", "msgspec", "pyzmq", "psutil"}
DAEMON_ONLY = ("fastapi", "uvicorn", "sklearn", "scipy", "matplotlib", "httpx", "rich")

PROBE = """
import json, sys
import numpy as np
import adloader, adloader.client
from adloader import ElasticDataLoader, attach
loaded = [m for m in {daemon_only!r} if m in sys.modules]
from importlib.metadata import requires
from adloader.scheduling.kernels import loops
from adloader.scheduling.policies.allocation import JobDemand
from adloader.scheduling.policies.registry import get_policy
case = json.loads({case!r})
jobs = [JobDemand(f"j{{i}}", m, remaining=r)
        for i, (m, r) in enumerate(zip(case["mu"], case["left"]))]
plan = get_policy("ftf")(jobs, case["capacity"], np.array(case["table"]))
from adloader.scheduling.kernels import ftf_kernel
print(json.dumps({{"file": adloader.__file__, "loops": loops.plan.__module__,
                  "kernel": ftf_kernel.__file__,
                  "built": loops.BUILT, "client_loaded": loaded, "plan": plan,
                  "requires": requires("adloader")}}))
"""


def _case() -> dict:
    """16 jobs and one arrival on 64 workers, rows linear in d (the staged TPM's)."""
    rng = np.random.default_rng(7)
    capacity = 64
    node = np.arange(capacity + 1, dtype=float)
    total = 90 * np.minimum(node, 20) + 25 * np.maximum(node - 20, 0)
    d = node[None, :]
    table = np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * total[:, None], 0.0)
    return {"capacity": capacity, "table": table.tolist(),
            "mu": rng.uniform(20, 250, 17).tolist(), "left": rng.uniform(1e4, 1e6, 17).tolist()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the environment's python, pip's output) after installing the sdist with no compiler."""
    if shutil.which("git") is None:
        cannot("no git to list the tree's files")
    if run([sys.executable, "-c", "import build, venv"]).returncode != 0:
        cannot("the `build` module is missing (pip install build)")
    work = tmp_path_factory.mktemp("sdist")
    tree = work / "tree"  # the tree's own files, as a fresh clone has them: no .so, no .c
    files = run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                check=True).stdout.split("\n")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    # the sdist, then a wheel from it with this machine's compiler (the loops compiled in)
    built = run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                 str(work / "dist"), str(tree)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = (work / "dist").glob("adloader-*.tar.gz")
    (wheel,) = (work / "dist").glob("adloader-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        carried = whl.namelist()
    if shutil.which(os.environ.get("CC", "cc")):
        assert sum(n.endswith(".so") and "_kernel" in n for n in carried) == 2, carried
    # the loops' source beside their build: ``loops.plain`` runs it uncompiled
    assert {"adloader/scheduling/kernels/ftf_kernel.py",
            "adloader/scheduling/kernels/jct_kernel.py"} <= set(carried)
    assert not any(n.endswith(".c") for n in carried), "the wheel carries the built loops only"
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert not any(n.endswith(".so") for n in names), "an sdist carries no binary"
    assert any(n.endswith("scheduling/kernels/ftf_kernel.py") for n in names)
    env_dir = work / "venv"
    made = run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)])
    if made.returncode != 0:
        cannot(f"no venv: {made.stderr.strip()[-300:]}")
    python = env_dir / "bin" / "python"
    # ensurepip's own setuptools (65 on 3.11) cannot build a wheel without the `wheel`
    # package: leave the build to the system's (≥ 70.1, as pyproject.toml asks)
    run([str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"])
    no_cc = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "PIP_NO_INPUT": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = run([str(python), "-m", "pip", "install", "-v", "--no-build-isolation", "--no-deps",
               "--force-reinstall", str(sdist)], env=no_cc, cwd=work)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return python, env_dir, pip.stdout + pip.stderr, work


def test_the_sdist_installs_with_no_compiler_and_runs_the_python_loops(installed):
    python, env_dir, log, work = installed
    assert "were not built" in log and "CompileError" in log  # it tried, failed, went on
    site = next((env_dir / "lib").glob("python*/site-packages"))
    assert not list((site / "adloader" / "scheduling").glob("*_kernel*.so"))
    case = _case()
    done = run([str(python), "-c", PROBE.format(daemon_only=DAEMON_ONLY,
                                                case=json.dumps(case))],
               cwd=work, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(seen["file"]).resolve().is_relative_to(site.resolve()), seen["file"]
    assert seen["kernel"].endswith("ftf_kernel.py"), seen["kernel"]  # its source, uncompiled
    assert seen["loops"] == "adloader.scheduling.kernels.ftf_kernel" and not seen["built"]
    assert seen["client_loaded"] == []
    plain = {r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip()
             for r in seen["requires"] if "extra ==" not in r}
    assert plain == JOB_SIDE
    assert any("fastapi" in r and 'extra == "daemon"' in r for r in seen["requires"])
    # the same decision as this interpreter's loops (compiled where they were built)
    from adloader.scheduling.policies.allocation import JobDemand
    from adloader.scheduling.policies.registry import get_policy

    jobs = [JobDemand(f"j{i}", m, remaining=r)
            for i, (m, r) in enumerate(zip(case["mu"], case["left"], strict=True))]
    here = get_policy("ftf")(jobs, case["capacity"], np.array(case["table"]))
    assert seen["plan"] == here


TYPED = """
from adloader import ElasticDataLoader, attach
reveal_type(ElasticDataLoader)
reveal_type(attach)
"""


def test_the_installed_exports_are_typed_for_a_type_checker(installed):
    """``from adloader import ...`` resolves through ``__getattr__`` at run time; a type checker
    (mypy, on the installed package, torch itself not analysed) sees the real class and
    function, not ``Any``."""
    python, _, _, work = installed
    (work / "typed.py").write_text(TYPED)
    (work / "mypy.ini").write_text("[mypy]\nfollow_imports = silent\n"
                                   "[mypy-torch.*]\nfollow_imports = skip\n")
    done = run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                "--python-executable", str(python), "--no-incremental", "typed.py"], cwd=work)
    revealed = [line.split("Revealed type is ", 1)[1] for line in done.stdout.splitlines()
                if "Revealed type is" in line]
    assert len(revealed) == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "adloader.client.loader.loader.ElasticDataLoader" in revealed[0]
    assert "-> adloader.client.master.master.JobMaster" in revealed[1]
