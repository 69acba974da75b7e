"""No tenant may speak for another: tokens are never stored, commands go only to the
connection that proved the job's token, terminal states are terminal, and nothing a tenant
names can forge another's metrics (real daemon, real sockets, real processes)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import sys

import pytest
from daemon_harness import Daemon, RawMaster, attached_script, script, wait_for
from prometheus_client.parser import text_string_to_metric_families

from adloader.client.loader.loader import ElasticDataLoader
from adloader.errors import InputError
from adloader.protocol import Finish, Heartbeat, Paused, Register


@contextlib.contextmanager
def daemon_stopped(daemon):
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state").start()
    yield d
    d.stop()


def _steal_tokens(db_path: str, victim: str) -> str:
    """A job that reads the state database and tries every secret-looking value in it."""
    return f"""
import sqlite3, sys, time, zmq
from adloader.protocol import Finish, encode
db = sqlite3.connect({db_path!r})
values = set()
for table, in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
    for row in db.execute(f"SELECT * FROM {{table}}"):
        values.update(v for v in row if isinstance(v, str) and 16 <= len(v) <= 256)
print("candidates", len(values), flush=True)
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 2000)
import os; s.connect(os.environ["ADLOADER_ENDPOINT"])
for v in values:
    for token in (v, v.split(":")[-1]):
        s.send(encode(Finish(job={victim!r}, token=token[:256], iterations=1)))
refused = 0
while s.poll(2000):
    refused += '"refused"' in s.recv().decode()
print("refused", refused, flush=True)
"""


def test_a_job_that_reads_the_state_database_cannot_finish_another(daemon, tmp_path):
    victim = daemon.submit("victim", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(victim)["iteration"] or 0) > 3, 90, "the victim to train")
    db = daemon.state_dir / "adloader.db"
    thief = daemon.submit("thief", command=script(tmp_path, "thief.py",
                                                  _steal_tokens(str(db), victim)))
    wait_for(lambda: daemon.state(thief) in ("finished", "failed"), 90, "the thief to end")
    log = daemon.http.get(f"/v1/jobs/{thief}/log").text
    assert daemon.state(thief) == "finished", log
    candidates = int(log.split("candidates")[1].split()[0])
    refused = int(log.split("refused")[1].split()[0])
    assert candidates > 0 and refused >= candidates  # every try refused
    assert daemon.state(victim) == "running"
    # and what is on disk: the state dir and its files are the daemon's user's alone
    assert stat.S_IMODE(os.stat(daemon.state_dir).st_mode) == 0o700
    for name in ("adloader.db", "token", "secret", "daemon.lock"):
        assert stat.S_IMODE(os.stat(daemon.state_dir / name).st_mode) == 0o600, name
    rows = sqlite3.connect(db).execute("SELECT token_digest FROM jobs").fetchall()
    assert all(r[0].startswith("hmac-sha256:") for r in rows if r[0])


def test_a_stolen_routing_id_hears_nothing_and_the_job_is_not_lost(daemon, tmp_path):
    victim = daemon.submit("victim", iterations=100000, step_scale=2.0)
    wait_for(lambda: (daemon.job(victim)["iteration"] or 0) > 3, 90, "the victim to train")
    with RawMaster(daemon.endpoint, identity=victim.encode()) as thief:
        thief.send(Heartbeat(job=victim, token="guess", iteration=0, step_s=0, data_wait_s=0,
                             samples_per_s=0, workers=0))
        r = daemon.http.post(f"/v1/jobs/{victim}/pause")
        assert r.status_code == 200, r.text
        wait_for(lambda: daemon.state(victim) == "paused", 30, "the real job to pause")
        heard = thief.received(1.0)  # the refusal of its own guess; never the victim's pause
        assert [m.type for m in heard] == ["refused"], heard
    assert daemon.http.post(f"/v1/jobs/{victim}/resume").status_code == 200
    held = daemon.job(victim)["iteration"]
    wait_for(lambda: daemon.job(victim)["iteration"] > held + 3, 30, "the victim to go on")
    assert daemon.state(victim) == "running"


def test_a_job_naming_another_with_its_own_token_changes_nothing(tmp_path):
    daemon = Daemon(tmp_path / "slow", heartbeat=5.0).start()  # nobody is lost meanwhile
    with daemon_stopped(daemon), RawMaster(daemon.endpoint) as victim, \
            RawMaster(daemon.endpoint) as attacker:
        victim.register("victim-1", "victim-token")
        attacker.register("attacker-1", "attacker-token")
        wait_for(lambda: [e for e in daemon.events("plan")
                          if len(e["data"]["workers"]) == 2], 10, "both to attach and be planned")
        assert victim.received(0.5)[0].type == "allocation"  # and perhaps a resize
        assert attacker.received(0.5)[0].type == "allocation"
        forged = [Heartbeat(job="victim-1", token="attacker-token", iteration=999, step_s=1,
                            data_wait_s=0, samples_per_s=1, workers=3),
                  Paused(job="victim-1", token="attacker-token", seq=5),
                  Finish(job="victim-1", token="attacker-token", iterations=999),
                  Register(job="victim-1", token="attacker-token",
                           features={"batch_size": 8, "flops_g": 1, "params_m": 1})]
        for i in range(20):  # data-bound beats: no correction of c_i re-plans meanwhile
            victim.beat("victim-1", "victim-token", i + 1, data_wait_s=0.05)
            attacker.beat("attacker-1", "attacker-token", i + 1, data_wait_s=0.05)  # not lost
            attacker.send(forged[i % len(forged)])
        answers = attacker.received(1.5)
        assert len(answers) == 20 and {a.type for a in answers} == {"refused"}
        assert victim.received(0.5) == []  # nothing was sent to the victim
        view = daemon.job("victim-1")
        assert view["state"] == "running" and view["iteration"] == 20
        for event in daemon.events(job="victim-1"):
            assert event["kind"] in ("attached", "resize", "refused"), event


def test_terminal_states_stay_terminal_across_a_restart(daemon):
    job = daemon.submit("done", iterations=10)
    wait_for(lambda: daemon.state(job) == "finished", 90, "the job to finish")
    daemon.stop()
    again = Daemon(daemon.state_dir, port=daemon.port).start()
    try:
        with RawMaster(again.endpoint) as m:
            m.register(job, "any-token")
            m.beat(job, "any-token", 5)
            answers = m.received(1.0)
        assert [a.type for a in answers] == ["refused", "refused"]
        assert "ended (finished)" in answers[0].reason
        assert again.job(job)["state"] == "finished" and again.job(job)["workers"] == 0
        with RawMaster(again.endpoint) as m:  # ids the daemon gives are not for the taking
            m.register("j-000099", "tok")
            [answer] = m.received(1.0)
        assert answer.type == "refused" and again.http.get("/v1/jobs/j-000099").status_code \
            == 404
    finally:
        again.stop()


def test_job_ids_cannot_inject_metrics_lines(daemon):
    with RawMaster(daemon.endpoint) as m:
        for job in ('x"} 1\nadloader_capacity_workers 99999', "a\nb"):  # sent as raw frames
            m.send(json.dumps({"type": "register", "job": job, "token": "tok", "features": {
                "batch_size": 8, "flops_g": 1.0, "params_m": 1.0}}).encode())
        m.register("ok-job", "tok")
        wait_for(lambda: daemon.events("attached"), 10, "the well-formed one to attach")
    text = daemon.http.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.value for s in families["adloader_capacity_workers"].samples] == [4.0]
    jobs = {s.labels["job_id"] for s in families["adloader_job_workers"].samples}
    assert jobs == {"ok-job"}
    assert daemon.metric("adloader_dropped_frames_total") == 2


def test_a_job_is_the_process_the_kernel_says_connected_not_the_pid_it_claims(daemon):
    """A master that claims another process's pid (init's) is recorded with its own: the
    kernel's credentials of the connection (SO_PEERCRED), which a tenant cannot forge."""
    with RawMaster(daemon.endpoint) as m:
        m.register("claims-init", "tok", pid=1)
        wait_for(lambda: daemon.events("attached", "claims-init"), 10, "it to attach")
    assert daemon.job("claims-init")["pid"] == os.getpid()
    assert daemon.events("attached", "claims-init")[0]["data"]["pid"] == os.getpid()


def test_peer_credentials_are_read_from_the_property_libzmq_sets():
    from adloader.daemon.control.broker import Peer, peer_of

    got = peer_of("localhost:1000:100:4242")
    assert isinstance(got, Peer) and got[:3] == (1000, 100, 4242) and got.seen > 0
    assert peer_of("10.0.0.7") is None  # tcp: no credentials
    assert peer_of("localhost:0:0:0") is None  # a process this namespace cannot see
    assert peer_of(None) is None and peer_of("a:b:c:d") is None


def test_worker_counts_are_bounded_with_a_message_naming_the_limit():
    loader = ElasticDataLoader(list(range(10)), batch_size=2)
    with pytest.raises(InputError, match="at most 1024"):
        loader.resize(10000)
    with pytest.raises(InputError, match="at most 1024"):
        ElasticDataLoader(list(range(10)), batch_size=2, num_workers=5000)


def test_a_tenant_script_gets_only_its_own_token(daemon, tmp_path):
    """A launched job's environment holds its own token and not the REST one."""
    os.environ["ADLOADER_TOKEN"] = daemon.token  # exported in the daemon's user's shell
    try:
        body = ("import os; print(sorted(k for k in os.environ if 'TOKEN' in k)); "
                "print(len(os.environ['ADLOADER_JOB_TOKEN']))")
        job = daemon.submit("env", command=[sys.executable, "-c", body])
    finally:
        del os.environ["ADLOADER_TOKEN"]
    wait_for(lambda: daemon.state(job) in ("finished", "failed"), 60, "it to end")
    log = daemon.http.get(f"/v1/jobs/{job}/log").text
    assert "['ADLOADER_JOB_TOKEN']" in log and daemon.token not in log


def test_a_job_started_by_hand_is_heard_again_after_the_daemon_restarts(daemon, tmp_path):
    """A job started by hand keeps its identity across a daemon restart: its heartbeats,
    proved with its token, reach the new daemon (a new connection takes over by proof) —
    even when another process squats on the job's id as a routing id meanwhile."""
    import subprocess

    cmd = attached_script(tmp_path, "hand.py")
    env = dict(os.environ, ADLOADER_ENDPOINT=daemon.endpoint, ADLOADER_JOB="by-hand-1",
               ADLOADER_JOB_TOKEN="hand-token")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (daemon.job("by-hand-1") or {}).get("iteration"), 30, "it to attach")
        daemon.kill()
        squatter = RawMaster(daemon.endpoint, identity=b"by-hand-1")  # waits to reconnect
        again = Daemon(daemon.state_dir, port=daemon.port).start()
        try:
            squatter.send(b"hello")  # it is connected, and is heard: a malformed frame
            wait_for(lambda: again.metric("adloader_dropped_frames_total") >= 1, 10,
                     "the squatter to be connected")
            seen = again.job("by-hand-1")["iteration"] or 0
            wait_for(lambda: (again.job("by-hand-1")["iteration"] or 0) > seen, 30,
                     "its heartbeats to reach the new daemon")
            assert again.metric("adloader_refused_messages_total") == 0
            assert squatter.received(0.5) == []
        finally:
            squatter.close()
            again.stop()
    finally:
        proc.kill()
        proc.wait()
