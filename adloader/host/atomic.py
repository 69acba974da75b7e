"""Writing files atomically: into a temporary file beside the target, then a rename, so a
reader sees the old file or the new one, never half of one; the temporary file goes away if
the write fails. Permissions follow the umask (``mode`` overrides); ``fsync`` makes the new
content durable before the rename (state that must survive a crash)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int | None = None,
                fsync: bool = False) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` (same suffix, for writers that go by it), made
    ``path`` when the block ends without an error."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp{target.suffix}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        if fsync:
            fsync_path(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file by its path, or a folder (the names in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes, **kw) -> Path:
    with atomic_path(path, **kw) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, **kw) -> Path:
    return write_bytes(path, text.encode(), **kw)


def write_json(path: str | os.PathLike, data, indent: int | None = 2, **kw) -> Path:
    return write_text(path, json.dumps(data, indent=indent) + "\n", **kw)
