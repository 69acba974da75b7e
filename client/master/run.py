"""``adloader run -- COMMAND``: a training command started by hand, as a job of the daemon.

``run`` is the job's supervisor, as the launcher is for a submitted job. It hands the command
a job id and a token of its own (``adloader.env``; the REST token is never passed on), starts
it in a process group of its own — made the terminal's foreground group when ``run`` is, so
Ctrl-C and job control reach the whole job — forwards SIGTERM, SIGINT and SIGHUP to that
group, and when the command ends reports its exit status to the daemon (an ``Exit``
message, proved with the job's token) and exits with that same status. So the daemon knows
``finished`` from ``failed`` for jobs started by hand too, and a ``kill`` of ``run`` never
orphans the training process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import uuid

from adloader import env as names
from adloader.errors import InputError
from adloader.protocol import Exit, encode

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REPORT_LINGER_MS = 1000


def job_environment(endpoint: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the caller's, with this job's contract in place of any
    inherited one."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in (names.API_TOKEN, names.JOB, names.JOB_TOKEN, names.SUPERVISOR,
                        names.WORKERS, names.GPU_IDS)}
    env.setdefault(names.ENDPOINT, endpoint)
    env[names.JOB] = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    env[names.JOB_TOKEN] = secrets.token_urlsafe(24)
    env[names.SUPERVISOR] = "run"
    return env


def run(command: list[str], endpoint: str) -> int:
    """Run ``command`` as a job; returns its exit code (a signal death is re-raised on this
    process after the report, so the caller's shell sees the same death)."""
    if not command:
        raise InputError("adloader run: give the command after --")
    env = job_environment(endpoint)
    try:
        child = subprocess.Popen(command, env=env, process_group=0)
    except OSError as exc:
        raise InputError(f"adloader run: cannot start {command[0]!r}: {exc.strerror}") from None
    terminal = _take_terminal(child.pid)
    previous = {sig: signal.signal(sig, lambda sig, _: _forward(child.pid, sig))
                for sig in FORWARDED}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if terminal is not None:
            _give_terminal(terminal)
    _report(env[names.ENDPOINT], env[names.JOB], env[names.JOB_TOKEN], code)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _forward(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _take_terminal(pgid: int) -> int | None:
    """Make the job's group the terminal's foreground group if ours is; our group's id."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        with _ttou_blocked():
            os.tcsetpgrp(fd, pgid)
        return os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return None


def _give_terminal(pgid: int) -> None:
    with contextlib.suppress(OSError, ValueError), _ttou_blocked():
        os.tcsetpgrp(sys.stdin.fileno(), pgid)


@contextlib.contextmanager
def _ttou_blocked():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _report(endpoint: str, job: str, token: str, code: int) -> None:
    """Tell the daemon how the job ended (best effort: no daemon, no report)."""
    import zmq

    message = Exit(job=job, token=token, exit_code=None if code < 0 else code,
                   signal=-code if code < 0 else None)
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, REPORT_LINGER_MS)
        if endpoint.startswith("ipc://") and not os.path.exists(endpoint[len("ipc://"):]):
            return  # no daemon there
        sock.connect(endpoint)
        with contextlib.suppress(zmq.Again):
            sock.send(encode(message), zmq.NOBLOCK)
    except zmq.ZMQError:
        pass
    finally:
        sock.close()
        context.term()
