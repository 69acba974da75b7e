"""What an operator gets from a real daemon: logs followed while a job runs, a read-only
metrics token (and loopback scrapes when asked), each launched job's CPU, emulated GPUs on a
node without CUDA, and job names that say what runs."""

from __future__ import annotations

import os
import sys

import httpx
import pytest
from daemon_harness import Daemon, wait_for

from adloader.remote.process import DaemonProcess


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state").start()
    yield d
    d.stop()


def test_logs_follow_a_job_while_it_writes_until_it_ends(daemon):
    body = ("import time\nfor i in range(6):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.3)  # pacing: a job that writes as it goes\n")
    job = daemon.submit("talker", command=[sys.executable, "-c", body])
    chunks = list(daemon.client.follow_log(job))  # returns once the job has ended
    text = "".join(chunks)
    assert [line for line in text.splitlines() if line.startswith("line")] == [
        f"line {i}" for i in range(6)]
    assert len(chunks) > 1  # it arrived as it was written, not at the end
    assert daemon.state(job) == "finished"


def test_a_read_only_token_scrapes_metrics_and_nothing_else(daemon):
    scraper = daemon.path("metrics.token").read_text().strip()
    assert scraper and scraper != daemon.token
    headers = {"Authorization": f"Bearer {scraper}"}
    assert httpx.get(daemon.url + "/metrics", headers=headers).status_code == 200
    assert httpx.get(daemon.url + "/v1/jobs", headers=headers).status_code == 401
    assert httpx.get(daemon.url + "/metrics").status_code == 401  # not on loopback by default


def test_loopback_scrapes_when_the_operator_allows_them(tmp_path):
    env = dict(os.environ, ADLOADER_METRICS_ON_LOOPBACK="true")
    with DaemonProcess(tmp_path / "state", ["--capacity", "2"], env=env) as d:
        r = httpx.get(d.url + "/metrics")
        assert r.status_code == 200 and "adloader_capacity_workers 2.0" in r.text
        assert httpx.get(d.url + "/v1/jobs").status_code == 401


def test_a_launched_jobs_cpu_is_measured(daemon):
    burn = "import time\nt = time.time()\nwhile time.time() - t < 20: pass\n"
    job = daemon.submit("burner", command=[sys.executable, "-c", burn])
    wait_for(lambda: (daemon.job(job).get("cpu_percent") or 0) > 20, 30,
             "its CPU to be measured")
    assert daemon.http.post(f"/v1/jobs/{job}/cancel").status_code == 200


def test_without_cuda_the_node_emulates_four_gpus(tmp_path):
    with DaemonProcess(tmp_path / "state") as d:
        assert d.client.health()["gpus"] == 4
        assert "4 GPUs (none found: emulated)" in d.log


def test_a_submitted_job_is_named_after_its_model_or_program(daemon, run, monkeypatch):
    monkeypatch.setenv("ADLOADER_URL", daemon.url)
    monkeypatch.setenv("ADLOADER_TOKEN", daemon.token)
    code, out, _ = run("submit", "--batch-size", "8", "--iterations", "5", "--model",
                       "smResnet20", "--", sys.executable, "-c", "pass")
    assert code == 0 and "(smResnet20)" in out
    code, out, err = run("submit", "--batch-size", "8", "--iterations", "5",
                         "--name", "a b", "--", "true")
    assert code == 2 and "name" in err
