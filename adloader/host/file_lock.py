"""A lock shared by every process and thread of a node that dies with its holder: ``flock``.

``flock`` belongs to an open file description, so each process opens the file itself (a
forked child re-opens it: the descriptor it inherits is shared with its parent) and a thread
lock orders the threads inside one process. The kernel drops the lock when its holder exits,
so a worker killed mid-operation never leaves the others waiting.
"""

from __future__ import annotations

import fcntl
import os
import threading

_GUARD = threading.Lock()  # orders the (re)opening of FileLocks within a process


def _reset_guard() -> None:
    global _GUARD
    _GUARD = threading.Lock()  # the parent's may be held by a thread the child does not have


os.register_at_fork(after_in_child=_reset_guard)


class FileLock:
    """Exclusive lock over ``path`` (created if missing) across processes and threads."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._pid = -1
        self._fd = -1
        self._threads = threading.Lock()

    def _open(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with _GUARD:
            if self._pid != pid:
                # a fresh thread lock: the inherited one may be held by a thread of the parent
                self._threads = threading.Lock()
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._pid = pid

    def __enter__(self) -> FileLock:
        self._open()
        self._threads.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def fileno(self) -> int:
        """This process's descriptor of the file (for small reads and writes under the lock)."""
        self._open()
        return self._fd

    def close(self) -> None:
        """Close this process's descriptor (the file stays)."""
        if self._pid == os.getpid() and self._fd >= 0:
            os.close(self._fd)
        self._fd, self._pid = -1, -1

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])
