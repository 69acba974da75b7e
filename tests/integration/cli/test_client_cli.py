"""`adloader submit | jobs | cancel | logs` against a real uvicorn server on a free port."""

from __future__ import annotations

import re
import socket
import threading
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest
import uvicorn
from fake_service import TOKEN, FakeService
from waiting import wait_for

from adloader.config import DaemonConfig
from adloader.daemon.api.app import create_app
from adloader.daemon.ops.settings import load_config

JOB_TOML = """
[job]
name = "r18-file"
command = ["python", "train.py", "--lr", "0.1"]
cwd = "work"
model = "resnet18"
batch_size = 64
epochs = 2
env = { SEED = "1" }
"""


@pytest.fixture(scope="module")
def server():
    """A uvicorn server in a thread serving one FakeService; yields (url, service)."""
    service = FakeService()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(service, TOKEN), log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: srv.started or not thread.is_alive(), 10, "uvicorn to start",
             interval=0.01)
    assert srv.started, "uvicorn's thread ended before it served"
    yield f"http://127.0.0.1:{port}", service
    srv.should_exit = True
    thread.join(5)
    sock.close()


@pytest.fixture
def daemon(server, monkeypatch, tmp_path):
    """The server with a fresh service, its URL and token file set for the CLI."""
    url, service = server
    service.__init__()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.delenv("ADLOADER_TOKEN", raising=False)
    monkeypatch.setenv("ADLOADER_URL", url)
    monkeypatch.setenv("ADLOADER_TOKEN_FILE", str(token_file))
    return service


def test_submit_flags_then_jobs_logs_cancel(run, daemon, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run("submit", "--model", "Resnet18", "--batch-size", "32",
                         "--iterations", "50", "--workers", "3", "--env", "A=1",
                         "--", "python", "train.py", "--lr", "0.1")  # fmt: skip
    assert (code, err) == (0, "")
    assert out == "submitted j-000001 (Resnet18): queued\n"
    spec = daemon.job("j-000001").spec
    assert spec.command == ["python", "train.py", "--lr", "0.1"]
    assert (spec.batch_size, spec.iterations, spec.workers, spec.gpus) == (32, 50, 3, 1)
    assert spec.cwd == str(tmp_path) and spec.env == {"A": "1"}

    code, out, _ = run("submit", "-q", "--name", "tiny", "--model", "smVGG7", "--batch-size",
                       "8", "--epochs", "1", "--", "sleep", "1")  # fmt: skip
    assert (code, out) == (0, "j-000002\n")

    code, out, _ = run("jobs")
    assert code == 0
    assert "j-000001" in out and "Resnet18" in out and "tiny" in out and "smVGG7" in out
    code, out, _ = run("jobs", "--json")
    assert [j["name"] for j in __import__("json").loads(out)] == ["Resnet18", "tiny"]

    code, out, _ = run("logs", "j-000001", "--tail", "2")  # lines, not bytes
    assert (code, out) == (0, "line 98\nline 99\n")
    code, out, _ = run("logs", "j-000001", "--tail", "1000")  # more than there are: all
    assert code == 0 and out.splitlines() == [f"line {i}" for i in range(100)]
    code, out, _ = run("logs", "j-000001")  # no --tail: the last 64 KiB, here all of it
    assert code == 0 and out.startswith("line 0\n") and out.endswith("line 99\n")
    code, out, _ = run("cancel", "j-000002")
    assert (code, out) == (0, "cancelled j-000002 (tiny): cancelled\n")
    assert daemon.job("j-000002").state == "cancelled"


def test_submit_toml_file(run, daemon, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB_TOML)
    code, out, err = run("submit", str(path), "--workers", "2")
    assert (code, err) == (0, ""), err
    spec = daemon.job("j-000001").spec
    assert (spec.name, spec.model, spec.epochs, spec.workers) == ("r18-file", "Resnet18", 2, 2)
    assert spec.cwd == str(tmp_path / "work") and spec.env == {"SEED": "1"}
    assert spec.command == ["python", "train.py", "--lr", "0.1"]


def test_invalid_job_is_one_line(run, daemon, tmp_path):
    code, out, err = run("submit", "--model", "Resnet18", "--batch-size", "0",
                         "--iterations", "5", "--", "python", "t.py")  # fmt: skip
    assert code == 2
    assert err == "adloader: error: field 'batch_size': must be greater than 0\n"
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\ncommand = "python t.py"\nmodel = "Resnet18"\n'
                    'batch_size = 4\n')  # fmt: skip
    code, _, err = run("submit", str(path))
    assert code == 2
    assert err == (f"adloader: error: {path}: field 'iterations': required unless "
                   "'epochs' is given\n")  # fmt: skip
    path.write_text("name = [")
    code, _, err = run("submit", str(path))
    assert code == 2 and err.startswith(f"adloader: error: {path}: not valid TOML")
    code, _, err = run("submit", "--model", "Resnet18")
    assert code == 2 and "give a job file" in err
    code, _, err = run("submit", "--env", "NOEQUALS", "--", "true")
    assert code == 2 and "--env 'NOEQUALS'" in err
    code, _, err = run("cancel", "j-000099")
    assert (code, err) == (2, "adloader: error: no job 'j-000099'\n")
    assert daemon.jobs() == []


def test_token_sources(run, daemon, monkeypatch, tmp_path):
    monkeypatch.setenv("ADLOADER_TOKEN", "wrong")
    code, _, err = run("jobs")
    assert code == 2 and "refused the token from ADLOADER_TOKEN" in err
    monkeypatch.setenv("ADLOADER_TOKEN", TOKEN)
    assert run("jobs", "--token-file", str(tmp_path / "missing"))[0] == 0  # env wins
    monkeypatch.delenv("ADLOADER_TOKEN")
    code, _, err = run("jobs", "--token-file", str(tmp_path / "missing"))
    assert code == 2 and "no token" in err and "missing" in err
    monkeypatch.delenv("ADLOADER_TOKEN_FILE")
    monkeypatch.setenv("ADLOADER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "token").write_text(TOKEN)
    assert run("jobs")[0] == 0  # the daemon config's default token path


def test_daemon_failure_is_exit_1(run, daemon):
    daemon.fail = RuntimeError("boom")
    code, _, err = run("jobs")
    assert code == 1
    assert err.startswith("adloader: error: the daemon at http://127.0.0.1:")
    assert "failed inside the daemon" in err and "Traceback" not in err


def test_no_daemon(run, monkeypatch):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()  # nothing listens there now
    monkeypatch.setenv("ADLOADER_TOKEN", TOKEN)
    for argv in (["jobs"], ["cancel", "j-000001"], ["logs", "j-000001"],
                 ["submit", "--model", "Resnet18", "--batch-size", "8", "--iterations", "10",
                  "--", "true"]):  # a whole spec: a bad one is refused before any request
        code, out, err = run(argv[0], "--url", url, *argv[1:])
        assert (code, out) == (1, "")  # not the user's fault: exit 1, as a failing daemon
        assert err == f"adloader: error: no daemon at {url} (start one with `adloader daemon`)\n"
    code, _, err = run("jobs", "--url", "ftp://example")
    assert code == 2 and "not an http://" in err


def test_deploy_example_config_names_every_setting():
    """deploy/adloader.toml documents every DaemonConfig setting, at its default value."""
    path = Path(__file__).resolve().parents[3] / "deploy" / "adloader.toml"
    config = load_config(path, environ={})
    written = tomllib.loads(path.read_text())["daemon"]
    assert set(written) == {f.name for f in fields(DaemonConfig)}
    assert {k for k in written if getattr(config, k) != getattr(DaemonConfig(), k)} == {
        "state_dir"}


def test_listings_go_to_stdout_as_asked_and_plain_when_piped(run, daemon, tmp_path):
    for name in ("a", "b"):
        assert run("submit", "-q", "--name", name, "--model", "smVGG7", "--batch-size", "8",
                   "--iterations", "5", "--", "true")[0] == 0  # fmt: skip
    code, out, _ = run("jobs", "-o", "name")
    assert (code, out) == (0, "j-000001\nj-000002\n")
    code, out, _ = run("jobs", "-o", "json")
    assert [j["id"] for j in __import__("json").loads(out)] == ["j-000001", "j-000002"]
    code, out, _ = run("jobs")  # captured, as a pipe: a header line and a line per job
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 and lines[0].split()[:3] == ["id", "name", "state"]
    assert lines[1].split()[:3] == ["j-000001", "a", "queued"]
    assert not any(ch in out for ch in "│┃━─")  # no box drawing
    assert {len(line.split()) for line in lines} == {len(lines[0].split())}  # awk's fields
    assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", lines[1])  # submitted: one field
    code, out, _ = run("jobs", "-o", "wide")
    assert code == 0 and out.splitlines()[0].split()[-3:] == ["started", "ended", "reason"]
    with pytest.raises(SystemExit) as exit_:  # argparse's own error, as for every flag
        run("jobs", "-o", "yaml")
    assert exit_.value.code == 2

    code, out, _ = run("describe", "j-000002")
    assert code == 0 and "name: b" in out and "state: queued" in out
    assert "  model: smVGG7" in out and "events (the last 1 of 1):" in out
    code, out, _ = run("describe", "j-000002", "-o", "json")
    got = __import__("json").loads(out)
    assert got["job"]["id"] == "j-000002" and [e["job"] for e in got["events"]] == ["j-000002"]
    code, _, err = run("describe", "j-000099")
    assert (code, err) == (2, "adloader: error: no job 'j-000099'\n")

    code, out, err = run("cancel", "j-000001", "j-000099", "j-000002")  # one refused
    assert code == 2 and err == "adloader: error: no job 'j-000099'\n"
    assert out.splitlines() == ["cancelled j-000001 (a): cancelled",
                                "cancelled j-000002 (b): cancelled"]


def test_result_files_are_named_with_out(run, tmp_path):
    out = tmp_path / "r.json"
    code, _, err = run("sim", "paper-static", "--policy", "waa", "--out", str(out))
    assert code == 0 and "makespan_s" in out.read_text(), err
    code, _, err = run("sim", "paper-static", "--out", str(tmp_path / "no" / "r.json"))
    assert code == 2 and "--out" in err and "does not exist" in err
