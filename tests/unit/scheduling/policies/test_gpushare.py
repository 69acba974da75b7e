"""``scheduling.policies.gpushare.fair_shares``: max-min fair GPU time-sharing, on plain dicts.

Hand-computed placements first, then the properties that define max-min fairness, checked
on small random placements: feasibility (each GPU's shares sum to ≤ 1, no job above its
cap), a job alone gets its cap, and the bottleneck condition — a job below its cap has a
full GPU on which no one has more — which is exactly "no job can get more without lowering
another's that is not larger".
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.scheduling.policies.gpushare import fair_shares, iteration_rates

TOL = 1e-7


@pytest.mark.parametrize(
    ("gpu_ids", "caps", "expected"),
    [
        # two GPU-bound jobs on one GPU: half each
        ({"a": [0], "b": [0]}, {"a": 1.0, "b": 1.0}, {"a": 0.5, "b": 0.5}),
        # a loading-bound job takes its cap, the other the rest
        ({"a": [0], "b": [0]}, {"a": 0.2, "b": 1.0}, {"a": 0.2, "b": 0.8}),
        # both capped below half: each its cap, the GPU not full
        ({"a": [0], "b": [0]}, {"a": 0.3, "b": 0.1}, {"a": 0.3, "b": 0.1}),
        # three on one GPU
        ({"a": [0], "b": [0], "c": [0]}, {"a": 1.0, "b": 1.0, "c": 1.0},
         {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}),
        # a spans both GPUs; b on 0, c on 1: half each
        ({"a": [0, 1], "b": [0], "c": [1]}, {"a": 1.0, "b": 1.0, "c": 1.0},
         {"a": 0.5, "b": 0.5, "c": 0.5}),
        # c capped at 0.1: GPU 0 still limits a and b to a half
        ({"a": [0, 1], "b": [0], "c": [1]}, {"a": 1.0, "b": 1.0, "c": 0.1},
         {"a": 0.5, "b": 0.5, "c": 0.1}),
        # GPU 1 holds a, c, d: a third each; b alone with a on GPU 0 takes the rest
        ({"a": [0, 1], "b": [0], "c": [1], "d": [1]},
         {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0},
         {"a": 1 / 3, "b": 2 / 3, "c": 1 / 3, "d": 1 / 3}),
        # caps outside 0..1 are clamped; a zero cap gets nothing
        ({"a": [0], "b": [1], "c": [1]}, {"a": 7.0, "b": -1.0, "c": 0.0},
         {"a": 1.0, "b": 0.0, "c": 0.0}),
        # a job on no GPU at all is limited by its cap only
        ({"a": [], "b": [0]}, {"a": 0.4, "b": 1.0}, {"a": 0.4, "b": 1.0}),
    ],
)
def test_hand_computed_shares(gpu_ids, caps, expected):
    shares = fair_shares(gpu_ids, caps)
    assert shares == {name: pytest.approx(value, abs=1e-12) for name, value in expected.items()}


def test_iteration_rates_are_shares_over_steps():
    # a: step 0.1 s, loads 640 samples/s of batch 64 → 10 it/s → cap u = 1.0
    # b: step 0.1 s, loads 128 samples/s → 2 it/s → cap u = 0.2; same GPU
    rates = iteration_rates({"a": [0], "b": [0]}, {"a": 0.1, "b": 0.1},
                            {"a": 64, "b": 64}, {"a": 640.0, "b": 128.0})
    assert rates == {"a": pytest.approx(8.0), "b": pytest.approx(2.0)}


# -- properties on small random placements -----------------------------------------------

@st.composite
def placements(draw):
    gpus = draw(st.integers(1, 3))
    n = draw(st.integers(1, 5))
    gpu_ids, caps = {}, {}
    for i in range(n):
        ids = draw(st.lists(st.integers(0, gpus - 1), min_size=1, max_size=gpus, unique=True))
        gpu_ids[f"j{i}"] = sorted(ids)
        caps[f"j{i}"] = draw(st.one_of(st.floats(0.0, 1.5), st.sampled_from([0.25, 0.5, 1.0])))
    return gpu_ids, caps


def _clamped(cap: float) -> float:
    return min(1.0, max(0.0, cap))


def _on_gpu(gpu_ids):
    out: dict[int, list[str]] = {}
    for name, ids in gpu_ids.items():
        for g in ids:
            out.setdefault(g, []).append(name)
    return out


@settings(max_examples=300, deadline=None)
@given(placements())
def test_shares_are_feasible(case):
    gpu_ids, caps = case
    shares = fair_shares(gpu_ids, caps)
    assert set(shares) == set(caps)
    for name, share in shares.items():
        assert -TOL <= share <= _clamped(caps[name]) + TOL
    for names in _on_gpu(gpu_ids).values():
        assert sum(shares[n] for n in names) <= 1.0 + TOL


@settings(max_examples=300, deadline=None)
@given(placements())
def test_a_job_alone_on_its_gpus_gets_its_cap(case):
    gpu_ids, caps = case
    shares = fair_shares(gpu_ids, caps)
    on_gpu = _on_gpu(gpu_ids)
    for name, ids in gpu_ids.items():
        if all(on_gpu[g] == [name] for g in ids):
            assert shares[name] == pytest.approx(_clamped(caps[name]), abs=TOL)


@settings(max_examples=300, deadline=None)
@given(placements())
def test_max_min_fair_no_job_gains_without_a_smaller_one_losing(case):
    """The bottleneck condition: a job below its cap uses a full GPU on which its share is
    the largest. Then raising it means lowering someone on that GPU whose share is not larger
    — and conversely, without such a GPU it could be raised for free."""
    gpu_ids, caps = case
    shares = fair_shares(gpu_ids, caps)
    on_gpu = _on_gpu(gpu_ids)
    for name, ids in gpu_ids.items():
        if shares[name] >= _clamped(caps[name]) - TOL:
            continue
        bottlenecks = [
            g for g in ids
            if sum(shares[n] for n in on_gpu[g]) >= 1.0 - TOL
            and all(shares[name] >= shares[n] - TOL for n in on_gpu[g])
        ]
        assert bottlenecks, (name, shares)


@settings(max_examples=200, deadline=None)
@given(placements(), st.data())
def test_symmetric_jobs_get_equal_shares(case, data):
    """Two jobs on the same GPUs with the same cap are interchangeable: equal shares."""
    gpu_ids, caps = case
    twin_of = data.draw(st.sampled_from(sorted(gpu_ids)))
    gpu_ids = dict(gpu_ids, twin=list(gpu_ids[twin_of]))
    caps = dict(caps, twin=caps[twin_of])
    shares = fair_shares(gpu_ids, caps)
    assert shares["twin"] == pytest.approx(shares[twin_of], abs=TOL)


@settings(max_examples=200, deadline=None)
@given(placements(), st.randoms(use_true_random=False))
def test_shares_do_not_depend_on_names_or_order(case, rng):
    gpu_ids, caps = case
    names = list(gpu_ids)
    renamed = names[:]
    rng.shuffle(renamed)
    rename = dict(zip(names, renamed, strict=True))
    order = names[:]
    rng.shuffle(order)
    shares = fair_shares(gpu_ids, caps)
    again = fair_shares({rename[n]: gpu_ids[n] for n in order},
                        {rename[n]: caps[n] for n in order})
    for n in names:
        assert again[rename[n]] == pytest.approx(shares[n], abs=TOL)
