"""Shared fixtures, and the test tiers.

The tiers: each test says what it needs beyond pure Python with a marker (registered in
pyproject.toml): a whole file in ``NEEDS`` below, a single test with a decorator
(``@pytest.mark.processes``). A test with none of them is pure, and the guard below fails it
if it starts a process or opens a socket, so the fast tier cannot rot. The fast tier (``make
test-fast``, minutes at most) is every pure test but the few marked ``slow``; ``python3 -m
pytest`` runs every tier.
"""

import contextlib
import functools
import multiprocessing.process
import multiprocessing.util
import os
import socket
import subprocess
import traceback
from pathlib import Path

import pytest

from adloader import cli
from adloader.device import synth
from adloader.device.device_profile import load_profile

TESTS = Path(__file__).resolve().parent

# What a test may need beyond pure Python (markers pyproject.toml registers): the guard
# below watches every test with none of them.
TIERS = ("processes", "root", "slurm", "qemu", "chromium", "fuzz", "bench")
# A pure test that takes seconds of CPU (a whole-trace program, a bench over whole mixes):
# guarded all the same, but left out of the fast tier too. The Makefile's test-fast leaves
# out TIERS and SLOW (tests/unit/house/test_tiers.py holds it, pyproject.toml and these equal).
SLOW = "slow"

# Every file under tests/integration and tests/bench, and the files of tests/unit that need
# something as a whole: path under tests/ -> what its tests need. A file under
# integration/ or bench/ that is missing here fails the collection.
NEEDS: dict[str, tuple[str, ...]] = {
    # a fresh interpreter each: what an import loads, the import-linter contracts
    "unit/house/test_client_install.py": ("processes",),
    "unit/house/test_house_rules.py": ("processes",),
    "unit/house/test_import_cost.py": ("processes",),
    "integration/cgroups/test_cgroup_capacity.py": ("processes",),
    "integration/cgroups/test_cpu_share.py": ("processes", "root"),
    "integration/cgroups/test_cgroup_v2.py": ("processes", "root", "slurm", "qemu"),
    "integration/cgroups/test_cpuset_cap.py": ("processes",),
    "integration/cgroups/test_slurm_cpu_share.py": ("processes", "root", "slurm"),
    "integration/cli/test_cli_sim.py": ("processes",),
    "integration/cli/test_client_cli.py": ("processes",),
    "integration/cli/test_contention.py": ("processes",),
    "integration/cli/test_profiling.py": ("processes",),
    "integration/client/test_batch_segments.py": ("processes",),
    "integration/client/test_cache_store.py": ("processes",),
    "integration/client/test_cached_dataset.py": ("processes",),
    "integration/client/test_chunked.py": ("processes",),
    "integration/client/test_exit_watchdog.py": ("processes",),
    "integration/client/test_frameworks.py": ("processes",),
    "integration/client/test_loader.py": ("processes",),
    "integration/client/test_loader_dropin.py": ("processes",),
    "integration/client/test_torch_support.py": ("processes",),
    "integration/client/test_locality.py": ("processes",),
    "integration/client/test_master.py": ("processes",),
    "integration/client/test_node_cache.py": ("processes",),
    "integration/client/test_storage.py": ("processes",),
    "integration/client/test_torch_suite.py": ("processes",),
    "integration/daemon/test_api_contract.py": ("processes", "fuzz"),
    "integration/daemon/test_broker.py": ("processes",),
    "integration/daemon/test_daemon.py": ("processes",),
    "integration/daemon/test_daemon_ftf.py": ("processes",),
    "integration/daemon/test_daemon_retention.py": ("processes",),
    "integration/daemon/test_http_server.py": ("processes",),
    "integration/daemon/test_job_processes.py": ("processes",),
    "integration/daemon/test_launcher.py": ("processes",),
    "integration/daemon/test_multinode.py": ("processes",),
    "integration/daemon/test_protocol_replay.py": ("processes",),
    "integration/daemon/test_refit_worker.py": ("processes",),
    "integration/daemon/test_store_faults.py": ("processes", "root"),
    "integration/ops/test_daemon_without_torch.py": ("processes",),
    "integration/ops/test_dashboard.py": ("processes",),  # + chromium on the tests that render
    "integration/ops/test_metrics_listener.py": ("processes",),
    "integration/ops/test_operable.py": ("processes",),
    "integration/ops/test_operator.py": ("processes",),
    "integration/ops/test_readme.py": ("processes",),
    "integration/ops/test_sdist_install.py": ("processes",),
    "integration/ops/test_upgrade.py": ("processes",),
    "integration/slurm/test_slurm.py": ("processes", "root", "slurm"),
    "integration/trust/test_trust_daemon.py": ("processes",),  # + root on the full state dir's
    "integration/trust/test_trust_identity.py": ("processes",),
    "integration/trust/test_trust_isolation.py": ("processes",),
    "integration/trust/test_trust_state.py": ("processes",),
    "integration/trust/test_two_users.py": ("processes", "root"),
    "bench/test_bench_live.py": ("bench",),
    "bench/test_bench_live_surface.py": ("bench",),
    "bench/test_bench_loaders.py": ("bench",),
    "bench/test_benchmarks.py": ("bench",),
    "bench/test_chunks_bench.py": ("bench",),
    "bench/test_epoch_order_bench.py": ("bench",),
    "bench/test_heap.py": ("bench",),
    "bench/test_memory_per_job.py": ("bench",),
    "bench/test_node_cache_bench.py": ("bench",),
    "bench/test_overhead.py": ("bench",),
    "bench/test_shared_cache_bench.py": ("bench",),
    "bench/test_soak.py": ("bench",),
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config, items):
    """Each file's needs onto its tests; a file under integration/ or bench/ that NEEDS
    does not list, or a NEEDS entry naming no file or an unknown need, stops the run."""
    gone = sorted(name for name in NEEDS if not (TESTS / name).is_file())
    unknown = sorted({need for needs in NEEDS.values() for need in needs} - {*TIERS, SLOW})
    unlisted = set()
    for item in items:
        try:
            name = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        for need in NEEDS.get(name, ()):
            item.add_marker(need)
        if name.startswith(("integration/", "bench/")) and name not in NEEDS:
            unlisted.add(name)
    if gone or unlisted or unknown:
        raise pytest.UsageError(
            "tests/conftest.py NEEDS is out of date: "
            + "; ".join([*(f"{n} is not a file" for n in gone),
                         *(f"{n} is neither one of TIERS nor SLOW" for n in unknown),
                         *(f"tests/{n} is not listed (say what its tests need)"
                           for n in sorted(unlisted))]))


def _pure_only(item) -> bool:
    """Whether ``item`` needs nothing beyond pure Python (slow or not): the guard's tests."""
    return not any(item.get_closest_marker(name) for name in TIERS)


# What a library runs once per process to look at the machine (ctypes.util.find_library:
# `ldconfig -p`; joblib's count of physical cores: `lscpu`): whichever pure test comes first
# would be blamed for it, so these are let through.
PROBES = ("ldconfig", "lscpu")


class _Started(BaseException):  # not an Exception: code under test cannot swallow it
    pass


@contextlib.contextmanager
def _pure(item):
    """The guard: while a test with no need marker (its fixtures included) runs, starting a
    process or opening a socket fails it, naming what it did."""
    seen: list[str] = []

    def refuse(what, real):
        @functools.wraps(real)
        def guarded(*args, **kwargs):
            here = [f for f in traceback.extract_stack()[:-1]
                    if f.filename.startswith(str(TESTS)) and f.filename != __file__]
            where = f" (at {here[-1].filename}:{here[-1].lineno})" if here else ""
            message = (f"{item.nodeid} is marked as needing none of {', '.join(TIERS)} "
                       f"(so it may run in the fast tier) but {what}{where}: mark it with "
                       "what it needs (NEEDS in tests/conftest.py for a whole file, or "
                       "@pytest.mark.processes on the test), or make it pure")
            seen.append(message)
            raise _Started(message)
        return guarded

    def fresh_socket(real):
        @functools.wraps(real)
        def init(self, *args, **kwargs):
            fileno = kwargs.get("fileno", args[3] if len(args) > 3 else None)
            if fileno is None:  # a wrapped fd (socketpair: an event loop's wake-up) is not
                return refuse("opened a socket", real)(self, *args, **kwargs)
            return real(self, *args, **kwargs)
        return init

    def zmq_socket(real):
        @functools.wraps(real)
        def init(self, *args, **kwargs):
            if not kwargs.get("shadow"):
                return refuse("opened a ZeroMQ socket", real)(self, *args, **kwargs)
            return real(self, *args, **kwargs)
        return init

    def popen(real):
        @functools.wraps(real)
        def execute_child(self, args, *rest, **kwargs):
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            if os.path.basename((os.fsdecode(argv[0]).split() or [""])[0]) in PROBES:
                return real(self, args, *rest, **kwargs)
            return refuse(f"started a subprocess ({os.fsdecode(argv[0])!s:.80})", real)(
                self, args, *rest, **kwargs)
        return execute_child

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "_execute_child", popen(subprocess.Popen._execute_child))
        mp.setattr(multiprocessing.process.BaseProcess, "start",
                   refuse("started a multiprocessing process",
                          multiprocessing.process.BaseProcess.start))
        mp.setattr(multiprocessing.util, "spawnv_passfds",
                   refuse("started a helper process (multiprocessing's resource tracker "
                          "or fork server)", multiprocessing.util.spawnv_passfds))
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                mp.setattr(os, name, refuse(f"called os.{name}", getattr(os, name)))
        mp.setattr(socket.socket, "__init__", fresh_socket(socket.socket.__init__))
        with contextlib.suppress(ImportError):
            import zmq

            mp.setattr(zmq.Socket, "__init__", zmq_socket(zmq.Socket.__init__))
        try:
            yield
        except _Started:
            raise pytest.fail.Exception(seen[0], pytrace=False) from None
    if seen:  # refused in a thread, or caught by the test: still a failure
        pytest.fail(seen[0], pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if not _pure_only(item):
        return (yield)
    with _pure(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not _pure_only(item):
        return (yield)
    with _pure(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if not _pure_only(item):
        return (yield)
    with _pure(item):
        return (yield)


@pytest.fixture(scope="session")
def paper_profile():
    return load_profile("paper")


@pytest.fixture(scope="session")
def paper_model(paper_profile):
    """The TPM fitted from noisy samples of the paper profile (shared: fitting takes ~1 s)."""
    return synth.fitted_model(paper_profile, seed=0)


@pytest.fixture
def run(capsys):
    """Run ``adloader ARGS``; returns (exit code, stdout, stderr)."""

    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture(autouse=True)
def _held_out_mixes_stay_unseen(request, monkeypatch):
    """Generator seeds kept out of the tests fail a test that generates one: the held-out
    set (``adloader.bench.sim.held_out``, seeds in bench/sim/held_out.json, run once per
    release by ``adloader bench held-out``) in every test, and the development mixes
    (``held_out_mixes.held_out``: from ``MIX_SEED``) in every test but the plumbing tests of
    ``bench mixes`` (marked ``held_out_plumbing``), which look at the output's shape, never
    at a figure."""
    from adloader.bench.sim import held_out as held_out_set
    from adloader.bench.sim import held_out_mixes
    from adloader.sim import generator

    plumbing = request.node.get_closest_marker("held_out_plumbing") is not None
    real = generator.generate

    def guarded(jobs, seed, *args, **kwargs):
        if held_out_set.is_held_out(seed):
            raise AssertionError(f"a test generated seed {seed} of the held-out set "
                                 f"({held_out_set.PATH.name}): only `adloader bench "
                                 "held-out` generates it, never a test")
        if not plumbing and held_out_mixes.held_out(seed):
            raise AssertionError(f"a test generated held-out mix seed {seed}: development "
                                 f"mix seeds are >= {held_out_mixes.MIX_SEED}, keep tests "
                                 "below")
        return real(jobs, seed, *args, **kwargs)

    monkeypatch.setattr(generator, "generate", guarded)


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(request, tmp_path_factory):
    """A daemon stops gracefully and leaves its jobs training (as it should): a test's jobs,
    supervisors and daemons — every process whose command line names the test's temporary
    folder — are killed when the test ends, so no test slows the next. (A pure test starts
    none: the guard sees to it, and the look over every process is spared.)"""
    yield
    if _pure_only(request.node):
        return
    import re
    import signal

    import psutil

    base = str(tmp_path_factory.getbasetemp())
    folder = os.path.join(base, re.sub(r"[\W]", "_", request.node.name)[:30])
    mine = os.getpgid(0)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid != os.getpid() and any(folder in part
                                               for part in proc.info["cmdline"] or ()):
                group = os.getpgid(proc.pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if group == mine:  # started in our group (a daemon): that process only
                        os.kill(proc.pid, signal.SIGKILL)
                    else:  # a job under its supervisor: the whole group
                        os.killpg(group, signal.SIGKILL)
