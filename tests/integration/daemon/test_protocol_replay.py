"""Recorded v1 control traffic replayed against a real daemon (issue "Operable for months",
item 5: each side reads the messages of the protocol version before and after its own).

``tests/protocol_traffic/v1-session.json`` is what two real v1 jobs (``attach`` on an
``ElasticDataLoader``) and a real daemon said to each other, frame by frame, captured by
``tests/protocol_traffic/record.py`` between the two: job ``a`` registers, heartbeats, is
resized (1 -> 4 workers); job ``b`` arrives, both are resized (2 each), ``b`` finishes, ``a``
is resized back to 4 and finishes; each heartbeat acknowledges the last command applied
(``applied_seq``). Here a real daemon of the test's own (``daemon_harness.Daemon``, its
SQLite store in a temporary folder, started with the recording's settings) gets the jobs'
frames again, byte for byte, at their recorded offsets, each job's on a DEALER of its own (no
routing id set, as the master sets none: the daemon gives one a connection). Like a master,
a connection sends nothing after its Register until that is answered.

One daemon takes both replays (module scope: a daemon's start is the slow part); the
replays run one after the other, each waiting for its jobs' ends.

``tests/protocol_traffic/v1-operator.json`` is an operator's session, recorded the same way
with v1 masters: one job under ``adloader run`` is paused, resumed and cancelled over REST
(Pause, Paused, Resume, Stop, Finish, and its supervisor's Exit on a connection of its own).
The recorded REST calls are made again at their offsets; a job frame that acknowledges a
command (a Paused, a heartbeat's ``applied_seq``) is sent only once that command came, as a
master would.

Substitutions: none in the v1 replay. Nothing in the jobs' frames has to be fresh for a run:
a job started by hand chooses its own id and token (trust on first use), so the recorded
``recorded-job-a`` and ``recorded-token-a`` register afresh with a daemon that has never seen
them; ``pid`` (the recording's job process) is not trusted anyway — the daemon records the
kernel's pid of the connection (this test's process; asserted); ``cpu_group`` is the
recording's session, at most an event saying it is not the daemon's; ``applied_seq`` names
the daemon's command numbers, which a replay that gets the same answers numbers the same
(asserted through the answers). The daemon's answers are not replayed: they are what the
test expects back.

The v2 replay sends every job frame with one field this release does not know (``sent_at``:
the frame's recorded offset) and Register with ``protocol: 2``, as a master of the next
version would: the daemon must take it all as before and count each unknown field
(``adloader_unknown_fields_total``). Its one substitution: the job ids get ``-v2`` appended,
since the same daemon has seen the recorded ids end (an ended id is refused, by design).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import msgspec
import pytest
import zmq
from daemon_harness import Daemon, wait_for

from adloader.protocol import PROTOCOL, decode_from_job, decode_to_job

TRAFFIC = Path(__file__).resolve().parents[2] / "protocol_traffic"
RECORDINGS = ("v1-session.json", "v1-operator.json")
JOB_SIDE, DAEMON_SIDE = "job->daemon", "daemon->job"
ANSWER_S = 10.0  # for the Register's answer, and for the daemon to end the jobs
UNKNOWN_FIELD = "sent_at"  # what a v2 master might add; not a field of protocol 1
V2_SUFFIX = "-v2"  # the v2 replay's job ids: the recorded ones + this
ENDED = ("finished", "failed", "cancelled", "lost")
OPERATOR_COMMANDS = ("pause", "resume", "stop")  # what an operator's REST calls make it send


def _session(name: str = RECORDINGS[0]) -> dict:
    return json.loads((TRAFFIC / name).read_text())


def _acknowledged(frame: dict) -> int:
    """The daemon's command number a job frame says it applied (0: none)."""
    data = json.loads(frame["frame"])
    return data.get("seq", 0) if data["type"] == "paused" else data.get("applied_seq", 0)


def _operator_call(daemon: Daemon, call: dict, job: str) -> None:
    answer = (daemon.http.post(f"/v1/jobs/{job}/cancel") if call["call"] == "cancel"
              else daemon.http.post(f"/v1/jobs/{job}/{call['call']}"))
    assert answer.status_code == 200, (call, answer.status_code, answer.text)


def _as_v2(frame: str, t: float, suffix: str = "") -> bytes:
    """The frame as a v2 master would send it: one field v1 does not know, and Register
    saying its version (and, from a job, its id with ``suffix``)."""
    data = json.loads(frame)
    data[UNKNOWN_FIELD] = t
    if data["type"] == "register":
        data["protocol"] = PROTOCOL + 1
    if "job" in data:
        data["job"] += suffix
    return json.dumps(data).encode()


def _replay(daemon: Daemon, session: dict, v2: bool = False) -> tuple[dict, dict]:
    """Send the recorded job frames at their offsets (as v2 frames with ``v2``); returns
    (answers by connection, the job's state in ``GET /v1/jobs`` once its Register was
    answered, by connection)."""
    context = zmq.Context()
    socks: dict[str, zmq.Socket] = {}
    answers: dict[str, list] = {}
    poller = zmq.Poller()
    seen_running: dict[str, str] = {}
    suffix = V2_SUFFIX if v2 else ""
    jobs = [spec["job"] + suffix for spec in session["jobs"].values()]

    def pump(timeout_s: float) -> None:
        for sock, _ in poller.poll(max(0, int(timeout_s * 1000))):
            conn = next(c for c, s in socks.items() if s is sock)
            while sock.poll(0):
                answers[conn].append(decode_to_job(sock.recv()))

    timeline = sorted([(f["t"], 0, f) for f in session["frames"] if f["dir"] == JOB_SIDE]
                      + [(c["t"], 1, c) for c in session.get("operator", [])],
                      key=lambda item: (item[0], item[1]))
    try:
        start = time.monotonic()
        for t, is_call, frame in timeline:
            while (left := start + t - time.monotonic()) > 0:
                pump(left)
            if is_call:
                _operator_call(daemon, frame, session["jobs"][frame["job"]]["job"] + suffix)
                continue
            conn = frame["conn"]
            if conn not in socks:
                sock = socks[conn] = context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(daemon.endpoint)
                poller.register(sock, zmq.POLLIN)
                answers[conn] = []
            elif conn not in seen_running:  # as a master: nothing before the Register's answer
                asked = time.monotonic()
                deadline = asked + ANSWER_S
                while not answers[conn] and time.monotonic() < deadline:
                    pump(deadline - time.monotonic())
                assert answers[conn], f"{conn}: no answer to its Register in {ANSWER_S:g} s"
                start += time.monotonic() - asked  # late: the rest keeps its spacing
                listed = {j["id"]: j["state"] for j in daemon.http.get("/v1/jobs").json()}
                seen_running[conn] = listed.get(session["jobs"][conn]["job"] + suffix)
            if session.get("operator") and (seq := _acknowledged(frame)):
                asked = time.monotonic()  # as a master: it acknowledges what it was sent
                deadline = asked + ANSWER_S
                while (max((getattr(a, "seq", 0) for a in answers[conn]), default=0) < seq
                       and time.monotonic() < deadline):
                    pump(deadline - time.monotonic())
                assert max((getattr(a, "seq", 0) for a in answers[conn]), default=0) >= seq, \
                    f"{conn}: command {seq} not sent within {ANSWER_S:g} s of {frame['type']}"
                start += time.monotonic() - asked
            socks[conn].send(_as_v2(frame["frame"], frame["t"], suffix) if v2
                             else frame["frame"].encode())

        def ended() -> bool:
            pump(0.05)  # answers still on their way are taken meanwhile
            listed = {j["id"]: j["state"] for j in daemon.http.get("/v1/jobs").json()}
            return all(listed.get(job) in ENDED for job in jobs)

        wait_for(ended, ANSWER_S, f"the daemon to end {jobs}", interval=0.0)
        pump(0.3)  # anything more the daemon would send (nothing was recorded after the ends)
        return answers, seen_running
    finally:
        for sock in socks.values():
            sock.close()
        context.term()


def _recorded_answers(session: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {conn: [] for conn in session["jobs"]}
    for frame in session["frames"]:
        if frame["dir"] == DAEMON_SIDE:
            out.setdefault(frame["conn"], []).append(frame["type"])
    return out


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    settings = _session()["daemon"]
    d = Daemon(tmp_path_factory.mktemp("replay") / "state", capacity=settings["capacity"],
               gpus=settings["gpus"], window=settings["window"],
               heartbeat=settings["heartbeat"]).start()
    yield d
    d.stop()


def _assert_replayed(daemon: Daemon, session: dict, answers: dict, seen_running: dict,
                     suffix: str = "") -> None:
    recorded = _recorded_answers(session)
    for conn, spec in session["jobs"].items():
        job = spec["job"] + suffix
        got = [a.type for a in answers[conn]]
        # the same kinds of answer as recorded, first the allocation, none other (no refusal);
        # how many resizes a loaded machine's timing gives may differ from the recording's
        assert got[:1] == recorded[conn][:1] and set(got) <= set(recorded[conn]), \
            f"{conn} ({job}): answered {got}, recorded {recorded[conn]}"
        assert len(got) >= 2 or len(recorded[conn]) < 2, (conn, got)  # it was resized too
        assert seen_running[conn] == "running", (conn, seen_running)
        view = {j["id"]: j for j in daemon.http.get("/v1/jobs").json()}[job]
        assert {"state": view["state"], "iteration": view["iteration"]} == spec["final"], view
        events = daemon.events(job=job)
        attached = [e for e in events if e["kind"] == "attached"]
        assert attached[0]["data"]["pid"] == os.getpid()  # the kernel's word, not the recorded
        kinds = [e["kind"] for e in events]
        assert kinds[0] == "attached" and kinds[-1] == spec["final"]["state"], kinds
        assert "refused" not in kinds, kinds
        commands = [kind for kind in got if kind in OPERATOR_COMMANDS]
        assert commands == [kind for kind in recorded[conn] if kind in OPERATOR_COMMANDS], got
    for counter in ("dropped_frames", "refused_messages", "loop_errors", "storage_errors"):
        assert daemon.metric(f"adloader_{counter}_total") == 0, (counter, daemon.log[-3000:])


@pytest.mark.parametrize("name", RECORDINGS)
def test_the_recordings_are_v1_traffic_of_every_exchange(name):
    """What the replays rely on: v1 recordings (no ``protocol`` sent) holding each kind of
    exchange — register, heartbeats, resizes and finish; pause, resume, stop and a
    supervisor's exit — every frame one this release reads without an unknown field."""
    session = _session(name)
    assert session["protocol"] == 1
    kinds = {(f["dir"], f["type"]) for f in session["frames"]}
    assert {(JOB_SIDE, "register"), (JOB_SIDE, "heartbeat"), (JOB_SIDE, "finish"),
            (DAEMON_SIDE, "allocation")} <= kinds
    if name == "v1-session.json":
        assert (DAEMON_SIDE, "resize") in kinds
    else:
        assert {(DAEMON_SIDE, "pause"), (JOB_SIDE, "paused"), (DAEMON_SIDE, "resume"),
                (DAEMON_SIDE, "stop"), (JOB_SIDE, "exit")} <= kinds
        assert [c["call"] for c in session["operator"]] == ["pause", "resume", "cancel"]
        assert {spec["final"]["state"] for spec in session["jobs"].values()} == {"cancelled"}
    for frame in session["frames"]:
        raw = frame["frame"].encode()
        msg = decode_from_job(raw) if frame["dir"] == JOB_SIDE else decode_to_job(raw)
        assert msg.type == frame["type"] and msg.unknown_fields == 0
        assert frame["protocol"] is None  # a v1 master does not say its version
        if frame["dir"] == DAEMON_SIDE:  # and this release's master reads a v2 daemon's
            newer = decode_to_job(_as_v2(frame["frame"], frame["t"]))
            assert newer.unknown_fields == 1
            assert msgspec.structs.asdict(newer) == msgspec.structs.asdict(msg)


@pytest.mark.parametrize("name", RECORDINGS)
def test_recorded_v1_traffic_is_answered_as_it_was(daemon, name):
    session = _session(name)
    before = daemon.metric("adloader_unknown_fields_total")
    answers, seen_running = _replay(daemon, session)
    _assert_replayed(daemon, session, answers, seen_running)
    assert daemon.metric("adloader_unknown_fields_total") == before  # v1 sends none


@pytest.mark.parametrize("name", RECORDINGS)
def test_v1_traffic_with_a_v2_field_in_every_job_message_is_taken_and_counted(daemon, name):
    session = _session(name)
    before = daemon.metric("adloader_unknown_fields_total")
    answers, seen_running = _replay(daemon, session, v2=True)
    _assert_replayed(daemon, session, answers, seen_running, V2_SUFFIX)
    sent = sum(f["dir"] == JOB_SIDE for f in session["frames"])
    assert daemon.metric("adloader_unknown_fields_total") - before == sent  # one a frame
