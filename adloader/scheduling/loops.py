"""Which loops of ``ftf`` and ``jct`` run: the compiled ones (``ftf_kernel``, ``jct_kernel``,
Cython) where the install built them, else their exact Python twins (``ftf_loops``,
``jct_loops``): an install without a C compiler plans the same, only slower.

The policies call the loops through this module (``loops.plan(...)``), never either side by
name; ``COMPILED`` says which side runs, and ``use`` switches sides (``adloader bench install``
times one against the other).
"""

from __future__ import annotations

from types import ModuleType

from adloader.scheduling import ftf_loops, jct_loops

try:
    from adloader.scheduling import ftf_kernel, jct_kernel
except ImportError:  # not built (no compiler at install): the same loops in Python
    ftf_kernel = jct_kernel = None

BUILT = ftf_kernel is not None and jct_kernel is not None
COMPILED = False
plan = forward = balance_run = jct_plan = None  # set by ``use`` below


def use(compiled: bool) -> None:
    """Run the compiled loops (``compiled``; only where built) or the Python ones."""
    global COMPILED, plan, forward, balance_run, jct_plan
    if compiled and not BUILT:
        raise ImportError("the compiled loops (adloader.scheduling.ftf_kernel, jct_kernel) "
                          "are not built in this install")
    ftf: ModuleType = ftf_kernel if compiled else ftf_loops
    jct: ModuleType = jct_kernel if compiled else jct_loops
    plan, forward, balance_run = ftf.plan, ftf.forward, ftf.balance_run
    jct_plan = jct.jct_plan
    COMPILED = compiled


use(BUILT)
