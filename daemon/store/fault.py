"""Why the state database cannot be written, from the file system's own answer.

SQLite says "disk I/O error" for a file system remounted read-only after a disk error as
for a failing disk, and "database or disk is full" only sometimes. An operator needs the
cause to act on it, so a failed write is diagnosed from the state folder: ``statvfs`` (the
read-only flag, the free blocks and inodes), write access to the folder and the file (the
immutable attribute and permissions answer there), and whether the folder can be read at
all (a file system shut down after an I/O error answers EIO), and — what settles it — a
one-byte file written and synced there. ``StoreFault`` keeps the
first failure of a run of them and says when writes succeed again; the daemon shows it in
``/healthz`` and records both ends as events once the store takes writes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

LOW_SPACE = 256 * 1024  # bytes free below which a write failure is put down to a full disk

CAUSES = {
    "read_only": "the file system is read-only (remounted read-only after a disk error, or "
                 "mounted so): repair or remount it read-write",
    "full": "the disk is full: free space in the state directory",
    "not_writable": "the state directory or its database cannot be written (permissions, or "
                    "the immutable attribute: lsattr): make them writable",
    "io_error": "the disk returned an I/O error: check the disk and the kernel log (dmesg)",
}


def diagnose(db_path: Path, sqlite_text: str = "") -> str:
    """One of ``CAUSES``' keys for a write to ``db_path`` that failed, or "" when the file
    system shows nothing wrong (the file itself is then suspect)."""
    folder = db_path.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return "io_error"
    if st.f_flag & os.ST_RDONLY:
        return "read_only"
    if st.f_bavail * st.f_frsize < LOW_SPACE or (st.f_files and st.f_favail == 0):
        return "full"
    files = []
    for path in (folder, db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        try:
            os.stat(path)
        except FileNotFoundError:
            continue
        except OSError:  # the disk cannot say: EIO (access() would call it not writable)
            return "io_error"
        if path != folder:
            files.append(path)
    if not os.access(folder, os.W_OK) or not all(os.access(p, os.W_OK) for p in files):
        return "not_writable"
    if _immutable(folder) or any(_immutable(p) for p in files):
        return "not_writable"  # root may write anywhere, except where the flag says
    probed = _write_probe(folder)  # the kernel's own answer to a write there
    if probed:
        return probed
    return "io_error" if "I/O" in sqlite_text else ("full" if "full" in sqlite_text else "")


_ERRNO_CAUSE = {errno.EROFS: "read_only", errno.ENOSPC: "full", errno.EDQUOT: "full",
                errno.EACCES: "not_writable", errno.EPERM: "not_writable"}


def _write_probe(folder: Path) -> str:
    """Create, write and sync a one-byte file in ``folder``, then remove it: "" when that
    works, else the cause its errno names (a file system that went read-only after an error
    still shows ``rw`` in its mount flags; one shut down answers EIO)."""
    probe = folder / f".adloader-write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return _ERRNO_CAUSE.get(exc.errno, "io_error")
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return ""


def _immutable(path: Path) -> bool:
    """The immutable or append-only attribute (``chattr +i``/``+a``), where it can be read."""
    import fcntl
    import struct

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, 0x80086601, b"\0" * 8))[0]  # FS_IOC_GETFLAGS
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(flags & (0x10 | 0x20))  # FS_IMMUTABLE_FL, FS_APPEND_FL


@dataclass
class StoreFault:
    """The first failed write of a run of failures, until a write succeeds again."""

    cause: str
    message: str
    since: float

    def to_json(self) -> dict:
        return {"cause": self.cause, "message": self.message, "since": round(self.since, 3),
                "for_s": round(time.time() - self.since, 1)}
