"""Record the control traffic of real jobs with a real daemon, for the replay test
(``tests/integration/test_protocol_replay.py``).

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

How to record, from the repository root::

    python3 tests/protocol_traffic/record.py            # -> tests/protocol_traffic/vN-session.json

``N`` is ``adloader.protocol.PROTOCOL`` of the library that runs it; ``--out PATH`` writes
elsewhere (e.g. to look at a recording without keeping it). It takes ~20 s.

Re-record ONLY for a NEW protocol version, i.e. after ``PROTOCOL`` went up: that release's
recording is added beside the older ones, and the replay test is pointed at it too. A
recording is what a master of that version sent; a daemon must keep answering it for as long
as it promises to read that version, so ``v1-session.json`` is never rewritten or edited —
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
from adloader.client.loader import ElasticDataLoader
iterations, step_s, go = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 60
while go != "-" and not os.path.exists(go):  # imported: arrive when the recorder says
    if time.monotonic() > deadline:
        sys.exit("no go from the recorder")
    time.sleep(0.01)
loader = ElasticDataLoader(list(range(4 * iterations)), batch_size=4, num_workers=0)
attach(loader, model="smResnet20", batch_size=4, iterations=iterations)
for batch in loader:
    time.sleep(step_s)
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


def record() -> dict:
    work = Path(tempfile.mkdtemp(prefix="adl-rec-"))
    script = work / "job.py"
    script.write_text(JOB_SCRIPT)
    daemon = Daemon(work / "state", capacity=DAEMON["capacity"], gpus=DAEMON["gpus"],
                    window=DAEMON["window"], heartbeat=DAEMON["heartbeat"]).start()
    forwarder = Forwarder(f"ipc://{work}/jobs.sock", daemon.endpoint)
    procs: dict[str, subprocess.Popen] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADLOADER_")}
    env[names.ENDPOINT] = f"ipc://{work}/jobs.sock"

    go = work / "go"

    def start(label, job, token, iterations, step_s, wait: bool = False):
        log = open(work / f"{label}.log", "wb")  # noqa: SIM115 (the child's, kept open)
        procs[label] = subprocess.Popen(
            [sys.executable, str(script), str(iterations), str(step_s),
             str(go) if wait else "-"],
            env={**env, names.JOB: job, names.JOB_TOKEN: token}, stdout=log,
            stderr=subprocess.STDOUT, cwd=work)

    def states() -> dict[str, str]:
        return {job: daemon.job(job).get("state") for _, job, *_ in JOBS
                if daemon.http.get(f"/v1/jobs/{job}").status_code == 200}

    try:
        start(*JOBS[0])
        start(*JOBS[1], wait=True)  # imports meanwhile; attaches once ``go`` is there
        deadline = time.monotonic() + DEADLINE_S
        ended_at = None
        while time.monotonic() < deadline:
            forwarder.pump(50)
            if not go.exists() and sum(f["type"] == "heartbeat" for f in forwarder.frames) >= 4:
                go.touch()  # ``a`` trains: ``b`` arrives, the daemon plans both
            done = len(procs) == len(JOBS) and all(p.poll() is not None for p in procs.values())
            if done and ended_at is None:
                ended_at = time.monotonic()
            if ended_at is not None and time.monotonic() - ended_at > 0.5:
                final = states()
                if len(final) == len(JOBS) and all(s in ("finished", "failed", "lost")
                                                   for s in final.values()):
                    break
        else:
            raise SystemExit(f"the jobs did not end within {DEADLINE_S:g} s; logs in {work}")
        for _ in range(10):  # anything the daemon still sends after the ends (none expected)
            forwarder.pump(50)
        bad = {label: p.returncode for label, p in procs.items() if p.returncode != 0}
        if bad:
            raise SystemExit(f"jobs failed {bad}; logs in {work}")
        jobs = {}
        for label, job, token, iterations, step_s in JOBS:
            view = daemon.job(job)
            jobs[label] = {"job": job, "token": token, "iterations": iterations,
                           "step_s": step_s, "final": {"state": view["state"],
                                                       "iteration": view["iteration"]}}
        labels = {}
        for frame in forwarder.frames:  # a connection is named after the job it registered
            if frame["conn"] not in labels and frame["type"] == "register":
                job = json.loads(frame["frame"])["job"]
                labels[frame["conn"]] = next(lb for lb, j, *_ in JOBS if j == job)
            frame["conn"] = labels[frame["conn"]]
        unknown = daemon.metric("adloader_unknown_fields_total")
        dropped = daemon.metric("adloader_dropped_frames_total")
        refused = daemon.metric("adloader_refused_messages_total")
        if unknown or dropped or refused:
            raise SystemExit(f"the recording daemon counted unknown={unknown} dropped={dropped} "
                             f"refused={refused}: not a clean recording")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        forwarder.close()
        daemon.stop()
    info = build_info()
    return {
        "format": "adloader control traffic, one session (tests/protocol_traffic/record.py)",
        "protocol": PROTOCOL,
        "recorded_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "adloader": info["version"], "commit": info["commit"], "python": info["python"],
        "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(),
        "daemon": DAEMON,
        "jobs": jobs,
        "frames": forwarder.frames,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / f"v{PROTOCOL}-session.json")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} exists: a recording is never rewritten (record a new protocol "
              f"version to a new file, or pass --out)", file=sys.stderr)
        return 2
    session = record()
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
