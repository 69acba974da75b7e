"""The C heap of a long-running process (glibc's malloc): its arenas capped, and what a burst
of work freed given back to the system instead of staying resident.

glibc gives a thread that allocates while another holds an arena an arena of its own, up to
8 per core, and memory freed in one is kept there for its thread: a daemon whose request
threads build pages side by side grows by their high-water marks added up. ``cap_arenas``
sets 2, as MALLOC_ARENA_MAX=2 would, which bounds the daemon's RSS growth under `adloader
bench soak` (docs/benchmarks.md).

Python's objects over 512 bytes, SQLite's pages and the rows a page of history is built
from come from malloc. glibc keeps what is freed for reuse: the top of a heap is given back
only past a threshold that rises with the largest block freed (its mmap threshold is raised
to each mmapped block freed, up to 32 MiB), and free chunks below a live one are kept at all
sizes. A daemon that serves a 5,000-job page or prunes a backlog meets both: under `adloader
bench soak --jobs 20000` glibc held ~10 MB free (``mallinfo2``) after the last pages, which
``malloc_trim`` gave back in ~1 ms (docs/benchmarks.md, "What the soak's last 20 MB were").
Elsewhere than glibc (musl, macOS) these calls do nothing, and an operator's own
MALLOC_ARENA_MAX or MALLOC_MMAP_THRESHOLD_ (which glibc read at start) is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # mallopt's parameters (malloc.h)
ARENAS = 2  # malloc arenas at most (the daemon's, before its threads start)
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept: a block this big is mapped and unmapped


@functools.cache
def _libc():
    """glibc's ``malloc_trim`` and ``mallopt``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def _mallopt(param: int, value: int, env: str) -> bool:
    """glibc's ``mallopt(param, value)`` unless the operator set ``env``; whether it was set."""
    libc = _libc()
    return bool(env not in os.environ and libc is not None and libc.mallopt(param, value))


def cap_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas (call before the threads start); whether it was set."""
    return _mallopt(M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX")


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Blocks of ``nbytes`` or more are mapped, and unmapped when freed, for good (setting it
    stops glibc raising it as big blocks are freed); whether it was set."""
    return _mallopt(M_MMAP_THRESHOLD, nbytes, "MALLOC_MMAP_THRESHOLD_")


def trim() -> bool:
    """Give the free memory of every heap back to the system (``malloc_trim(0)``); whether
    any was."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
