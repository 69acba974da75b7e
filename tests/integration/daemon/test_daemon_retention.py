"""Retention and paging in a real daemon: jobs played over ZeroMQ end, leave the daemon's
memory and are pruned past the retention count with their events and logs; ids are never
given again; the pages of GET /v1/jobs reach every job kept exactly once; `adloader jobs
--state` follows them; bad paging parameters are a 4xx naming the parameter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import zmq
from daemon_harness import Daemon, wait_for

from adloader import rest
from adloader.protocol import Finish, Heartbeat, JobFeatures, Register, decode_to_job, encode

FEATS = JobFeatures(model="smResnet20", batch_size=32, flops_g=0.3, params_m=0.9,
                    iterations=1000)
KEEP = 5
PLAYED = 12


def _beat(job: str, iteration: int = 10) -> bytes:
    return encode(Heartbeat(job=job, token=f"t-{job}", iteration=iteration, step_s=0.02,
                            data_wait_s=0.0005, samples_per_s=1600.0, workers=1))


def _register(job: str) -> bytes:
    return encode(Register(job=job, token=f"t-{job}", features=FEATS, workers=1,
                           name="played"))


def _kept(daemon: Daemon) -> dict[str, int]:
    """The jobs kept by state, from the listing (``/metrics`` may serve an older render)."""
    out: dict[str, int] = {}
    for job in daemon.http.get(rest.JOBS, params={"limit": rest.PAGE_MAX}).json():
        out[job["state"]] = out.get(job["state"], 0) + 1
    return out


def _pages(daemon: Daemon, limit: int) -> list[str]:
    seen, params = [], {"limit": limit}
    while True:
        r = daemon.http.get(rest.JOBS, params=params)
        assert r.status_code == 200, r.text
        assert len(r.json()) <= limit
        seen += [j["id"] for j in r.json()]
        if rest.NEXT_CURSOR not in r.headers:
            return seen
        params = {"limit": limit, "cursor": r.headers[rest.NEXT_CURSOR]}


def _answer(sock) -> object:
    assert sock.poll(5000), "no answer from the daemon"
    return decode_to_job(sock.recv())


def test_ended_jobs_are_pruned_and_the_pages_reach_every_kept_job_once(tmp_path):
    state = tmp_path / "state"
    ctx = zmq.Context()
    # heartbeats every 30 s: the live job is not declared lost while the test looks around
    with Daemon(state, heartbeat=30, extra=("--retain-jobs", str(KEEP))) as daemon:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(daemon.endpoint)
        try:
            # a launched job that ends at once: its log is one of the files pruning removes
            body = {"name": "short", "command": [sys.executable, "-c", "print('hello')"],
                    "model": "smResnet20", "batch_size": 8, "iterations": 1}
            launched = daemon.http.post(rest.JOBS, json=body).json()["id"]
            wait_for(lambda: daemon.state(launched) == "finished", 60, "the short job to end")
            log = Path(state / "logs" / f"{launched}.log")
            assert log.exists()

            sock.send(_register("live-0"))
            assert _answer(sock).type == "allocation"
            for i in range(PLAYED):
                job = f"played-{i:03d}"
                sock.send(_register(job))
                sock.send(_beat(job))
                sock.send(encode(Finish(job=job, token=f"t-{job}", iterations=10)))
                sock.send(_beat("live-0", 10 + i))

            def settled():
                sock.send(_beat("live-0", 100))  # the live job stays heard meanwhile
                kept = _kept(daemon)
                return (kept.get("finished", 0) == KEEP and kept.get("running") == 1
                        and daemon.events("pruned"))

            wait_for(settled, 60, f"{PLAYED + 1 - KEEP} ended jobs to be pruned")
            assert not log.exists()  # the oldest ended job went, and its log with it
            assert daemon.http.get(rest.job_path(launched)).status_code == 404
            assert not daemon.events(job=launched)

            ids = _pages(daemon, limit=2)
            assert ids == ["live-0", *[f"played-{i:03d}" for i in range(PLAYED - KEEP,
                                                                         PLAYED)]]
            # in id order: every job kept, each once
            assert _pages(daemon, limit=rest.PAGE_MAX) == ids
            old_client = daemon.http.get(rest.JOBS).json()  # no paging parameters: as before
            assert [j["id"] for j in old_client] == ids
            view = daemon.job(f"played-{PLAYED - 1:03d}")  # history, read from the store
            assert (view["state"], view["iteration"], view["name"]) == ("finished", 10,
                                                                        "played")
            running = daemon.http.get(rest.JOBS, params={"state": "running,paused"}).json()
            assert [j["id"] for j in running] == ["live-0"]

            # a retired job is refused as ended; a pruned one is unknown
            sock.send(_beat(f"played-{PLAYED - 1:03d}"))
            refused = _answer(sock)
            while refused.type != "refused":
                refused = _answer(sock)
            assert "job has ended (finished)" in refused.reason
            sock.send(_beat("played-000"))
            refused = _answer(sock)
            while refused.type != "refused":
                refused = _answer(sock)
            assert refused.reason == "unknown job"

            for query, named, status in (("state=done", "state", 422),
                                         ("limit=0", "limit", 422),
                                         ("cursor=nope", "cursor", 422),
                                         ("since=-1", "since", 422)):
                r = daemon.http.get(f"{rest.JOBS}?{query}")
                assert r.status_code == status and f"'{named}" in r.json()["detail"], r.text
            r = daemon.http.get(f"{rest.EVENTS}?cursor=nope")
            assert r.status_code == 422 and "'cursor'" in r.json()["detail"]

            cli = subprocess.run(
                [sys.executable, "-m", "adloader", "jobs", "--json", "--state", "finished",
                 "--url", daemon.url, "--token-file", str(daemon.path("token"))],
                capture_output=True, text=True, timeout=60)
            assert cli.returncode == 0, cli.stderr
            listed = [j["id"] for j in json.loads(cli.stdout)]
            assert listed == [f"played-{i:03d}" for i in range(PLAYED - KEEP, PLAYED)]
            bad = subprocess.run(
                [sys.executable, "-m", "adloader", "jobs", "--state", "done", "--url",
                 daemon.url, "--token-file", str(daemon.path("token"))],
                capture_output=True, text=True, timeout=60)
            assert bad.returncode != 0 and "--state 'done'" in bad.stderr
        finally:
            sock.close()
            ctx.term()
    with Daemon(state, extra=("--retain-jobs", str(KEEP))) as daemon:  # restarted
        assert _kept(daemon).get("finished") == KEEP
        again = daemon.http.post(rest.JOBS, json={**body, "name": "again"}).json()["id"]
        assert again == "j-000002"  # j-000001 was pruned: its id is not given again
