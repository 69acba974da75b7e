"""The daemon's claim on its state directory: an exclusive ``flock`` on ``STATE_DIR/daemon.lock``
held for the daemon's whole life, with its PID and addresses written inside.

A second daemon on the same directory takes the lock before it touches anything else (the
store, the control socket, the token), fails, and says which daemon holds it. The kernel
drops the lock when its holder dies, so a daemon killed with SIGKILL never blocks the next.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from adloader.errors import DaemonBusy


class StateLock:
    def __init__(self, state_dir: str | os.PathLike):
        self.path = Path(state_dir) / "daemon.lock"
        self._fd: int | None = None

    def acquire(self, rest: str, control: str) -> None:
        """Hold the lock, or DaemonBusy naming the daemon that does."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise DaemonBusy(
                f"another adloader daemon (pid {holder.get('pid', '?')}, REST "
                f"{holder.get('rest', '?')}, control {holder.get('control', '?')}) is using "
                f"{self.path.parent}; stop it first, or give this one another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "rest": rest, "control": control}).encode())
        os.fsync(fd)
        self._fd = fd

    def free(self) -> bool:
        """Whether no daemon holds the lock now (it tries to, and lets go at once)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _read(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
