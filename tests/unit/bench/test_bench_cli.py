"""`adloader bench NAME`: each bench takes exactly its own flags (parsing only: nothing runs)."""

from __future__ import annotations

import argparse

import pytest

from adloader import cli
from adloader.cli.bench import bench_commands as bench
from adloader.errors import InputError

SIM = {"--profile", "--model", "--seed", "--cores", "--window", "--prediction-error",
       "--realloc-cost", "--truth"}
OUT = {"--json", "--plot"}
FLAGS: dict[str, set[str]] = {  # the contract: what each bench takes, nothing else
    "static": SIM | OUT,
    "dynamic": SIM | OUT | {"--floor-slot", "--closed-loop"},
    "tpm": {"--profile", "--model", "--seed", "--cores", "--realloc-cost"},
    "allocation": {"--jobs", "--capacity", "--json"},
    "mixes": SIM | {"--jobs", "--mixes", "--rate", "--floor-slot", "--placed-as-balance",
                   "--json"},
    "held-out": SIM | {"--floor-slot", "--json"},
    "declared": {"--profile", "--seed", "--truth", "--floor-slot", "--mixes", "--closed-loop",
                 "--json"},
    "live": {"--quick", "--kit", "--rounds", "--iterations-scale", "--crop", "--workers",
             "--policies", "--baselines", "--report", "--member"}
    | OUT,
    "api": {"--quick", "--masters", "--json"},
    "tuner": {"--quick", "--rounds", "--iterations-scale", "--json"},
    "soak": {"--quick", "--jobs", "--json"},
    "resize": {"--quick", "--json"},
    "resize-cost": {"--json"},
    "pooled": {"--json"},
    "cache": {"--quick", "--ranks-per-node", "--json"},
    "epoch-order": {"--quick", "--json"},
    "chunks": {"--quick", "--json"},
    "shared-cache": {"--quick", "--json"},
    "node-cache": {"--quick", "--rounds", "--json"},
    "cluster": {"--quick", "--profile", "--seed", "--json"},
    "multinode": {"--json"},
    "locality": {"--quick", "--max-imbalance", "--json"},
    "storage": {"--quick", "--json"},
    "startup": {"--quick", "--json"},
    "install": {"--quick", "--json"},
    "loaders": {"--quick", "--workers", "--rounds", "--crop", "--json"},
}
# a result file is `--out FILE`; `--json FILE`, its first name, is the same flag
FLAGS = {name: flags | {"--out"} if "--json" in flags else flags
         for name, flags in FLAGS.items()}
EVERY_FLAG = set().union(*FLAGS.values())
VALUES = {"--profile": "paper", "--model": "tpm.json", "--seed": "3", "--cores": "8",
          "--window": "0", "--prediction-error": "0.2", "--realloc-cost": "16",
          "--json": "out.json", "--out": "out.json", "--plot": "out.png", "--jobs": "50",
          "--capacity": "64",
          "--mixes": "2", "--rate": "0.05", "--rounds": "3", "--iterations-scale": "0.1",
          "--crop": "112", "--workers": "2", "--policies": "balance,optimal",
          "--masters": "30", "--ranks-per-node": "2", "--max-imbalance": "1.2",
          "--baselines": "even,autotune", "--truth": "published", "--report": "kit",
          "--floor-slot": "4", "--member": "fast-gpus"}


def _parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser("bench").parse_args(["bench", *argv])


def _bench_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser("bench")
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub = next(a for a in top.choices["bench"]._actions
               if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


SWITCHES = {"--quick", "--kit", "--placed-as-balance", "--closed-loop"}  # flags with no value


def _args(flag: str) -> list[str]:
    return [flag] if flag in SWITCHES else [flag, VALUES[flag]]


def test_the_table_covers_every_bench_and_every_flag_has_a_sample_value():
    assert set(FLAGS) == set(bench.BENCHMARKS) == set(_bench_parsers())
    assert set(VALUES) >= EVERY_FLAG - SWITCHES


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_bench_declares_exactly_its_flags(name):
    declared = {s for a in _bench_parsers()[name]._actions for s in a.option_strings
                if s.startswith("--") and s != "--help"}
    assert declared == FLAGS[name]


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_each_declared_flag_parses(name):
    args = _parse(name)
    assert args.which == name and args.func is bench.BENCHMARKS[name].run
    everything = [x for flag in sorted(FLAGS[name]) for x in _args(flag)]
    args = _parse(name, *everything)
    for flag in FLAGS[name] - {"--quick"}:
        dest = "json" if flag == "--out" else flag[2:].replace("-", "_")
        assert getattr(args, dest) is not None, flag
    if "--quick" in FLAGS[name]:
        assert args.quick is True


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_flag_the_bench_does_not_take_is_refused_naming_it(name, capsys):
    for flag in sorted(EVERY_FLAG - FLAGS[name]):
        with pytest.raises(SystemExit) as exc:
            _parse(name, *_args(flag))
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"unrecognized arguments: {flag}" in err, (name, flag, err)
        assert f"adloader bench {name}" in err  # the bench's own usage, not the top one


def test_static_refuses_rounds(capsys):
    with pytest.raises(SystemExit):
        _parse("static", "--rounds", "3")
    assert "--rounds" in capsys.readouterr().err


def test_defaults_are_each_bench_s_own():
    assert _parse("allocation").capacity == 1024 and _parse("allocation").jobs is None
    mixes = _parse("mixes")
    assert (mixes.mixes, mixes.rate, mixes.jobs, mixes.seed) == (10, 1 / 60, None, 0)
    assert _parse("api").masters == "200,1000"
    assert _parse("locality").max_imbalance == 1.1
    assert _parse("loaders", "--workers", "1,2").workers == (1, 2)
    assert _parse("live", "--policies", "balance,fair").policies == ("balance", "fair")
    assert _parse("dynamic", "--closed-loop").closed_loop and not _parse("dynamic").closed_loop
    static = _parse("static")
    assert (static.profile, static.window, static.realloc_cost, static.prediction_error) == \
        ("paper", 30.0, 0.1, 0.0)


@pytest.mark.parametrize("name", ["static", "dynamic", "mixes"])
def test_a_simulated_bench_takes_a_truth_and_refuses_an_unknown_one_naming_the_choices(
        name, capsys):
    assert _parse(name).truth == "model"  # today's truth stays the default
    assert _parse(name, "--truth", "published").truth == "published"
    assert _parse(name, "--truth", "measured").truth == "measured"  # a profile's surface
    with pytest.raises(SystemExit) as exc:
        _parse(name, "--truth", "bogus")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--truth" in err and "'bogus'" in err and "'model'" in err and "'published'" in err
    assert "'measured'" in err


def test_bench_help_lists_every_bench_with_its_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # argparse wraps nothing
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--help"])
    assert exc.value.code == 0
    words = " ".join(capsys.readouterr().out.split())
    for name, spec in bench.BENCHMARKS.items():
        assert " ".join([name, *spec.help.split()]) in words, name


def test_a_bench_s_help_shows_only_its_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "static", "--help"])
    out = capsys.readouterr().out
    assert "--realloc-cost" in out and "--json" in out
    for flag in ("--rounds", "--workers", "--crop", "--jobs", "--quick", "--masters"):
        assert flag not in out


def test_a_bench_name_is_required_and_checked(capsys):
    with pytest.raises(SystemExit):
        _parse()
    assert "NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse("nope")
    assert "invalid choice" in capsys.readouterr().err


def test_nothing_outside_the_command_line_imports_it():
    import pathlib
    import re

    root = pathlib.Path(cli.__file__).parents[2]
    pattern = re.compile(r"^\s*(from|import)\s+adloader\.cli\b", re.M)
    for folder in ("adloader", "bench", "client", "daemon", "workloads", "models"):
        for path in (root / folder).rglob("*.py"):
            if "cli" in path.relative_to(root).parts[:2] or path.name == "__main__.py":
                continue  # the command line itself, and `python -m adloader` that runs it
            assert not pattern.search(path.read_text()), path


def test_live_takes_its_baselines_and_policies_with_cpu_shares():
    assert _parse("live", "--baselines", "even,autotune").baselines == ("even", "autotune")
    assert _parse("live", "--baselines", "none").baselines == ()
    assert _parse("live", "--policies", "ftf+shares").policies == ("ftf+shares",)
    assert _parse("live", "--policies", "ftf+turn").policies == ("ftf+turn",)
    assert _parse("live", "--policies", "ftf-turns+turn").policies == ("ftf-turns+turn",)
    assert _parse("live", "--baselines", "one,cores").baselines == ("one", "cores")
    with pytest.raises(SystemExit):
        _parse("live", "--policies", "fastest+turn")
    with pytest.raises(SystemExit):
        _parse("live", "--policies", "ftf+sometimes")  # no such rule: no such policy
    with pytest.raises(SystemExit):
        _parse("live", "--baselines", "sometimes")


def test_a_policy_label_names_its_policy_and_cpu_share_rule():
    """One reading of ``POLICY+SUFFIX`` for the command line and the bench that runs it."""
    from adloader.bench.live.policy_label import split
    from adloader.config import CPU_SHARE_RULES

    assert split("ftf") == ("ftf", None, False)
    assert split("ftf+shares") == ("ftf", "workers", False)
    assert split("balance+turn") == ("balance", "turn", False)
    assert split("ftf+order") == ("ftf", "order", False)
    assert split("requested+open") == ("requested", None, True)  # the loop open
    assert split("ftf+sometimes") == ("ftf+sometimes", None, False)  # the whole label: no policy
    assert all(split(f"ftf+{s}")[1] in CPU_SHARE_RULES for s in ("shares", "turn", "order"))
    assert _parse("live", "--policies", "requested+open").policies == ("requested+open",)


def test_live_runs_a_declared_mix_with_its_steps_scaled_and_refuses_it_on_a_real_gpu():
    from adloader.bench.live.live_bench import LiveConfig, for_mix
    from adloader.bench.sim.declared import FAST_GPU_STEPS

    assert _parse("live", "--member", "fast-gpus").member == "fast-gpus"
    with pytest.raises(SystemExit):
        _parse("live", "--member", "slow-gpus")
    base = LiveConfig()
    assert for_mix(base, cuda=False).step_scale == base.step_scale  # paper-static
    fast = LiveConfig(mix="fast-gpus")
    assert for_mix(fast, cuda=False).step_scale == pytest.approx(
        base.step_scale * FAST_GPU_STEPS)
    with pytest.raises(InputError, match="fast-gpus"):
        for_mix(fast, cuda=True)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_a_floor_slot_that_is_not_a_positive_duration_is_refused_naming_it(value, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse("dynamic", "--floor-slot", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--floor-slot" in err and repr(value) in err


def test_the_one_baseline_gives_every_job_one_worker_and_counts_as_fixed():
    from adloader.bench.live import live_rounds, nodaemon
    from adloader.sim.trace import load_trace

    trace = load_trace("paper-static")
    assert set(nodaemon.baseline_workers(trace, "one", 6, 2).values()) == {1}
    assert "no daemon: one" in live_rounds.FIXED  # the best fixed setting is chosen among these


def test_the_no_daemon_rows_name_their_loader_counts_and_order():
    from adloader.bench.live import nodaemon
    from adloader.cli.bench.bench_live import BASELINES
    from adloader.sim.trace import load_trace

    assert set(BASELINES) == set(nodaemon.ALL)  # the command line offers every row
    trace = load_trace("paper-static")
    assert nodaemon.loader_of("elastic:one") == nodaemon.loader_of("climb") == "elastic"
    assert nodaemon.loader_of("fifo") == nodaemon.loader_of("even@trace") == "torch"
    assert nodaemon.baseline_workers(trace, "elastic:one", 6, 2) == \
        nodaemon.baseline_workers(trace, "one", 6, 2)
    assert nodaemon.baseline_workers(trace, "elastic", 6, 2) == \
        nodaemon.baseline_workers(trace, "even", 6, 2)
    assert set(nodaemon.baseline_workers(trace, "fifo", 6, 2).values()) == {6}  # alone
    assert nodaemon.baseline_workers(trace, "climb", 6, 2) == \
        nodaemon.baseline_workers(trace, "even", 6, 2)  # the tuner's start
    short = trace.model_copy(update={"jobs": (
        trace.jobs[0].model_copy(update={"iterations": 900}), *trace.jobs[1:],
        trace.jobs[0].model_copy(update={"name": "tiny", "iterations": 10, "arrival_s": 5.0}))})
    assert [j.name for j in nodaemon.queue_order(short, "fifo")] == \
        ["Resnet18", "mdResnet12", "smResnet20", "tiny"]
    assert [j.name for j in nodaemon.queue_order(short, "shortest")] == \
        ["tiny", "mdResnet12", "smResnet20", "Resnet18"]
