"""``bench mixes``: development random mixes from the generator, every policy, simulated."""

from __future__ import annotations

import json

import pytest

from adloader.bench.sim import held_out_mixes
from adloader.errors import InputError
from adloader.sim import no_daemon

POLICIES = ["requested", *held_out_mixes.MIX_POLICIES]


@pytest.mark.held_out_plumbing
def test_two_small_mixes_table_shape_and_balance_is_the_baseline(paper_profile, paper_model):
    result = held_out_mixes.random_mixes(paper_profile, paper_model, count=2, jobs=4)
    assert result["seeds"] == [1000, 1001]  # held out: no test or calibration uses them
    assert result["simulations"] == 2 * len(POLICIES) == len(result["runs"])
    rows = {(r["policy"], r["realloc"]): r for r in result["rows"]}
    assert list(rows) == [("requested", False), *((p, True) for p in held_out_mixes.MIX_POLICIES)]
    for row in rows.values():
        assert row["mixes"] == 2 and 0 <= row["every_job_kept"] <= 2
        for key in held_out_mixes.MIX_METRICS:
            v = row[key]
            assert 0 < v["min"] <= v["median"] <= v["max"]
    balance = rows["balance", True]
    assert all(balance[k] == {"median": 1.0, "min": 1.0, "max": 1.0}
               for k in held_out_mixes.MIX_METRICS if k != "makespan_x_norealloc")
    assert balance["every_job_kept"] == 2
    baseline = rows["requested", False]["makespan_x_norealloc"]
    assert baseline == {"median": 1.0, "min": 1.0, "max": 1.0}


def test_seeds_of_each_run_are_disjoint():
    assert held_out_mixes.mix_seeds(3, 0) == [1000, 1001, 1002]
    assert not set(held_out_mixes.mix_seeds(3, 0)) & set(held_out_mixes.mix_seeds(3, 1))
    with pytest.raises(InputError, match="mixes must be at least 1"):
        held_out_mixes.random_mixes(None, None, count=0)


@pytest.mark.slow  # `bench mixes`: every policy over two mixes
@pytest.mark.held_out_plumbing
def test_cli_prints_a_row_per_policy(run, tmp_path):
    path = tmp_path / "mixes.json"
    code, out, _ = run("bench", "mixes", "--mixes", "2", "--jobs", "3", "--rate", "0.05",
                       "--json", str(path))
    assert code == 0
    out = " ".join(out.split())  # the console wraps its lines
    assert "2 development mixes, generator seeds 1000–1001" in out and "3 jobs each" in out
    saved = json.loads(path.read_text())
    assert saved["jobs"] == 3 and saved["rate_per_s"] == 0.05
    assert [r["policy"] for r in saved["rows"]] == POLICIES
    assert "2/2" in out  # balance keeps every job at its own rate
    # the same mixes against no daemon: ftf beside the best fixed setting and the autotuner
    versus = saved["no_daemon"]
    assert versus["mixes"] == 2 and [m["seed"] for m in versus["per_mix"]] == [1000, 1001]
    assert "the same mixes against no daemon" in out and "targets held in" in out
    for m in versus["per_mix"]:  # the floor is under every schedule, the fixed ones too
        assert m["floor_x_best_fixed"] <= 1.0 + 1e-9
        assert m["mean_jct_x_best_fixed"] >= m["floor_x_best_fixed"] - 1e-9
    # and against the careful user's other baselines: per-job counts in hindsight, queues
    assert "the careful user's other baselines" in out
    assert set(versus["summary"]) >= set(no_daemon.BASELINE_KEYS)
    code, _, err = run("bench", "mixes", "--mixes", "0")
    assert code == 2 and "mixes must be at least 1" in err


@pytest.mark.slow  # `bench mixes` twice, with a whole-trace floor
@pytest.mark.held_out_plumbing
def test_the_floor_over_a_whole_mix_is_at_least_the_groups_and_under_every_schedule(run,
                                                                                    tmp_path):
    """``--floor-slot``: each mix's floor over its whole trace, arrivals included, where it is
    higher than the sum of the groups' (both are floors: the higher is taken and named)."""
    runs = {}
    for slot in (None, "8"):
        path = tmp_path / f"mixes-{slot}.json"
        code, _, err = run("bench", "mixes", "--mixes", "1", "--jobs", "3", "--rate", "0.05",
                           *(("--floor-slot", slot) if slot else ()), "--json", str(path))
        assert code == 0, err
        [runs[slot]] = json.loads(path.read_text())["no_daemon"]["per_mix"]
    groups, whole = runs[None], runs["8"]
    assert groups["floor_method"] == "groups"
    assert whole["floor_x_best_fixed"] >= groups["floor_x_best_fixed"] - 1e-9
    assert whole["mean_jct_x_best_fixed"] >= whole["floor_x_best_fixed"] - 1e-9
    assert whole["floor_x_best_fixed"] <= 1.0 + 1e-9


def test_placed_as_balance_pins_every_run_to_the_gpus_balance_gave(paper_profile, paper_model):
    """``--placed-as-balance``: each job on the GPUs balance's run gave it, in every run of
    the mix, so a policy is judged against balance at the same co-location."""
    from adloader.sim.generator import generate
    from adloader.sim.simulator import SimConfig, simulate
    from adloader.sim.trace import pinned

    def run(trace, policy):
        return simulate(trace, paper_profile, paper_model,
                        SimConfig(policy=policy, realloc=True)).to_json()

    trace = generate(8, 1, "paper", 1 / 60, paper_profile.gpus)  # a test's own seed
    place = {j["name"]: tuple(j["gpu_ids"]) for j in run(trace, "balance")["jobs"]}
    free = {j["name"]: tuple(j["gpu_ids"]) for j in run(trace, "ftf")["jobs"]}
    assert free != place  # this mix: ftf, on its own, co-locates otherwise
    alike = pinned(trace, place)
    assert {j["name"]: tuple(j["gpu_ids"]) for j in run(alike, "ftf")["jobs"]} == place
    result = held_out_mixes.random_mixes(paper_profile, paper_model, seeds=[1], jobs=8,
                                      policies=("balance", "ftf"), placed_as_balance=True)
    assert result["placed_as_balance"] is True
    ftf = next(r for r in result["runs"] if r["policy"] == "ftf")
    expected = run(alike, "ftf")
    held_out_mixes.job_ratios(expected, run(alike, "balance"))
    assert ftf["worst_x_balance"] == expected["worst_job_ratio"]
    with pytest.raises(InputError, match="must include it"):
        held_out_mixes.random_mixes(paper_profile, paper_model, seeds=[1], policies=("ftf",))


@pytest.mark.held_out_plumbing
def test_cli_places_every_run_as_balance_when_asked(run, tmp_path):
    path = tmp_path / "mixes.json"
    code, out, err = run("bench", "mixes", "--mixes", "1", "--jobs", "3", "--rate", "0.05",
                         "--placed-as-balance", "--json", str(path))
    assert code == 0, err
    assert "every run placed as balance placed the mix" in out
    saved = json.loads(path.read_text())
    assert saved["placed_as_balance"] is True and "no_daemon" not in saved
