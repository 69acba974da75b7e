"""A job that ended with an uncaught error or Ctrl-C ends, whatever its threads do.

After the except hook, the interpreter waits for the script's non-daemon threads, runs the
atexit handlers and collects what is left (a loader's iterator, its workers): a library that
blocks there would keep a finished job alive, its GPU and workers held, forever. ``arm``
starts a daemon thread that, if the process still runs ``GRACE_S`` later, writes every
thread's stack to stderr (so the log says where it hung) and ends the process as it was
ending: by SIGINT after Ctrl-C (the shell's and the daemon's "killed by SIGINT"), else with
exit code 1. ``faulthandler``'s own watchdog (a C thread, needing no GIL) ends it
``GRACE_S`` later still, should Python code no longer run at all.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading

GRACE_S = 15.0
MARK = "adloader: the job did not end"


def arm(kind: type, grace_s: float | None = None) -> None:
    """Watch the end of a process whose main thread raised ``kind`` (once per process)."""
    grace_s = GRACE_S if grace_s is None else grace_s
    if getattr(arm, "_armed", None) == os.getpid():
        return
    arm._armed = os.getpid()  # type: ignore[attr-defined]
    interrupted = issubclass(kind, KeyboardInterrupt)
    threading.Thread(target=_end_after, args=(grace_s, interrupted), daemon=True,
                     name="adloader-exit-watchdog").start()
    with contextlib.suppress(RuntimeError, ValueError, OSError):  # no usable stderr
        faulthandler.dump_traceback_later(2 * grace_s, exit=True)


def _end_after(grace_s: float, interrupted: bool) -> None:
    threading.Event().wait(grace_s)
    try:
        sys.stderr.write(f"{MARK} {grace_s:g} s after its "
                         f"{'Ctrl-C' if interrupted else 'error'}; its threads:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
    except (OSError, ValueError, RuntimeError):
        pass
    if interrupted:
        _default_sigint()
        os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait(1.0)
    os._exit(1)


def _default_sigint() -> None:
    """SIGINT's default action (death by it), set from this thread: Python's
    ``signal.signal`` only works in the main thread, which is the one stuck."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal(ctypes.c_int(signal.SIGINT), ctypes.c_void_p(0))  # SIG_DFL
