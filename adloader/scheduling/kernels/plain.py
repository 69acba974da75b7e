"""What the loops of ``ftf`` and ``jct`` (``ftf_kernel``, ``jct_kernel``) use where they run
as plain Python rather than compiled (an install without a C compiler; ``loops.use(False)``).

- ``floats``, ``RowLists``: what the loops read as lists — Python indexes a list's floats
  far faster than an array's — a table's rows each made on first use (a decision reads a
  few rows of a large table).
- The names of Cython's pure-Python mode those modules use, for an interpreter without Cython
  (``from adloader.scheduling import plain as cython``): ``compiled`` is False, the
  decorators leave a function as it is, ``declare`` gives the value as the Python type of
  the C one. Where Cython is installed, its own shadow module does the same. The C
  types in annotations are never evaluated (``from __future__ import annotations``).
"""

from __future__ import annotations

import numpy as np

compiled = False
double = float
longlong = int


def cfunc(function):
    """A C function where compiled; as it is here."""
    return function


def declare(kind, value):
    """A C variable where compiled; here ``value`` as ``kind``'s Python type."""
    return kind(value)


def floats(values) -> list[float]:
    """``values`` as a list of Python floats (C doubles' values)."""
    return np.asarray(values, dtype=np.float64).tolist()


class RowLists(dict):
    """λ(·; D) as a list, ``rows[D]``, made on first use."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def __missing__(self, node: int) -> list[float]:
        row = self[node] = self.table[node].tolist()
        return row
