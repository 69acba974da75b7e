"""The held-out mixes stay unseen by the tests: generating one in a test fails
(tests/conftest.py), so no test can tune or assert on what judges the policies."""

from __future__ import annotations

import pytest

from adloader.bench.sim import held_out_mixes
from adloader.sim import generator


def test_a_test_that_generates_a_held_out_mix_fails():
    assert held_out_mixes.held_out(held_out_mixes.MIX_SEED) and not held_out_mixes.held_out(11)
    generator.generate(3, 11)  # a test's own seed: fine
    with pytest.raises(AssertionError, match="held-out mix seed 1000"):
        generator.generate(3, held_out_mixes.MIX_SEED)


def test_the_held_out_bench_cannot_run_in_an_unmarked_test(paper_profile, paper_model):
    with pytest.raises(AssertionError, match="held-out"):
        held_out_mixes.random_mixes(paper_profile, paper_model, count=1, jobs=2)


def test_every_held_out_seed_is_held_out():
    for seed in range(4):
        assert all(held_out_mixes.held_out(s) for s in held_out_mixes.mix_seeds(10, seed))
