"""The closed loop in the node simulator, on the ``gpu-node`` truth (each job capped at the
intake ceiling a GPU node measured) and the truths every bench prints."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adloader.sim.simulator import SimConfig, Simulator, simulate
from adloader.sim.trace import load_trace
from adloader.sim.truth import GpuNodeTruth, load_truth


def _longest_below(node_rates, guard: float = 0.03) -> float:
    """The longest stretch of simulated time the node trained more than ``guard`` below
    what its running jobs would under the even split."""
    longest = current = 0.0
    for (t0, rate, even), (t1, _, _) in zip(node_rates, node_rates[1:], strict=False):
        if rate < (1 - guard) * even - 1e-9:
            current += t1 - t0
            longest = max(longest, current)
        else:
            current = 0.0
    return longest


def test_the_gpu_node_truth_caps_each_job_at_its_intake(paper_profile):
    truth = load_truth("gpu-node", paper_profile)
    assert isinstance(truth, GpuNodeTruth)
    one_worker = paper_profile.node_loading_rate(1)
    for model in ("Resnet18", "mdResnet12", "smResnet20", "VGG16"):
        assert 5 * one_worker < truth.intake(model) < 9 * one_worker  # 6-7 workers' worth


def test_on_the_gpu_node_truth_the_open_loop_loses_and_the_closed_loop_does_not(
        paper_profile, paper_model):
    """The GPU node's loss, simulated: ftf's plan gives jobs workers past their intake and
    the mix ends later than under the even split (balance); closed, it ends no later."""
    trace = load_trace("paper-static")

    def run(policy, closed):
        return simulate(trace, paper_profile, paper_model, SimConfig(
            policy=policy, truth="gpu-node", closed_loop=closed)).to_json()

    even = run("balance", True)
    assert run("ftf", False)["makespan_s"] > 1.2 * even["makespan_s"]
    closed = run("ftf", True)
    assert closed["makespan_s"] <= even["makespan_s"] * (1 + 1e-6)
    assert closed["mean_jct_s"] <= even["mean_jct_s"] * (1 + 1e-6)


def test_on_the_model_truth_ftf_phased_ends_the_dynamic_mix_a_tenth_sooner_than_balance():
    """Closed loop, as the daemon runs it, the bench's node (window 30 s, 0.1 s resizes):
    ``ftf-phased``'s mean JCT ≤ 0.9× ``balance``'s with no job later than 1/0.95 of its own.
    Where its order search finds no plan on time (from 420 s), the phase program's first
    phase (``ftf.phase_plan``); ``ftf``, with ``fair`` there instead, reads 0.934×."""
    from adloader.bench.sim.report import setup

    profile, model, config = setup("paper", truth="model")
    trace = load_trace("paper-dynamic", node_gpus=profile.gpus)

    def run(policy):
        out = simulate(trace, profile, model, replace(config, policy=policy,
                                                       closed_loop=True)).to_json()
        return {j["name"]: j["jct_s"] for j in out["jobs"]}

    even, phased = run("balance"), run("ftf-phased")
    assert sum(phased.values()) <= 0.9 * sum(even.values())
    assert max(phased[k] / even[k] for k in even) <= 1 / 0.95


@pytest.mark.parametrize("trace", ["paper-static", "paper-dynamic"])
@pytest.mark.parametrize("truth", ["model", "published", "gpu-node"])
def test_no_policy_stays_below_the_even_split_past_two_windows(
        paper_profile, paper_model, trace, truth):
    for policy in ("ftf", "waa", "optimal", "fair", "jct", "balance"):
        sim = Simulator(load_trace(trace), paper_profile, paper_model,
                        SimConfig(policy=policy, truth=truth, closed_loop=True))
        sim.run()
        two_windows = 2 * sim.loop.window()
        assert _longest_below(sim.node_rates) <= two_windows, (policy, truth, trace)


def test_the_open_loop_default_is_unchanged(paper_profile, paper_model):
    """Without the loop the simulator records no loop and no node rates (the golden traces
    hold it to its figures)."""
    sim = Simulator(load_trace("paper-static"), paper_profile, paper_model,
                    SimConfig(policy="ftf"))
    sim.run()
    assert sim.loop is None and sim.node_rates == []
