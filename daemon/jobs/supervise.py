"""The launcher's supervisor: one small process per launched job that outlives the daemon.

``python -S -P .../daemon/jobs/supervise.py [--cgroup DIR]... STATUS -- COMMAND...`` (a file run
without ``site``: ``SUPERVISOR`` in ``daemon.jobs.launcher``) first joins
the job's CPU groups (each ``DIR/cgroup.procs``: the job and every worker it forks inherit
them; a group it cannot join is said in the log and the job runs unconfined), then records
that it started
(``STATUS.started``, before the command can run: a daemon that finds no such file knows
the job never ran), then starts COMMAND as its child (in its own process group, which the
launcher made), adds the job's own pid to ``STATUS.started`` (``job_pid``: what an operator
signals), waits for it and writes the exit status to STATUS atomically —
``{"exit_code": n}`` or ``{"signal": s}`` — as kubelet's container runtime keeps a
container's status. A daemon that is down when the job ends
reads it on restart, so a job that ran to the end is never reported lost. The supervisor
ignores the termination signals the launcher sends the group (they reach the job itself)
and exits with the job's status. Standard library only, run without ``site`` (no
site-packages, no ``.pth`` files: 0.08 s to start here against 0.12 s as ``-m
adloader.daemon.jobs.supervise``, on the launch path of every job and on the node's CPU).

The job goes with its supervisor: it is started with the parent-death signal set to SIGKILL
(Linux ``PR_SET_PDEATHSIG``), so a supervisor killed outright (``kill -9``, the OOM killer)
takes its job along instead of leaving it to run with no one to record its exit; the daemon
ends what is left of the group and records the ending (``daemon.node``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

# what the launcher (a cancel, an operator's ``cancel --signal``) may send the group: the
# job gets each, the supervisor lives on to record how it ended
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGALRM)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int):
    """A ``preexec_fn``: the job gets SIGKILL when ``parent`` (its supervisor) dies; None
    where the kernel has no such call (the daemon then ends the group itself)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # it died before the call: nothing would ever fire
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def write_status(path: str, status: dict) -> None:
    """``status`` as JSON at ``path``, durably, all or nothing: a temporary file beside it,
    fsync, rename (``adloader.host.atomic``'s rule; that package is not on this process's
    path)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")  # hidden, as atomic's
    try:
        with open(tmp, "w") as fh:
            fh.write(json.dumps(status) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def main(argv: list[str]) -> int:
    groups = []
    while len(argv) >= 2 and argv[0] == "--cgroup":
        groups.append(argv[1])
        argv = argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervise.py [--cgroup DIR]... STATUS -- COMMAND...", file=sys.stderr)
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
        child = subprocess.Popen(command, preexec_fn=_die_with(os.getpid()))  # noqa: PLW1509
    except (OSError, ValueError) as exc:
        message = f"cannot start {command[0]!r}: {getattr(exc, 'strerror', None) or exc}"
        print(f"adloader: {message}", file=sys.stderr, flush=True)
        write_status(status, {"exit_code": 127, "error": message, "t": time.time()})
        return 127
    try:  # the job's own pid, beside the supervisor's: what an operator signals
        write_status(f"{status}.started", {"pid": os.getpid(), "job_pid": child.pid,
                                           "t": time.time()})
    except OSError as exc:
        print(f"adloader: cannot record the job's pid: {exc}", file=sys.stderr, flush=True)
    code = child.wait()
    result = {"signal": -code} if code < 0 else {"exit_code": code}
    try:
        write_status(status, {**result, "pid": child.pid, "t": time.time()})
    except OSError as exc:  # a full or read-only state folder: the exit code still tells it
        with contextlib.suppress(OSError):  # the log is in the same folder
            print(f"adloader: cannot record the job's exit status ({exc.strerror}); the "
                  "supervisor exits with it instead", file=sys.stderr, flush=True)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
