"""The loops' one source (``ftf_kernel``, ``jct_kernel``) run as plain Python gives what its
compiled build gives: the same plans, forward runs, balance runs and ``jct`` plans on random
cases, bit for bit; and an install without the compiled modules, or without Cython at all,
imports the same modules and runs them as plain Python."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from test_priority_plan import rooted as _rooted  # concave rows, not linear
from test_priority_plan import staged as _staged  # the staged TPM's rows, linear in d

from adloader.scheduling.kernels import ftf_kernel, jct_kernel, loops
from adloader.scheduling.policies.allocation import JobDemand
from adloader.scheduling.policies.priority_plan import linear_rows
from adloader.scheduling.policies.registry import get_policy

if not loops.BUILT:
    pytest.skip("the compiled loops are not built here", allow_module_level=True)
ftf_plain, jct_plain = loops.plain(ftf_kernel), loops.plain(jct_kernel)  # the same, uncompiled


def _bumpy(rng, capacity: int) -> np.ndarray:
    """Rows that fall somewhere (neither linear nor concave): every branch of the loops."""
    return np.ascontiguousarray(rng.uniform(5, 200, (capacity + 1, capacity + 1)))


def _case(seed: int):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 70))
    n = int(rng.integers(1, min(capacity + 3, 24)))  # C < N too: the queue rule
    kind = ("staged", "rooted", "bumpy")[seed % 3]
    if kind == "staged":
        table = _staged(capacity, float(rng.uniform(20, 150)), int(rng.integers(1, capacity + 1)),
                        float(rng.uniform(0, 40)))
    elif kind == "rooted":
        table = _rooted(capacity, float(rng.uniform(20, 150)), float(rng.uniform(0, 0.1)))
    else:
        table = _bumpy(rng, capacity)
    table = np.ascontiguousarray(table, dtype=np.float64)
    mu = rng.uniform(5, 400, n)
    if seed % 7 == 0:
        mu[rng.integers(0, n)] = 1e300  # an absurd rate: the step count past E
    if seed % 17 == 5:
        mu[rng.integers(0, n)] = (np.inf, np.nan)[seed % 2]  # a broken prediction
    remaining = rng.uniform(100, 5e4, n)
    rows = linear_rows(table)
    linear = rows is not None
    a, g = rows if linear else (np.zeros(1), np.zeros(1))
    return rng, table, capacity, mu, remaining, linear, a, g


def _same(x, y) -> None:
    if x is None or y is None:
        assert x is None and y is None
        return
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (x, y)  # exact: no tolerance


@pytest.mark.parametrize("seed", range(90))
def test_ftf_kernel_as_plain_python_is_its_build(seed):
    rng, table, capacity, mu, remaining, linear, a, g = _case(seed)
    for rho in (0.99, 0.5, 0.05):
        _same(ftf_kernel.plan(mu, rho, table, capacity, linear, a, g),
              ftf_plain.plan(mu, rho, table, capacity, linear, a, g))
        if linear:  # the concave way on linear rows too (exact on them as well)
            _same(ftf_kernel.plan(mu, rho, table, capacity, False, a, g),
                  ftf_plain.plan(mu, rho, table, capacity, False, a, g))
        order = rng.permutation(len(mu)).astype(np.int64)
        for window in (0.0, float(rng.uniform(1, 30))):
            for x, y in zip(ftf_kernel.forward(mu, remaining, table, capacity, order, window,
                                               rho, linear, a, g),
                            ftf_plain.forward(mu, remaining, table, capacity, order, window,
                                              rho, linear, a, g), strict=True):
                _same(x, y)
    for t, until in ((0.0, np.inf), (3.0, float(rng.uniform(5, 500)))):
        for x, y in zip(ftf_kernel.balance_run(mu, remaining, table, capacity, t, until),
                        ftf_plain.balance_run(mu, remaining, table, capacity, t, until),
                        strict=True):
            _same(x, y)


@pytest.mark.parametrize("seed", range(90))
def test_jct_kernel_as_plain_python_is_its_build(seed):
    rng, table, capacity, mu, remaining, *_ = _case(seed)
    n = len(mu)
    if n > capacity:
        return  # jct answers C < N by the queue rule before its loop
    for use_floor in (False, True):
        floor = rng.uniform(0, 1.2, n) * np.minimum(mu, table[capacity, 1]) if use_floor else \
            np.zeros(n)
        _same(jct_kernel.jct_plan(mu, remaining, floor, use_floor, table, capacity),
              jct_plain.jct_plan(mu, remaining, floor, use_floor, table, capacity))


@pytest.mark.parametrize("seed", range(24))
def test_ftf_and_jct_decide_the_same_on_either_side(seed):
    rng, table, capacity, mu, remaining, *_ = _case(seed)
    jobs = [JobDemand(f"j{i}", float(m), remaining=float(r))
            for i, (m, r) in enumerate(zip(mu, remaining, strict=True))]
    decided = {}
    try:
        for compiled in (True, False):
            loops.use(compiled)
            decided[compiled] = [get_policy(name)(jobs, capacity, table.copy())
                                 for name in ("ftf", "jct")]
    finally:
        loops.use(True)
    assert decided[True] == decided[False]


def test_no_jobs_no_workers():
    table = _staged(4, 50.0, 2, 10.0)
    empty = np.zeros(0)
    for side in (ftf_kernel, ftf_plain):
        assert side.plan(empty, 0.99, table, 4, False, empty, empty).size == 0
        ends, first = side.forward(empty, empty, table, 4, np.zeros(0, np.int64), 0.0, 0.99,
                                   False, empty, empty)
        assert ends.size == 0 and first.size == 0


def test_the_compiled_loops_run_where_built_and_use_switches_sides():
    assert loops.BUILT and loops.COMPILED and loops.plan is ftf_kernel.plan
    assert ftf_kernel.COMPILED and not ftf_plain.COMPILED and not jct_plain.COMPILED
    assert ftf_plain.__file__.endswith("ftf_kernel.py")  # the build's own source
    try:
        loops.use(False)
        assert not loops.COMPILED and loops.plan is ftf_plain.plan
        assert loops.jct_plan is jct_plain.jct_plan and loops.balance_run is ftf_plain.balance_run
    finally:
        loops.use(True)
    assert loops.jct_plan is jct_kernel.jct_plan and loops.forward is ftf_kernel.forward


PROBE = """
import importlib.abc, importlib.machinery, json, sys
import numpy as np
class NotBuilt(importlib.abc.MetaPathFinder):
    \"\"\"The kernels' sources only (no build), and no Cython where asked.\"\"\"
    def find_spec(self, name, path, target=None):
        if name in ("cython", "Cython") and {no_cython}:
            raise ModuleNotFoundError(name)
        if name in ("adloader.scheduling.kernels.ftf_kernel",
                    "adloader.scheduling.kernels.jct_kernel"):
            finder = importlib.machinery.FileFinder(
                path[0], (importlib.machinery.SourceFileLoader, [".py"]))
            return finder.find_spec(name)
sys.meta_path.insert(0, NotBuilt())
from adloader.scheduling.kernels import ftf_kernel, jct_kernel, loops
from adloader.scheduling.policies.allocation import JobDemand
from adloader.scheduling.policies.registry import get_policy
assert not loops.BUILT and not loops.COMPILED and not ftf_kernel.COMPILED
assert ftf_kernel.__file__.endswith(".py") and jct_kernel.__file__.endswith(".py")
assert loops.plan is ftf_kernel.plan and loops.jct_plan is jct_kernel.jct_plan
assert loops.plain(ftf_kernel) is ftf_kernel
assert not ({no_cython} and "cython" in sys.modules)
stand_in = "adloader.scheduling.kernels.plain" if {no_cython} else "cython"
assert ftf_kernel.cython.__name__ == jct_kernel.cython.__name__ == stand_in
case = json.loads(sys.argv[1])
jobs = [JobDemand(f"j{{i}}", m, remaining=r) for i, (m, r) in enumerate(case["jobs"])]
table = np.array(case["table"])
print(json.dumps([loops.plan.__module__,
                  [get_policy(p)(jobs, case["capacity"], table) for p in ("ftf", "jct")]]))
"""


@pytest.mark.processes  # a fresh interpreter
@pytest.mark.parametrize("no_cython", [False, True])
@pytest.mark.parametrize("seed", [0, 4])  # rows linear in d, concave rows
def test_without_the_compiled_modules_the_same_modules_run_as_plain_python(no_cython, seed):
    """Not built: the kernels' sources import and decide what the build decides, with Cython
    installed (its shadow module) or without it (``adloader.scheduling.kernels.plain``)."""
    _, table, capacity, mu, remaining, *_ = _case(seed)
    case = {"capacity": capacity, "table": table.tolist(),
            "jobs": [[float(m), float(r)] for m, r in zip(mu, remaining, strict=True)]}
    done = subprocess.run([sys.executable, "-c", PROBE.format(no_cython=no_cython),
                           json.dumps(case)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    module, decided = json.loads(done.stdout.strip().splitlines()[-1])
    assert module == "adloader.scheduling.kernels.ftf_kernel"
    jobs = [JobDemand(f"j{i}", float(m), remaining=float(r))
            for i, (m, r) in enumerate(zip(mu, remaining, strict=True))]
    assert loops.COMPILED
    assert decided == [get_policy(p)(jobs, capacity, table.copy()) for p in ("ftf", "jct")]
