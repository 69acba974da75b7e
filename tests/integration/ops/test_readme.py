"""The README runs as printed, on this CPU-only machine: its shell blocks in order (a real
daemon, real jobs, a replayed trace), its job file, and its training script with and without
a daemon. Only the two install commands at the top are left out (they are what CI runs)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import free_port

from adloader.remote.jobfile import load_jobspec_file

README = Path(__file__).resolve().parents[3] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text()) if lang == kind]


@pytest.fixture
def shell(tmp_path):
    """Run README text in bash with a home of its own and the daemon on a free port."""
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, HOME=str(home), ADLOADER_PORT=str(port),
               ADLOADER_URL=f"http://127.0.0.1:{port}",
               PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    for name in ("ADLOADER_STATE_DIR", "ADLOADER_TOKEN", "ADLOADER_TOKEN_FILE",
                 "ADLOADER_CONFIG", "XDG_STATE_HOME", "ADLOADER_ENDPOINT"):
        env.pop(name, None)

    def run(text: str, timeout: float = 300) -> str:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=home, env=env,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"$ {text}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run.home, run.env = home, env
    yield run
    lock = home / ".local" / "state" / "adloader" / "daemon.lock"
    try:  # a daemon the README left running (a failed step): stop it
        pid = json.loads(lock.read_text() or "{}").get("pid")
        if pid:
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_the_install_commands_are_the_ones_ci_runs():
    first = blocks("bash")[0]
    assert "bash install.sh && adloader demo" in first
    assert "bash install.sh && python3 -m pytest -q" in first
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash install.sh" in ci and "python3 -m pytest -q" in ci


def test_the_tour_runs_as_printed(shell):
    tour, after = blocks("bash")[1:3]
    out = shell(tour)
    assert "submitted j-000001 (Resnet18)" in out and "submitted j-000002 (smResnet20)" in out
    assert "trained smResnet20: 60 iterations" in out  # `logs -f` followed it to its end
    assert re.search(r"j-000002 .*finished", out)
    assert "id: j-000002" in out and "events (the last" in out  # `describe`
    out = shell(after, timeout=600)
    link = next(line for line in out.splitlines() if "/ui#token=" in line)
    assert link.startswith(shell.env["ADLOADER_URL"] + "/ui#token=")
    result = json.loads((shell.home / "small-mix.json").read_text())
    assert {j["name"] for j in result["jobs"]} == {"smResnet20", "mdResnet12", "Resnet18"}
    assert all(j["state"] == "finished" for j in result["jobs"])
    assert "cancelled j-000001" in out and "stopped" in out


def test_the_job_file_agrees_with_its_command(tmp_path):
    [toml] = blocks("toml")
    path = tmp_path / "job.toml"
    path.write_text(toml)
    spec = load_jobspec_file(path)
    argv = spec.command
    flag = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert (flag["--model"], int(flag["--batch-size"]), int(flag["--gpus"]),
            int(flag["--iterations"])) == (spec.model, spec.batch_size, spec.gpus,
                                           spec.iterations)


def test_the_training_script_runs_alone_and_under_the_daemon(shell):
    [script] = blocks("python")
    (shell.home / "train.py").write_text(script)
    out = shell(f"{shlex.quote(sys.executable)} train.py")  # no daemon: a plain loader
    assert "trained 48 batches" in out
    out = shell("adloader daemon --detach --arrival-window 1 --completion-window 1\n"
                f"adloader run -- {shlex.quote(sys.executable)} train.py\n"
                "adloader jobs --json\n"
                "adloader daemon --stop")
    assert "trained 48 batches" in out
    jobs = json.loads(out[out.index("["):out.rindex("]") + 1])
    assert [(j["name"], j["state"], j["exit_code"]) for j in jobs] == [
        ("train.py", "finished", 0)]
