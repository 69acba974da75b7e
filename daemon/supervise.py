"""The launcher's supervisor: one small process per launched job that outlives the daemon.

``python -m adloader.daemon.supervise [--cgroup DIR]... STATUS -- COMMAND...`` first joins
the job's CPU groups (each ``DIR/cgroup.procs``: the job and every worker it forks inherit
them; a group it cannot join is said in the log and the job runs unconfined), then records
that it started
(``STATUS.started``, before the command can run: a daemon that finds no such file knows
the job never ran), then starts COMMAND as its child (in its own process group, which the
launcher made), waits for it and writes the exit status to STATUS atomically —
``{"exit_code": n}`` or ``{"signal": s}`` — as kubelet's container runtime keeps a
container's status. A daemon that is down when the job ends
reads it on restart, so a job that ran to the end is never reported lost. The supervisor
ignores the termination signals the launcher sends the group (they reach the job itself)
and exits with the job's status. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from adloader.host.atomic import write_json

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def write_status(path: str, status: dict) -> None:
    write_json(path, status, indent=None, fsync=True)


def main(argv: list[str]) -> int:
    groups = []
    while len(argv) >= 2 and argv[0] == "--cgroup":
        groups.append(argv[1])
        argv = argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m adloader.daemon.supervise [--cgroup DIR]... STATUS -- "
              "COMMAND...", file=sys.stderr)
        return 2
    status, command = argv[0], argv[2:]
    for group in groups:
        try:
            with open(os.path.join(group, "cgroup.procs"), "w") as fh:
                fh.write(str(os.getpid()))
        except OSError as exc:
            print(f"adloader: cannot join the job's CPU group {group}: {exc.strerror}; "
                  "its CPU share is not enforced", file=sys.stderr, flush=True)
    try:
        write_status(f"{status}.started", {"pid": os.getpid(), "t": time.time()})
    except OSError as exc:  # not recorded: the command must not run
        print(f"adloader: cannot record the job's start: {exc}", file=sys.stderr, flush=True)
        return 125
    for sig in FORWARDED:  # a handler, not SIG_IGN: exec resets it, so the job gets default
        signal.signal(sig, lambda *_: None)
    try:
        child = subprocess.Popen(command)
    except (OSError, ValueError) as exc:
        message = f"cannot start {command[0]!r}: {getattr(exc, 'strerror', None) or exc}"
        print(f"adloader: {message}", file=sys.stderr, flush=True)
        write_status(status, {"exit_code": 127, "error": message, "t": time.time()})
        return 127
    code = child.wait()
    result = {"signal": -code} if code < 0 else {"exit_code": code}
    write_status(status, {**result, "pid": child.pid, "t": time.time()})
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
