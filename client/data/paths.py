"""A refcount-free table of strings (file paths) that forked workers read without copying.

A Python list of 10^6 ``str`` is 10^6 objects; every worker that reads one bumps its refcount,
which writes to its page, which the kernel then copies for that worker: over an epoch each
worker ends up with its own copy of most of the list (pytorch#13246). ``PathTable`` keeps the
strings in one numpy byte buffer with an offset array: reading a path builds a new ``str``
and writes nothing shared, so the pages stay shared across all workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np


class PathTable:
    """``table[i]`` is the i-th string; built once from any iterable of ``str``."""

    def __init__(self, paths: Iterable[str]) -> None:
        encoded = [p.encode("utf-8") for p in paths]
        self._offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self._offsets[1:])
        self._buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:
        if not -len(self) <= i < len(self):
            raise IndexError(f"PathTable index {i} out of range (size {len(self)})")
        i %= len(self)
        start, stop = self._offsets[i], self._offsets[i + 1]
        return self._buffer[start:stop].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    @property
    def nbytes(self) -> int:
        return int(self._buffer.nbytes + self._offsets.nbytes)
