"""Record the control traffic of real jobs with a real daemon, for the replay test
(``tests/integration/daemon/test_protocol_replay.py``).

What it does: starts a real daemon (``daemon_harness.Daemon``, its state in a temporary
folder), puts a tiny forwarder between the jobs and the daemon's control socket (a ROUTER the
jobs connect to, and one DEALER to the daemon for each job connection, so the daemon still
sees one connection a job; no product code is changed or hooked), then runs two real short
jobs through the real client (``attach`` on an ``ElasticDataLoader``, each in its own
process): ``a`` alone first, ``b`` arriving while ``a`` trains, which makes the daemon plan
both and resize. Every frame either way is written down in order, with its offset in seconds
from the first, its connection, its direction, its message type, the ``protocol`` field as
sent (None: not sent; a v1 master does not send it) and the frame's exact text (the wire
format is one UTF-8 JSON frame a message: ``adloader/protocol.py``). The final state and
iteration of each job, as the daemon recorded them, are kept with it.

A second scenario, ``operator``, records what an operator's REST calls make the two sides
say: one job started with ``adloader run`` (its supervisor reports the exit on a connection
of its own), paused once it trains (``POST /v1/jobs/{id}/pause``), resumed
(``POST .../resume``) once it said it paused, and cancelled (``POST .../cancel``) once
it trains again — Pause, Paused, Resume, Stop, Finish and the supervisor's Exit. The REST
calls are kept in the recording (``operator``: offset, call, job), for the replay to make
at the same points.

How to record, from the repository root::

    python3 tests/protocol_traffic/record.py            # -> tests/protocol_traffic/vN-session.json
    python3 tests/protocol_traffic/record.py --scenario operator   # -> vN-operator.json

``N`` is ``adloader.protocol.PROTOCOL`` of the library that runs it; ``--out PATH`` writes
elsewhere (e.g. to look at a recording without keeping it). Each takes ~20 s.

Re-record ONLY for a NEW protocol version, i.e. after ``PROTOCOL`` went up: that release's
recording is added beside the older ones, and the replay test is pointed at it too. A
recording is what a master of that version sent; a daemon must keep answering it for as long
as it promises to read that version, so ``v1-session.json`` (and ``v1-operator.json``, added
while the protocol was still 1: what this release's v1 master says when paused, resumed and
stopped) is never rewritten or edited —
not to "refresh" it, not to make a failing replay pass. The recorder refuses to write over a
file that exists.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the daemon harness

from daemon_harness import Daemon  # noqa: E402

from adloader import env as names  # noqa: E402
from adloader.host.build_info import build_info  # noqa: E402
from adloader.protocol import PROTOCOL  # noqa: E402

# The daemon the recording is made with; the replay starts its daemon with the same.
DAEMON = {"capacity": 4, "gpus": 2, "window": 0.3, "heartbeat": 0.25}
# The jobs: (connection label, job id, token, iterations, seconds a batch). Ids and tokens are
# fixed and plain: a job started by hand chooses both (trust on first use), nothing secret.
JOBS = (("a", "recorded-job-a", "recorded-token-a", 200, 0.02),
        ("b", "recorded-job-b", "recorded-token-b", 60, 0.02))
JOB_SCRIPT = """
import os, sys, time
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
iterations, step_s, go = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 60
while go != "-" and not os.path.exists(go):  # imported: arrive when the recorder says
    if time.monotonic() > deadline:
        sys.exit("no go from the recorder")
    time.sleep(0.01)  # the poll's interval, under the deadline above
loader = ElasticDataLoader(list(range(4 * iterations)), batch_size=4, num_workers=0)
attach(loader, model="smResnet20", batch_size=4, iterations=iterations)
for batch in loader:
    time.sleep(step_s)  # pacing: a training step
"""
DEADLINE_S = 120.0
JOB_DIRECTION, DAEMON_DIRECTION = "job->daemon", "daemon->job"


class Forwarder:
    """A ROUTER for the jobs; for each job connection its own DEALER to the daemon. Every
    frame passed on is written down."""

    def __init__(self, listen: str, daemon_endpoint: str):
        self.context = zmq.Context()
        self.front = self.context.socket(zmq.ROUTER)
        self.front.setsockopt(zmq.LINGER, 0)
        self.front.bind(listen)
        self.daemon_endpoint = daemon_endpoint
        self.backs: dict[bytes, zmq.Socket] = {}  # job connection's routing id -> its DEALER
        self.labels: dict[bytes, str] = {}  # routing id -> connection label (job id's label)
        self.poller = zmq.Poller()
        self.poller.register(self.front, zmq.POLLIN)
        self.frames: list[dict] = []
        self.t0: float | None = None

    def _note(self, conn: bytes, direction: str, frame: bytes) -> None:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        data = json.loads(frame.decode())
        self.frames.append({"t": round(now - self.t0, 4), "conn": conn, "dir": direction,
                            "type": data.get("type"), "protocol": data.get("protocol"),
                            "frame": frame.decode()})

    def pump(self, timeout_ms: int) -> None:
        for sock, _ in self.poller.poll(timeout_ms):
            if sock is self.front:
                identity, *frames = self.front.recv_multipart()
                if identity not in self.backs:
                    back = self.context.socket(zmq.DEALER)
                    back.setsockopt(zmq.LINGER, 0)
                    back.connect(self.daemon_endpoint)
                    self.backs[identity] = back
                    self.poller.register(back, zmq.POLLIN)
                for frame in frames:
                    self._note(identity, JOB_DIRECTION, frame)
                self.backs[identity].send_multipart(frames)
            else:
                identity = next(i for i, b in self.backs.items() if b is sock)
                frames = sock.recv_multipart()
                for frame in frames:
                    self._note(identity, DAEMON_DIRECTION, frame)
                self.front.send_multipart([identity, *frames])

    def close(self) -> None:
        for sock in (self.front, *self.backs.values()):
            sock.close()
        self.context.term()


OPERATOR_JOB = ("c", 600, 0.02)  # label, iterations, seconds a batch: ends by a cancel
OPERATOR_BEATS = 3  # heartbeats seen before each call (the job trains between them)


class _Run:
    """One recording's daemon, forwarder and jobs."""

    def __init__(self, work: Path):
        self.work = work
        self.script = work / "job.py"
        self.script.write_text(JOB_SCRIPT)
        self.daemon = Daemon(work / "state", capacity=DAEMON["capacity"], gpus=DAEMON["gpus"],
                             window=DAEMON["window"], heartbeat=DAEMON["heartbeat"]).start()
        self.forwarder = Forwarder(f"ipc://{work}/jobs.sock", self.daemon.endpoint)
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ADLOADER_")}
        self.env[names.ENDPOINT] = f"ipc://{work}/jobs.sock"
        self.go = work / "go"
        self.operator: list[dict] = []

    def start(self, label: str, argv: list[str], env: dict[str, str]) -> None:
        log = open(self.work / f"{label}.log", "wb")  # noqa: SIM115 (the child's, kept open)
        self.procs[label] = subprocess.Popen(argv, env={**self.env, **env}, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.work)

    def states(self, jobs: list[str]) -> dict[str, str]:
        return {job: self.daemon.job(job).get("state") for job in jobs
                if self.daemon.http.get(f"/v1/jobs/{job}").status_code == 200}

    def call(self, kind: str, job: str, label: str) -> None:
        """An operator's REST call, made now and written down with its offset."""
        http = self.daemon.http
        answer = (http.post(f"/v1/jobs/{job}/cancel") if kind == "cancel"
                  else http.post(f"/v1/jobs/{job}/{kind}"))
        if answer.status_code != 200:
            raise SystemExit(f"{kind} of {job}: {answer.status_code} {answer.text}")
        t0 = self.forwarder.t0 if self.forwarder.t0 is not None else time.monotonic()
        self.operator.append({"t": round(time.monotonic() - t0, 4), "call": kind,
                              "job": label})

    def frames_of(self, direction: str, kind: str, job: str | None = None) -> list[dict]:
        return [f for f in self.forwarder.frames if f["dir"] == direction and f["type"] == kind
                and (job is None or json.loads(f["frame"]).get("job") == job)]

    def until(self, done, what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: not within {DEADLINE_S:g} s; logs in {self.work}")
            self.forwarder.pump(50)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.forwarder.close()
        self.daemon.stop()


def _session(run: _Run) -> dict[str, str]:
    """``a`` alone, then ``b`` arriving while it trains; both finish. Job ids by label."""
    for label, job, token, iterations, step_s in JOBS:
        wait = label != JOBS[0][0]  # ``b`` imports meanwhile; attaches once ``go`` is there
        run.start(label, [sys.executable, str(run.script), str(iterations), str(step_s),
                          str(run.go) if wait else "-"], {names.JOB: job, names.JOB_TOKEN: token})

    def step() -> bool:
        if not run.go.exists() and len(run.frames_of(JOB_DIRECTION, "heartbeat")) >= 4:
            run.go.touch()  # ``a`` trains: ``b`` arrives, the daemon plans both
        return False

    ids = {label: job for label, job, *_ in JOBS}
    _until_ended(run, ids, step)
    return ids


def _operator(run: _Run) -> dict[str, str]:
    """One job under ``adloader run``: paused, resumed, cancelled."""
    label, iterations, step_s = OPERATOR_JOB
    run.start(label, [sys.executable, "-m", "adloader", "run", "--", sys.executable,
                      str(run.script), str(iterations), str(step_s), "-"], {})
    run.until(lambda: run.frames_of(JOB_DIRECTION, "register"), "the job's register")
    job = json.loads(run.frames_of(JOB_DIRECTION, "register")[0]["frame"])["job"]

    def beats() -> int:
        return len(run.frames_of(JOB_DIRECTION, "heartbeat", job))

    run.until(lambda: beats() >= OPERATOR_BEATS, "the job training")
    run.call("pause", job, label)
    run.until(lambda: run.frames_of(JOB_DIRECTION, "paused", job), "the job pausing")
    held = beats()
    run.until(lambda: beats() >= held + 2, "heartbeats while paused")
    run.call("resume", job, label)
    resumed = beats()
    run.until(lambda: beats() >= resumed + OPERATOR_BEATS, "the job training again")
    run.call("cancel", job, label)
    _until_ended(run, {label: job}, lambda: False)
    return {label: job}


def _until_ended(run: _Run, ids: dict[str, str], step) -> None:
    ended_at = None

    def ended() -> bool:
        nonlocal ended_at
        step()
        if ended_at is None and all(p.poll() is not None for p in run.procs.values()):
            ended_at = time.monotonic()
        if ended_at is None or time.monotonic() - ended_at < 0.5:
            return False
        final = run.states(list(ids.values()))
        return len(final) == len(ids) and all(s in ENDED for s in final.values())

    run.until(ended, "the jobs' ends")
    for _ in range(10):  # anything the daemon still sends after the ends (none expected)
        run.forwarder.pump(50)


ENDED = ("finished", "failed", "cancelled", "lost")
SCENARIOS = {"session": _session, "operator": _operator}
EXPECTED_EXIT = {"session": 0, "operator": 128 + 15}  # a cancelled job ends by SIGTERM's code


def record(scenario: str = "session") -> dict:
    run = _Run(Path(tempfile.mkdtemp(prefix="adl-rec-")))
    try:
        ids = SCENARIOS[scenario](run)
        bad = {label: p.returncode for label, p in run.procs.items()
               if p.returncode != EXPECTED_EXIT[scenario]}
        if bad:
            raise SystemExit(f"jobs ended {bad}; logs in {run.work}")
        tokens = {}
        for frame in run.forwarder.frames:
            data = json.loads(frame["frame"])
            if frame["type"] == "register":
                tokens[data["job"]] = data["token"]
        shape = ({lb: (it, st) for lb, _, _, it, st in JOBS} if scenario == "session"
                 else {OPERATOR_JOB[0]: OPERATOR_JOB[1:]})
        jobs = {}
        for label, job in ids.items():
            view = run.daemon.job(job)
            jobs[label] = {"job": job, "token": tokens[job], "iterations": shape[label][0],
                           "step_s": shape[label][1], "final": {"state": view["state"],
                                                               "iteration": view["iteration"]}}
        labels: dict[bytes, str] = {}
        by_job = {job: label for label, job in ids.items()}
        for frame in run.forwarder.frames:  # a connection is named after the job it speaks for
            if frame["conn"] not in labels:  # a supervisor's connection: "<label>-supervisor"
                data = json.loads(frame["frame"])
                label = by_job[data["job"]]
                labels[frame["conn"]] = label if data["type"] == "register" \
                    else f"{label}-supervisor"
            frame["conn"] = labels[frame["conn"]]
        unknown = run.daemon.metric("adloader_unknown_fields_total")
        dropped = run.daemon.metric("adloader_dropped_frames_total")
        refused = run.daemon.metric("adloader_refused_messages_total")
        if unknown or dropped or refused:
            raise SystemExit(f"the recording daemon counted unknown={unknown} dropped={dropped} "
                             f"refused={refused}: not a clean recording")
    finally:
        run.close()
    info = build_info()
    session = {
        "format": "adloader control traffic, one session (tests/protocol_traffic/record.py)",
        "scenario": scenario,
        "protocol": PROTOCOL,
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "adloader": info["version"], "commit": info["commit"], "python": info["python"],
        "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(),
        "daemon": DAEMON,
        "jobs": jobs,
        "frames": run.forwarder.frames,
    }
    if run.operator:
        session["operator"] = run.operator
    return session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="session")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out = args.out or HERE / f"v{PROTOCOL}-{args.scenario}.json"
    if args.out.exists():
        print(f"{args.out} exists: a recording is never rewritten (record a new protocol "
              f"version to a new file, or pass --out)", file=sys.stderr)
        return 2
    session = record(args.scenario)
    args.out.write_text(json.dumps(session, indent=1) + "\n")
    kinds: dict[str, int] = {}
    for frame in session["frames"]:
        key = f"{frame['conn']} {frame['dir']} {frame['type']}"
        kinds[key] = kinds.get(key, 0) + 1
    print(f"wrote {args.out}: {len(session['frames'])} frames")
    for key, n in sorted(kinds.items()):
        print(f"  {key}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
