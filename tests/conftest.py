import pytest

from adloader import cli
from adloader.device import synth
from adloader.device.device_profile import load_profile


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
    set (``adloader.sim.held_out``, seeds in adloader/sim/held_out.json, run once per
    release by ``adloader bench held-out``) in every test, and the development mixes
    (``held_out_mixes.held_out``: from ``MIX_SEED``) in every test but the plumbing tests of
    ``bench mixes`` (marked ``held_out_plumbing``), which look at the output's shape, never
    at a figure."""
    from adloader.sim import generator, held_out_mixes
    from adloader.sim import held_out as held_out_set

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
    folder — are killed when the test ends, so no test slows the next."""
    yield
    import contextlib
    import os
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
