import pytest

from adloader.workloads import synth
from adloader.workloads.profile import load_profile


@pytest.fixture(scope="session")
def paper_profile():
    return load_profile("paper")


@pytest.fixture(scope="session")
def paper_model(paper_profile):
    """The TPM fitted from noisy samples of the paper profile (shared: fitting takes ~1 s)."""
    return synth.fitted_model(paper_profile, seed=0)
