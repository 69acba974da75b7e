"""The daemon needs no torch (issue 25: "the daemon's image leaves torch out"): a real daemon
runs with torch unimportable — it starts, serves, and plans a job that registers over ZeroMQ —
and the image's install (``deploy/Containerfile``) brings what ``adloader[daemon]`` requires
less torch (``deploy/daemon_requirements.py``, read from the installed metadata)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import runpy
from pathlib import Path

from daemon_harness import Daemon, RawMaster, wait_for

ROOT = Path(__file__).resolve().parents[3]
NO_TORCH = "raise ImportError('torch is not installed here (a test of the daemon without it)')\n"


def _names(requirements) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_daemon_s_requirements_are_its_extra_and_the_base_less_torch():
    listed = runpy.run_path(str(ROOT / "deploy" / "daemon_requirements.py"))[
        "daemon_requirements"]()
    names = _names(listed)
    assert "torch" not in names
    assert {"fastapi", "uvicorn", "scikit-learn", "pyzmq", "pydantic", "numpy"} <= names
    every = _names(importlib.metadata.requires("adloader"))
    assert "torch" in every and not names & {"pytest", "lightning", "torchdata"}  # no other extra


def test_the_image_installs_the_wheel_without_its_dependencies_and_no_torch():
    text = (ROOT / "deploy" / "Containerfile").read_text()
    runs = " ".join(line for line in text.replace("\\\n", " ").splitlines()
                    if line.startswith("RUN "))
    assert "pip install --no-deps" in runs and "daemon_requirements.py" in runs
    assert not re.search(r"pip install[^&]*\btorch\b", runs), runs


def test_a_daemon_with_torch_unimportable_serves_and_plans_a_registered_job(tmp_path):
    shadow = tmp_path / "no-torch" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(NO_TORCH)
    daemon = Daemon(tmp_path / "state")
    daemon.env["PYTHONPATH"] = os.pathsep.join(
        [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    daemon.start()
    try:
        assert daemon.http.get("/healthz").status_code == 200
        with RawMaster(daemon.endpoint) as master:
            master.register("j", "t-j", workers=2, name="no-torch")
            # running, then its workers: the plan may come a moment after the registration
            wait_for(lambda: (v := daemon.job("j")).get("state") == "running"
                     and (v.get("workers") or 0) >= 1, 30, "the job registered and planned")
            assert daemon.http.get("/v1/allocations").status_code == 200
        assert "torch is not installed here" not in daemon.log  # nothing even tried
    finally:
        daemon.stop()
