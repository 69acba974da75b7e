"""A file system that fails on demand, for the store-fault tests: a FUSE pass-through of
``BACKING`` mounted at ``MOUNT`` (fusepy over libfuse2) whose every operation answers the
errno named in ``SWITCH`` (a file outside the mount: ``EIO``, ``ENOSPC``; empty or absent,
none) — a disk that returns I/O errors and then comes back, which an ext4 shut down cannot.
This machine's kernel has no device-mapper, so no dm-error or dm-flakey; FUSE is the
injector.

    python tests/fuse_faults.py BACKING MOUNT SWITCH      # foreground; unmount to end it
"""

from __future__ import annotations

import errno
import os
import sys

from fuse import FUSE, FuseOSError, Operations

ALWAYS = frozenset({"init", "destroy", "statfs"})  # the mount itself keeps working


class Faulty(Operations):
    def __init__(self, backing: str, switch: str):
        self.backing, self.switch = os.path.realpath(backing), switch

    def __call__(self, op, *args):
        if op not in ALWAYS:
            try:
                with open(self.switch) as fh:
                    name = fh.read().strip()
            except OSError:
                name = ""
            if name:
                raise FuseOSError(getattr(errno, name))
        return super().__call__(op, *args)

    def _full(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    # -- pass-through, as fusepy's loopback example ------------------------------------
    def access(self, path, mode):
        if not os.access(self._full(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        return os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._full(path), uid, gid)

    def create(self, path, mode, fi=None):
        return os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)  # read back too

    def flush(self, path, fh):
        return os.fsync(fh)

    def fsync(self, path, datasync, fh):
        return os.fdatasync(fh) if datasync else os.fsync(fh)

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        return {key: getattr(st, key) for key in (
            "st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
            "st_uid")}

    def link(self, target, source):
        return os.link(self._full(source), self._full(target))

    def mkdir(self, path, mode):
        return os.mkdir(self._full(path), mode)

    def mknod(self, path, mode, dev):
        return os.mknod(self._full(path), mode, dev)

    def open(self, path, flags):
        return os.open(self._full(path), flags)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._full(path))]

    def readlink(self, path):
        return os.readlink(self._full(path))

    def release(self, path, fh):
        return os.close(fh)

    def rename(self, old, new):
        return os.rename(self._full(old), self._full(new))

    def rmdir(self, path):
        return os.rmdir(self._full(path))

    def statfs(self, path):
        st = os.statvfs(self._full(path))
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    def symlink(self, target, source):
        return os.symlink(source, self._full(target))

    def truncate(self, path, length, fh=None):
        if fh is not None:
            return os.ftruncate(fh, length)
        with open(self._full(path), "r+b") as f:
            f.truncate(length)

    def unlink(self, path):
        return os.unlink(self._full(path))

    def utimens(self, path, times=None):
        return os.utime(self._full(path), times)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)


def main(argv: list[str]) -> int:
    backing, mount, switch = argv
    FUSE(Faulty(backing, switch), mount, foreground=True, nothreads=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
