"""Which way the loops of ``ftf`` and ``jct`` run. Each has one source, ``ftf_kernel`` and
``jct_kernel`` (Cython's pure-Python mode): compiled where the install built them, else the
same modules as plain Python (an install without a C compiler), which plan the same, only
slower.

The policies call the loops through this module (``loops.plan(...)``), never a module by
name; ``COMPILED`` says which way runs, and ``use`` switches (``adloader bench install`` times
one against the other, the tests compare them). Beside a compiled build, the plain way is the
build's own source file run by the interpreter (``plain``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from adloader.scheduling.kernels import ftf_kernel, jct_kernel

BUILT = ftf_kernel.COMPILED and jct_kernel.COMPILED
COMPILED = False
plan = forward = balance_run = jct_plan = None  # set by ``use`` below
_PLAIN: dict[str, ModuleType] = {}


def plain(module: ModuleType) -> ModuleType:
    """``module`` run as plain Python: itself where it was not compiled, else its ``.py``
    beside the build, loaded once as ``<name>_plain``."""
    if not module.COMPILED:
        return module
    if module.__name__ not in _PLAIN:
        source = Path(module.__file__).with_name(module.__name__.rpartition(".")[2] + ".py")
        spec = importlib.util.spec_from_file_location(module.__name__ + "_plain", source)
        if spec is None or spec.loader is None or not source.is_file():
            raise ImportError(f"no source {source} beside the compiled {module.__name__}")
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        _PLAIN[module.__name__] = loaded
    return _PLAIN[module.__name__]


def use(compiled: bool) -> None:
    """Run the compiled loops (``compiled``; only where built) or the plain-Python ones."""
    global COMPILED, plan, forward, balance_run, jct_plan
    if compiled and not BUILT:
        raise ImportError("the compiled loops (adloader.scheduling.kernels.ftf_kernel, jct_kernel) "
                          "are not built in this install")
    ftf = ftf_kernel if compiled else plain(ftf_kernel)
    jct = jct_kernel if compiled else plain(jct_kernel)
    plan, forward, balance_run = ftf.plan, ftf.forward, ftf.balance_run
    jct_plan = jct.jct_plan
    COMPILED = compiled


use(BUILT)
