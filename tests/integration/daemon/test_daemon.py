"""The live system with real processes: a daemon, jobs over ZeroMQ, REST, SQLite."""

import contextlib
import os
import signal

import pytest
import zmq
from daemon_harness import Daemon, sessions_split_cpu, wait_for

from adloader.protocol import Finish, Heartbeat, encode


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state").start()
    yield d
    d.stop()
    for log in (tmp_path / "state" / "logs").glob("*.log"):  # any job still running
        for pid in _pids_writing(log):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _pids_writing(log):
    import psutil

    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if any(f.path == str(log) for f in proc.open_files()):
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


def test_submitted_job_runs_and_finishes(daemon):
    job = daemon.submit("one", iterations=20)
    wait_for(lambda: daemon.job(job)["state"] == "finished", 90, "the job to finish")
    view = daemon.job(job)
    assert view["exit_code"] == 0 and view["iteration"] == 20
    assert view["uid"] == os.getuid()  # its master registered over ipc://, as this user
    kinds = [e["kind"] for e in daemon.events(job=job)]
    assert kinds.index("launched") < kinds.index("registered") < kinds.index("finished")
    wait_for(lambda: "trained smResnet20: 20 iterations" in
             daemon.http.get(f"/v1/jobs/{job}/log").text, 10, "the job's log")


def test_workers_move_when_a_job_arrives_and_when_it_finishes(daemon):
    first = daemon.submit("long", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(first)["iteration"] or 0) > 5, 90, "the first job to train")
    assert daemon.job(first)["workers"] == 4  # alone: the whole node
    second = daemon.submit("short", iterations=40)
    wait_for(lambda: daemon.events("resize", first), 60, "a resize of the first job")
    shrunk = daemon.events("resize", first)[0]["data"]["workers"]
    assert 1 <= shrunk < 4
    alloc = daemon.http.get("/v1/allocations").json()
    assert sum(alloc["jobs"].values()) <= 4
    wait_for(lambda: daemon.job(second)["state"] == "finished", 120, "the second job to finish")
    wait_for(lambda: daemon.job(first)["workers"] == 4, 30, "the first job to get workers back")
    before = daemon.job(first)["iteration"]
    wait_for(lambda: daemon.job(first)["iteration"] > before + 5, 30, "training to go on")


def test_sigkilled_job_fails_with_its_signal_and_its_workers_are_reclaimed(daemon):
    victim = daemon.submit("victim", iterations=100000, step_scale=2.0)
    other = daemon.submit("other", iterations=100000, step_scale=2.0)
    wait_for(lambda: all((daemon.job(j)["iteration"] or 0) > 3 for j in (victim, other)), 120,
             "both jobs to train")
    assert daemon.job(other)["workers"] < 4
    os.killpg(daemon.job(victim)["supervisor_pid"], signal.SIGKILL)  # the whole group
    # known at once (its supervisor died with it), then an immediate replan
    wait_for(lambda: daemon.job(victim)["state"] == "failed", 5, "the killed job to fail")
    assert daemon.job(victim)["exit_code"] == -signal.SIGKILL
    assert daemon.job(victim)["reason"] == "killed by SIGKILL"
    wait_for(lambda: daemon.job(other)["workers"] == 4, 10, "its workers to go to the other")


def test_daemon_killed_and_restarted_loses_no_job(daemon, tmp_path):
    job = daemon.submit("survivor", iterations=700, step_scale=2.0)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 5, 90, "the job to train")
    daemon.kill()
    restarted = Daemon(daemon.state_dir, port=daemon.port).start()
    try:
        assert restarted.job(job)["state"] == "running"
        seen = restarted.job(job)["iteration"] or 0
        wait_for(lambda: (restarted.job(job)["iteration"] or 0) > seen, 30,
                 "heartbeats from the job to reach the restarted daemon")
        wait_for(lambda: restarted.job(job)["state"] == "finished", 120,
                 "the job to finish under the restarted daemon")
        assert restarted.job(job)["exit_code"] in (0, None)
        assert restarted.events("recovered", job)
    finally:
        restarted.stop()


def test_malformed_frames_and_forged_messages_change_nothing(daemon):
    job = daemon.submit("target", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 3, 90, "the job to train")
    ctx = zmq.Context()
    try:
        for identity in (b"intruder", job.encode() + b"-x"):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, identity)
            sock.setsockopt(zmq.LINGER, 2000)  # deliver before close
            sock.connect(f"ipc://{daemon.state_dir / 'control.sock'}")
            sock.send(b"not json")
            sock.send_multipart([b"two", b"frames"])
            sock.send(b"x" * 100_000)
            forged = [Finish(job=job, token="guess", iterations=1),
                      Heartbeat(job=job, token="guess", iteration=0, step_s=0, data_wait_s=0,
                                samples_per_s=0, workers=0)]
            for msg in forged:
                sock.send(encode(msg))
            sock.close()
        wait_for(lambda: daemon.metric("adloader_refused_messages_total") >= 4, 10,
                 "the forged messages to be refused")
        wait_for(lambda: daemon.metric("adloader_dropped_frames_total") >= 2, 10,
                 "the malformed frames to be dropped")
    finally:
        ctx.term()
    assert daemon.job(job)["state"] == "running"
    before = daemon.job(job)["iteration"]
    wait_for(lambda: daemon.job(job)["iteration"] > before + 3, 30, "training to go on")
    assert daemon.http.get("/healthz").json()["status"] == "ok"


def test_bad_rest_bodies_are_4xx(daemon):
    r = daemon.http.post("/v1/jobs", json={"name": "x", "command": ["true"], "model": "Resnet7",
                                           "batch_size": 8, "iterations": 1})
    assert 400 <= r.status_code < 500 and "model" in r.text
    r = daemon.http.post("/v1/jobs", json={"name": "x", "command": ["true"], "model": "Resnet18",
                                           "batch_size": 8, "iterations": 1, "gpus": 64})
    assert 400 <= r.status_code < 500 and "gpus" in r.text
    assert daemon.http.get("/v1/jobs/j-999999").status_code == 404
    assert daemon.http.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_job_started_by_hand_is_scheduled_like_a_submitted_one(daemon):
    import subprocess
    import sys

    env = dict(os.environ, ADLOADER_STATE_DIR=str(daemon.state_dir))
    cmd = [sys.executable, "-m", "adloader", "run", "--", sys.executable, "-m",
           "adloader.workloads.train", "--model", "mdResnet12", "--batch-size", "8",
           "--iterations", "40", "--images", "16", "--crop", "32", "--workers", "1",
           "--data", str(daemon.state_dir.parent / "jpeg")]
    # from another terminal: its own session
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        found = wait_for(lambda: [j for j in daemon.http.get("/v1/jobs").json()
                                  if j["spec"]["command"] == ["(started by hand)"]], 60,
                         "the job to register itself")
        job = found[0]["id"]
        wait_for(lambda: daemon.job(job)["state"] == "finished", 90, "it to finish")
        assert proc.wait(30) == 0
        assert daemon.events("attached", job)
        assert daemon.job(job)["uid"] == os.getuid()  # the user the kernel said registered it
        if sessions_split_cpu():  # the kernel shares CPU per session: the daemon says so
            assert daemon.events("separate_cpu_group", job)
        else:
            assert not daemon.events("separate_cpu_group", job)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_replay_writes_the_sim_result_shape(daemon, tmp_path):
    from adloader.sim.trace import Trace, TraceJob
    from adloader.workloads.replay import replay

    trace = Trace(jobs=[
        TraceJob(name="a", model="smResnet20", batch_size=8, gpus=1, iterations=30, arrival_s=0),
        TraceJob(name="b", model="mdResnet12", batch_size=8, gpus=1, iterations=30,
                 arrival_s=1),
    ])

    def call(method, path, **kw):
        r = daemon.http.request(method, path, **kw)
        r.raise_for_status()
        return r

    result = replay(trace, call, crop=32, images=16, data=str(tmp_path / "jpeg"),
                    timeout_s=180)
    assert {j["name"] for j in result["jobs"]} == {"a", "b"}
    assert all(j["state"] == "finished" and j["throughput"] > 0 for j in result["jobs"])
    for key in ("policy", "cores", "makespan_s", "aggregate_throughput", "mean_jct_s",
                "gpu_idle_fraction", "reallocations", "timeline"):
        assert key in result
    assert result["timeline"] and all(sum(e["workers"].values()) <= 4 for e in result["timeline"])


def test_pause_with_checkpoint_then_resume(daemon):
    job = daemon.submit("pausable", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 3, 90, "the job to train")
    r = daemon.http.post(f"/v1/jobs/{job}/pause", params={"checkpoint": True})
    assert r.status_code == 200, r.text
    wait_for(lambda: daemon.job(job)["state"] == "paused", 30, "the job to pause")
    assert daemon.job(job)["workers"] == 0
    paused = daemon.events("paused", job)[-1]["data"]
    assert paused["checkpoint"] and os.path.exists(paused["checkpoint"])
    held = daemon.job(job)["iteration"]
    assert daemon.http.post(f"/v1/jobs/{job}/pause").status_code == 409  # not running: 409
    r = daemon.http.post(f"/v1/jobs/{job}/resume")
    assert r.status_code == 200, r.text
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > held + 3, 30, "training to go on")
    wait_for(lambda: daemon.job(job)["workers"] == 4, 30, "its share of the workers back")


def test_heartbeats_become_samples_and_the_model_is_refitted(daemon):
    job = daemon.submit("teacher", iterations=100000, step_scale=2.0)
    assert daemon.http.get("/v1/model").json()["source"] == "prior"
    wait_for(lambda: max(daemon.http.get("/v1/model").json()["samples"].values()) >= 6, 120,
             "six samples of one kind from heartbeats")
    r = daemon.http.post("/v1/model/fit")
    assert r.status_code == 200, r.text
    model = daemon.http.get("/v1/model").json()
    assert model["source"] == "online"
    assert daemon.events("model_fit")
    assert daemon.job(job)["state"] == "running"


def test_the_node_summary_follows_a_job_that_arrives(tmp_path):
    d = Daemon(tmp_path / "state", capacity=4, extra=("--node-cache-mb", "2")).start()
    try:
        empty = d.http.get("/v1/node").json()
        assert (empty["jobs"], empty["free_workers"], empty["node_workers"]) == (0, 4, 0)
        assert empty["cache"]["capacity_bytes"] == 2 << 20
        job = d.submit("one", iterations=400)
        wait_for(lambda: d.job(job)["state"] == "running"
                 and d.http.get("/v1/node").json()["jobs"] == 1, 60, "the job to run")
        now = d.http.get("/v1/node").json()
        assert now["node_workers"] == d.job(job)["workers"] >= 1
        assert now["free_workers"] == 4 - now["node_workers"]
        assert now["predicted_rate"] > 0 and now["spare_rate"] < empty["spare_rate"]
        assert d.http.get("/v1/node", headers={"Authorization": "Bearer nope"}
                          ).status_code == 401
    finally:
        d.stop()


def test_a_job_started_by_hand_that_states_no_length_is_listed_running_and_ended(daemon,
                                                                                  tmp_path):
    """A Register may leave the length out (a submitted spec may not): its record is still
    kept and listed (it was lost from the listings, and the listing answered 500 while it ran)."""
    import subprocess
    import sys

    from daemon_harness import script

    cmd = script(tmp_path, "no_length.py", "\n".join([
        "import time",
        "from adloader import ElasticDataLoader, attach",
        "loader = ElasticDataLoader(list(range(1000)), batch_size=4)",
        "attach(loader, model='smResnet20')",
        "for i, batch in enumerate(loader):",
        "    time.sleep(0.05)  # pacing: a training step",
        "    if i == 60:",
        "        break"]))
    env = dict(os.environ, ADLOADER_STATE_DIR=str(daemon.state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "adloader", "run", "--", *cmd], env=env)
    try:
        listed = wait_for(lambda: [j for j in daemon.http.get("/v1/jobs").json()
                                   if j["name"] == "no_length.py"], 60, "the job to be listed")
        assert listed[0]["spec"]["iterations"] is None and listed[0]["state"] == "running"
        assert daemon.http.get(f"/v1/jobs/{listed[0]['id']}").status_code == 200
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    wait_for(lambda: daemon.job(listed[0]["id"])["state"] == "finished", 30, "it to end")
    assert [j["state"] for j in daemon.http.get("/v1/jobs").json()] == ["finished"]
