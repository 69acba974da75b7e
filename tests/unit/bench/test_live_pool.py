"""Pooling the rounds of several ``bench live`` reports: each ratio stays paired within its own
round and report, the best fixed setting is chosen once over every round, the interval is
the median's, and reports of different mixes are refused."""

import statistics

import pytest

from adloader.bench.live.live_pool import interval, pool, pooled_runs
from adloader.errors import InputError

JOBS = ("a", "b")


def _run(policy: str, round_: int, makespan: float, jct: float) -> dict:
    return {"policy": policy, "round": round_, "makespan_s": makespan, "mean_jct_s": jct,
            "aggregate_throughput": 100.0 / makespan,
            "jobs": [{"name": n, "jct_s": jct, "throughput": 100.0 / jct} for n in JOBS]}


def _live(rounds: list[tuple[float, float, float]], mix: str = "gpu-node") -> dict:
    """Per round (the even split's makespan, requested's, ftf's); mean JCT = makespan."""
    runs = []
    for r, (even, requested, ftf) in enumerate(rounds):
        runs += [_run("no daemon: even", r, even, even),
                 _run("no daemon: requested", r, requested, requested),
                 _run("ftf", r, ftf, ftf)]
    return {"config": {"trace": "paper-static", "mix": mix}, "runs": runs}


def test_each_round_stays_paired_within_its_own_report():
    # report A's rounds run slow, B's fast: pairing a round of A with one of B would read
    # ftf at 0.5x or 2x; paired within each round, ftf is 0.9x the even split everywhere
    a = _live([(100.0, 95.0, 90.0), (110.0, 104.5, 99.0)])
    b = _live([(50.0, 47.5, 45.0), (55.0, 52.25, 49.5)])
    runs, labels = pooled_runs([a, b], ["a", "b"])
    assert len({r["round"] for r in runs}) == 4
    assert labels == ["no daemon: even", "no daemon: requested", "ftf"]
    ftf = next(s for s in pool([a, b], ["a", "b"])["settings"] if s["policy"] == "ftf")
    figure = ftf["figures"]["makespan_paired"]
    assert figure["median"] == pytest.approx(0.9)
    assert figure["low"] == pytest.approx(0.9) and figure["high"] == pytest.approx(0.9)
    assert figure["rounds"] == 4 and figure["met"] == 4
    # the best fixed setting (requested, 0.95x even) chosen once over the pooled rounds
    assert ftf["best_fixed"]["makespan_s"] == "no daemon: requested"
    assert ftf["figures"]["makespan_vs_best_fixed"]["median"] == pytest.approx(0.9 / 0.95)


def test_the_interval_is_the_medians_and_counts_the_rounds_that_meet_a_target():
    ratios = [0.85, 0.90, 0.93, 0.96, 1.02, 0.88, 0.99]
    live = _live([(100.0, 97.0, 100.0 * x) for x in ratios])
    ftf = next(s for s in pool([live], ["x"])["settings"] if s["policy"] == "ftf")
    figure = ftf["figures"]["jct_paired"]
    assert figure["median"] == pytest.approx(statistics.median(ratios))
    assert min(ratios) <= figure["low"] <= figure["median"] <= figure["high"] <= max(ratios)
    assert figure["low"] < figure["high"]
    assert figure["met"] == sum(x <= 0.95 for x in ratios)  # mean JCT's target: 0.95x even
    assert interval(ratios) == interval(ratios)  # seeded: the same reports, the same interval


def test_reports_of_different_mixes_are_refused_naming_the_file():
    with pytest.raises(InputError, match="b.json: ran .*gpu-bound-mix.*pool runs of one mix"):
        pool([_live([(1.0, 1.0, 1.0)]), _live([(1.0, 1.0, 1.0)], mix="gpu-bound-mix")],
             ["a.json", "b.json"])
    with pytest.raises(InputError, match="at least one"):
        pool([], [])


def test_the_command_prints_the_pooled_rounds_and_names_a_file_that_is_not_a_report(
        tmp_path, capsys):
    import json

    from adloader import cli

    paths = []
    for i, rounds in enumerate(([(100.0, 95.0, 90.0)], [(50.0, 47.5, 46.0)])):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(_live(rounds)))
    out = tmp_path / "pooled.json"
    assert cli.main(["bench", "pooled", *map(str, paths), "--json", str(out)]) == 0
    assert "2 reports pooled" in capsys.readouterr().out
    ftf = next(s for s in json.loads(out.read_text())["settings"] if s["policy"] == "ftf")
    assert ftf["figures"]["makespan_paired"]["rounds"] == 2
    bad = tmp_path / "notes.txt"
    bad.write_text("not json")
    assert cli.main(["bench", "pooled", str(bad)]) == 2
    assert "notes.txt: not a readable JSON file" in capsys.readouterr().err
