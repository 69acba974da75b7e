import pytest

from adloader import cli
from adloader.workloads import synth
from adloader.workloads.profile import load_profile


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
