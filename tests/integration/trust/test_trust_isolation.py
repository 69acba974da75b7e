"""One tenant never stalls another: extreme or malformed input is refused at the edge and a
failing job fails alone (real daemon, real sockets, real jobs)."""

from __future__ import annotations

import concurrent.futures
import math
import time

import httpx
import pytest
from daemon_harness import Daemon, RawMaster, wait_for

from adloader.protocol import Finish


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state").start()
    yield d
    d.stop()


def _body(**fields) -> dict:
    body = {"name": "x", "command": ["true"], "model": "smResnet20", "batch_size": 8,
            "iterations": 10}
    body.update(fields)
    return body


@pytest.mark.parametrize(("fields", "field"), [
    ({"iterations": 2**70}, "iterations"),
    ({"batch_size": 2**40}, "batch_size"),
    ({"model": None, "features": {"flops_g": 1e308, "params_m": 1.0}}, "flops_g"),
    ({"model": None, "features": {"flops_g": 1.0, "params_m": 1e300}}, "params_m"),
    ({"command": ["python3", "-c", "x\x00y"]}, "command"),
    ({"env": {"A": "b\x00"}}, "env"),
    ({"command": ["x"] * 5000}, "command"),
    ({"workers": 10**6}, "workers"),
    ({"model": "Resnet" + "9" * 5000}, "model"),
    ({"model": "Resnet100000"}, "model"),
])
def test_extreme_but_typed_values_are_refused_naming_the_field(daemon, fields, field):
    r = daemon.http.post("/v1/jobs", json=_body(**fields))
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"]
    assert daemon.http.get("/v1/jobs").json() == []


def test_refused_input_stalls_no_one(daemon):
    """A burst of the above between two good jobs: both run to the end, nothing raised in
    the control loop."""
    first = daemon.submit("first", iterations=20)
    for fields in ({"iterations": 2**70}, {"command": ["a\x00"]}, {"batch_size": -1}):
        assert daemon.http.post("/v1/jobs", json=_body(**fields)).status_code == 422
    r = daemon.http.get("/v1/events", params={"since": 2**80})
    assert r.status_code == 422 and "since" in r.json()["detail"]
    second = daemon.submit("second", iterations=20)
    for job in (first, second):
        wait_for(lambda j=job: daemon.state(j) == "finished", 120, f"{job} to finish")
    assert daemon.metric("adloader_loop_errors_total") == 0


def test_a_huge_body_is_413_and_nothing_grows(daemon):
    huge = b'{"name": "x", "command": ["' + b"a" * (50 * 1024 * 1024) + b'"]}'
    r = daemon.http.post("/v1/jobs", content=huge, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "body" in r.json()["detail"]

    def chunks():  # no Content-Length: refused once the limit is passed
        yield b'{"name": "x", "command": ["'
        for _ in range(40):
            yield b"a" * (1024 * 1024)

    r = daemon.http.post("/v1/jobs", content=chunks(),
                         headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert daemon.http.get("/v1/jobs").content == b"[]"


def test_a_job_that_cannot_be_launched_fails_alone_with_its_reason(daemon):
    bad = daemon.submit("bad", command=["/no/such/program", "--flag"])
    good = daemon.submit("good", iterations=20)
    wait_for(lambda: daemon.state(bad) == "failed", 60, "the bad job to fail")
    view = daemon.job(bad)
    assert view["exit_code"] == 127 and view["reason"] == "exit code 127"
    failed = daemon.events("failed", bad)[0]["data"]
    assert "cannot start '/no/such/program'" in failed["tail"]
    assert "cannot start" in daemon.http.get(f"/v1/jobs/{bad}/log").text
    wait_for(lambda: daemon.state(good) == "finished", 120, "the good job to finish")
    assert daemon.metric("adloader_loop_errors_total") == 0


def test_a_bad_frame_costs_that_frame_only(daemon):
    """Forty good heartbeats with malformed frames among them: every good one counts."""
    with RawMaster(daemon.endpoint) as tenant:
        tenant.register("tenant-1", "tok-1")
        wait_for(lambda: daemon.events("attached", "tenant-1"), 10, "the tenant to attach")
        bad = [b'{"type": "heartbeat", "job": "tenant-1", "token": "tok-1", "iteration": 1, '
               b'"step_s": NaN, "data_wait_s": 0, "samples_per_s": 0, "workers": 1}',
               b'{"type": "finish", "job": "tenant-1", "token": "tok-1", "iterations": 1, '
               b'"exit_code": 99999999999999999999999999}',
               b'{"type": "heartbeat", "job": "tenant-1", "token": "tok-1", "iteration": '
               b'1e999, "step_s": 0, "data_wait_s": 0, "samples_per_s": 0, "workers": 1}',
               b"[" * 50_000, b"\xff\xfe", b'{"type": "register"}']
        for i in range(1, 41):
            tenant.beat("tenant-1", "tok-1", i)
            if i % 6 == 0:  # at 6, 12, ... 36: each bad frame between two good ones
                tenant.send(bad[i // 6 - 1])
        wait_for(lambda: daemon.job("tenant-1")["iteration"] == 40, 10, "all good beats")
        assert daemon.metric("adloader_dropped_frames_total") >= len(bad)
        assert daemon.state("tenant-1") == "running"
    job = daemon.submit("after", iterations=10)
    wait_for(lambda: daemon.state(job) == "finished", 120, "a job after the bad frames")
    assert daemon.metric("adloader_loop_errors_total") == 0


def test_outliers_from_one_job_cannot_break_the_model_of_the_node(daemon):
    masters = [RawMaster(daemon.endpoint) for _ in range(7)]
    try:
        for k, m in enumerate(masters):
            m.register(f"t{k}", f"tok{k}")
        wait_for(lambda: len(daemon.events("attached")) == 7, 10, "seven tenants")
        poison = masters[0]
        for i in range(1, 30):  # finite but absurd, and non-finite (dropped as frames)
            poison.beat("t0", "tok0", i, step_s=86400.0, samples_per_s=1e9, workers=1024)
            poison.send(b'{"type": "heartbeat", "job": "t0", "token": "tok0", "iteration": 1,'
                        b' "step_s": Infinity, "data_wait_s": 0, "samples_per_s": 1,'
                        b' "workers": 1}')
        for i in range(1, 4):
            for k, m in enumerate(masters[1:], 1):
                m.beat(f"t{k}", f"tok{k}", i * 5, step_s=0.04 + 0.01 * k)
            time.sleep(2.1)  # pacing: the daemon keeps one sample per job per 2 s
        wait_for(lambda: daemon.http.get("/v1/model").json()["samples"]["training"] >= 6, 20,
                 "six training samples")
        r = daemon.http.post("/v1/model/fit")
        assert r.status_code == 200, r.text
        assert all(math.isfinite(v) for v in r.json()["training"]["r2"].values()
                   if v is not None)
        assert daemon.metric("adloader_dropped_frames_total") >= 29
    finally:
        for m in masters:
            m.close()


def test_a_very_deep_model_is_counted_off_the_event_loop(daemon):
    """Resnet600's FLOPs take seconds to count: other requests are answered meanwhile."""
    body = _body(name="deep", model="Resnet600")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        submitted = pool.submit(daemon.http.post, "/v1/jobs", json=body, timeout=180)
        latencies = []
        with httpx.Client(base_url=daemon.url, headers=daemon.http.headers, timeout=30) as c:
            while not submitted.done():
                t0 = time.perf_counter()
                assert c.get("/v1/jobs").status_code == 200
                latencies.append(time.perf_counter() - t0)
                time.sleep(0.02)  # pacing: a probe every 20 ms while the count runs
        counted = time.monotonic() - started
        assert submitted.result().status_code == 201
    assert counted > 1.0 and len(latencies) > 10  # it took a while, and others were served
    assert max(latencies) < min(1.0, counted / 2)
    t0 = time.perf_counter()
    r = daemon.http.post("/v1/jobs", json=_body(model="Resnet1000000"))
    assert r.status_code == 422 and time.perf_counter() - t0 < 1.0


def test_a_finish_for_another_job_with_a_guessed_token_is_refused(daemon):
    job = daemon.submit("target", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 3, 90, "the job to train")
    with RawMaster(daemon.endpoint) as attacker:
        attacker.send(Finish(job=job, token="guess", iterations=1))
        [answer] = attacker.received(2.0)
        assert answer.type == "refused" and "token" in answer.reason
    assert daemon.state(job) == "running"
