"""``adloader bench live | api | startup``: the static mix as real jobs under real daemons, the
control plane at scale, and the command line's own start-up — each against a baseline measured
in the same run. Each bench's own flags are declared here beside it."""

from __future__ import annotations

import argparse
import dataclasses

from adloader.cli import _options, _output
from adloader.errors import InputError


def _policies(text: str) -> tuple[str, ...]:
    """``a,b,c`` as policy names, each checked (a clear error names an unknown one)."""
    from adloader.bench.live import policy_label
    from adloader.scheduling.policies.registry import get_policy

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--policies: name at least one policy")
    for name in names:
        try:
            get_policy(policy_label.split(name)[0])
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return names


DEFAULT_BASELINES = ("requested", "even", "cores", "autotune", "even@trace", "elastic", "one")
# the choices (bench.nodaemon.ALL, named here: parsing imports no bench)
BASELINES = DEFAULT_BASELINES + ("fifo", "shortest", "climb", "elastic:requested",
                                 "elastic:even", "elastic:cores", "elastic:one")


def _baselines(text: str) -> tuple[str, ...]:
    """``a,b`` as no-daemon settings (``none``: no baseline), each checked."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if names == ("none",):
        return ()
    bad = [n for n in names if n not in BASELINES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"--baselines: {', '.join(bad) or 'none given'}: choose from "
            f"{', '.join(BASELINES)} (or none)")
    return names


def live_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kit", action="store_true",
                   help="the GPU run kit's plan, sized for a machine with 15 minutes: the "
                        "profile in about a minute, then ftf and the even split, 2 rounds, "
                        "500 iterations a job (docs/gpu/README.md); flags given still apply")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds of every policy (default 4)")
    p.add_argument("--iterations-scale", dest="iterations_scale", type=float, default=None,
                   help="the trace's iterations × this (default 0.2)")
    p.add_argument("--crop", type=int, default=None,
                   help="image crop (default 224 with CUDA, 112 emulated)")
    p.add_argument("--workers", type=_options.counts, default=None,
                   help="the daemon's workers, one count (default: the cores with CUDA, else "
                        "3 × them)")
    p.add_argument("--policies", type=_policies, default=None,
                   help="policies to run under the daemon, comma-separated (default "
                        "balance,ftf); POLICY+shares: each job in a cgroup of its own, "
                        "weighted by its workers (root); POLICY+turn: the same, a job held at "
                        "one worker while others hold more weighted least; POLICY+order: "
                        "the same, weighted in a ranking (the one a fluid model of strict "
                        "priority ends best); POLICY+open: the daemon's loop open, each plan "
                        "applied unmeasured (requested+open: the asked-for counts under a "
                        "daemon that moves nothing)")
    p.add_argument("--baselines", type=_baselines, default=None,
                   help="no-daemon settings on torch's own DataLoader, comma-separated, or "
                        f"none (default {','.join(DEFAULT_BASELINES)})")
    p.add_argument("--member", choices=("paper-static", "fast-gpus", "gpu-node", "gpu-bound-mix"),
                   default=None,
                   help="the mix to run (default paper-static: the paper's GPUs × 1.2, "
                        "emulated); fast-gpus: the declared space's member, GPUs 4× faster "
                        "(steps × 0.25): the loaders bind; gpu-node: a 16-core one-GPU node "
                        "emulated whole — virtual cores, each trainer copying its batches and "
                        "spending its launch CPU (docs/benchmarks.md); gpu-bound-mix: the "
                        "declared space's member, a GPU-bound job beside three loading-bound "
                        "ones of lengths 1:2:3 (its own trace). Emulated steps only")
    p.add_argument("--report", default=None, metavar="DIR",
                   help="write a self-contained report into DIR: report.md (the machine, the "
                        "tables), timeline.png, machine.json, live.json — the GPU run kit")


# the GPU run kit's plan (--kit), sized for a machine with 15 minutes, each command at
# most 10: the profile in about a minute (L(D) once, on every other count past 4, each batch
# copied to the GPU; no contention surface), then the default policy and the even split,
# 2 rounds, each job 500 iterations (about a minute a run on one H100 with 16 cores)
KIT = {"policies": ("ftf",), "baselines": ("even",), "rounds": 2, "iterations_scale": 1.0,
       "loading_rounds": 1, "surface_rounds": 0}


def _live_config(args):
    """The LiveConfig the flags ask for (--quick: two policies, a short run), checked."""
    from adloader.bench.live.live_bench import LiveConfig

    cfg = LiveConfig()
    if args.quick:
        cfg = LiveConfig(policies=("balance", "ftf"), baselines=("requested", "even",
                                                                 "autotune"),
                         iterations_scale=0.03, rounds=1, surface_rounds=1,
                         surface_window_s=0.5)
    elif args.kit:
        cfg = LiveConfig(**KIT)
    if args.workers is not None and len(args.workers) != 1:
        raise InputError("bench live: --workers takes one count")
    given = {"rounds": args.rounds, "iterations_scale": args.iterations_scale,
             "policies": args.policies, "baselines": args.baselines, "crop": args.crop,
             "capacity": args.workers and args.workers[0], "mix": args.member}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    if cfg.rounds < 1 or cfg.iterations_scale <= 0 or cfg.crop < 0 or cfg.capacity < 0:
        raise InputError("bench live: --rounds must be >= 1, --iterations-scale > 0, "
                         "--crop and --workers >= 0")
    return cfg


def bench_live(args) -> int:
    """The static mix as real jobs under a real daemon, one run per policy."""
    from adloader.bench.live.live_bench import run_live_bench
    from adloader.bench.live.live_report import (
        floor_text,
        job_rows,
        model_rows,
        summary_rows,
        write_report,
    )
    from adloader.bench.sim.report import frontier_table, limits_text

    console = _output.console()
    cfg = _live_config(args)
    result = run_live_bench(cfg, progress=lambda m: console.print(f"  {m}"))
    summary = result["summary"]
    ref = summary[0]["reference"]
    columns, rows = summary_rows(summary)
    console.print(_output.table(
        f"{cfg.mix} mix as real jobs here ({result['mode']}): {result['capacity']} workers, "
        f"iterations × {cfg.iterations_scale:g}; medians of {cfg.rounds} rounds, each ratio "
        f"paired with {ref}'s run of the same round",
        columns, rows))
    console.print(
        "one measure for every row: JCT and makespan from the run's start to each job's last "
        "batch (the daemon's arrival window and start-up included), Σ of the jobs' own "
        "training-loop rates, memory the peak Σ PSS of every process of the run, overhead the "
        "CPU-seconds of the daemon (its start-up left out), supervisors and masters per "
        "training-second (after start: without its fitting worker's start, once a busy period, "
        "as the worker measured it; of it, resizes: the worker pools the masters started for "
        "the daemon's resizes); no daemon: "
        "torch's own DataLoader unless named elastic or climb, placed as the daemon places "
        "(even@trace: on the trace's own GPUs); fifo, shortest: a queue, one job at a time "
        "with the node's workers; best fixed in hindsight: of requested, even, cores and one "
        "(those run), the one with the least median (per figure), paired round by round; "
        "best no-daemon in hindsight: the same over every no-daemon row; targets: makespan "
        "≤ 1.00× best fixed and ≤ 0.95× requested, mean JCT ≤ 1.00× best fixed, both ≤ 1.00× "
        "the best no-daemon row")
    console.print(_output.table(
        f"each job's rate against its rate under {ref} (median over rounds)",
        *job_rows(summary)))
    sims = result.get("simulated_baselines") or []
    if sims:
        console.print(_output.table(
            "the fixed no-daemon settings simulated on this node's measured profile, each job's "
            "rate against its live median (simulated / live − 1); loading d/D·L(D): one "
            "pipeline measured alone, shared by workers; surface: the pipelines measured side "
            "by side (truth measured); kernel, sleeping workers yield their CPU; static, the "
            "model's own assumption", *model_rows(sims)))
    if result.get("floor"):
        console.print(f"  measured: {floor_text(result['floor'])}")
    truth = "this node's measured profile as the truth, against balance simulated on it"
    for line in limits_text(result["limits"], truth):
        console.print(line)
    console.print(frontier_table(result["limits"], "measured profile"))
    _output.save(args.json, result)
    last = {r["policy"]: r for r in result["runs"]}  # the last round of each policy
    _output.plot(args.plot, list(last.values()), "bench live (real jobs)")
    if args.report:
        path = write_report(result, args.report)
        console.print(f"report: {path} (with timeline.png, machine.json and live.json beside it)")
    return 0


def api_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--masters", default="200,1000",
                   help="simulated masters, a row per count (default 200,1000)")


def bench_api(args) -> int:
    """The control plane at scale: REST latency per read endpoint, daemon RSS and CPU, with N
    masters heartbeating at 1 Hz (a row per N), against the idle daemon of the same run."""
    from adloader.bench.ops.api import READS, run_api_bench

    console = _output.console()
    counts = (30,) if args.quick else tuple(int(n) for n in str(args.masters).split(","))
    seconds = 6.0 if args.quick else 30.0
    with console.status(f"bench api: {', '.join(map(str, counts))} masters at 1 Hz"):
        result = run_api_bench(masters=counts, seconds=seconds)
    for row in result["rows"]:
        cells = [[path, f"{row['idle'][path]['p99_ms']:.1f}",
                  f"{row['loaded'][path]['p50_ms']:.1f}", f"{row['loaded'][path]['p99_ms']:.1f}",
                  f"{row['loaded'][path]['p99_ms'] / row['idle'][path]['p99_ms']:.2f}"]
                 for path in READS]
        console.print(_output.table(f"{row['registered']} masters at 1 Hz: daemon RSS "
                             f"{row['daemon_rss_mb']:.0f} MB, CPU {row['daemon_cpu_percent']:.0f} %"
                             f" of a core", ["GET", "idle p99 ms", "p50 ms", "p99 ms",
                                             "p99 × idle"], cells))
        lost = {k: v for k, v in row["counters"].items() if v}
        console.print(f"worst p99 {row['worst_p99_ms']:.1f} ms; counters {lost or 'all 0'}")
        deep = row["deep_submit"]
        worst = max(v["p99_ms"] for v in deep["latency"].values())
        console.print(f"while a Resnet600 job was submitted ({deep['count_s']:.1f} s to count "
                      f"its FLOPs, {deep['status']}): reads p99 ≤ {worst:.1f} ms")
    _output.save(args.json, result)
    return 0


def bench_startup(args) -> int:
    """The command line's start-up: `adloader --help`, `jobs`, `submit --help` against a bare
    interpreter importing argparse, in the same run (medians)."""
    from adloader.bench.live.startup import run_startup_bench

    result = run_startup_bench(rounds=5 if args.quick else 15)
    rows = [[r["command"], f"{r['median_ms']:.0f}", f"{r['ratio']:.1f}",
             ", ".join(r["heavy"]) or "none"] for r in result["rows"]]
    out = _output.console()
    out.print(_output.table(f"start-up, median of {result['rounds']} runs (baseline: "
                            f"`python -c 'import argparse'`, {result['baseline_ms']:.0f} ms)",
                            ["command", "ms", "× baseline", "heavy modules loaded"], rows))
    _output.save(args.json, result)
    return 0


def bench_tuner(args) -> int:
    """The competent per-job tuner alone on the node against each job's best fixed count."""
    from adloader.bench.live.tuner import tuner_bar

    console = _output.console()
    quick = getattr(args, "quick", False)
    scale = getattr(args, "iterations_scale", None)
    if scale is not None and scale <= 0:
        raise InputError(f"bench tuner: --iterations-scale must be > 0, not {scale}")
    result = tuner_bar(rounds=args.rounds or (1 if quick else 2),
                       iterations_scale=scale or (0.1 if quick else 0.3),
                       progress=lambda m: console.print(f"  {m}"))
    counts = range(1, result["capacity"] + 1)
    console.print(_output.table(
        f"each job of {result['trace']} alone on ElasticDataLoader, no daemon: samples/s at "
        f"each fixed num_workers and with the tuner (from {result['jobs'][0]['tuner_start']}, "
        f"within {result['capacity']}); {result['iterations_scale']} × the stated iterations; "
        f"medians of {result['rounds']} rounds",
        ["job", *(str(d) for d in counts), "best fixed (hindsight)", "tuner",
         "tuner × best", f"≥ {result['bar']:.2f}"],
        [[j["name"], *(f"{j['fixed'][d]:.0f}" for d in counts),
          f"{j['best_fixed']} ({j['best_fixed_rate']:.0f})", f"{j['tuner_rate']:.0f}",
          f"{j['ratio']:.3f}", "yes" if j["met"] else "no"] for j in result["jobs"]]))
    _output.save(args.json, result)
    return 0


def resize_cost_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("live", nargs="*", metavar="LIVE.json",
                   help="live.json files of `adloader bench live --report` (their runs pooled)")


def pooled_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("live", nargs="*", metavar="LIVE.json",
                   help="live.json files of `adloader bench live --report` on one mix (their "
                        "rounds pooled, each ratio still paired within its own round)")


def _lives(paths: list[str], bench: str) -> list[dict]:
    """The ``live.json`` dicts at ``paths``; InputError naming a file that is not one."""
    import json
    from pathlib import Path

    if not paths:
        raise InputError(f"bench {bench}: name the live.json files to read "
                         "(`adloader bench live --report DIR` writes DIR/live.json)")
    lives = []
    for path in paths:
        try:
            live = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8 or not JSON
            raise InputError(f"{path}: not a readable JSON file: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
        if not isinstance(live, dict) or not isinstance(live.get("runs"), list):
            raise InputError(f"{path}: not a live.json of `adloader bench live` (no runs)")
        lives.append(live)
    return lives


def bench_resize_cost(args) -> int:
    """What a resize costs the node and how far a window's halves read apart, from the
    progress marks of written live runs (``adloader.bench.live.resize_cost``)."""
    from adloader.bench.live.resize_cost import resize_cost

    lives = _lives(args.live, "resize-cost")
    result = resize_cost(lives)
    console = _output.console()
    after = result["after_resize"]
    seconds = [f"+{s} s" for s in result["seconds_after"]]
    console.print(_output.table(
        f"after a resize under the daemon: samples/s in each second against the "
        f"{result['before_s']:g} s before (medians over the resizes alone)",
        ["jobs", "resizes", *seconds],
        [[who, row["resizes"], *[f"{x:.2f}" for x in row["after"]]]
         for who, row in after.items()]))
    console.print(_output.table(
        f"a {result['window_s']:g} s window's two halves, apart (relative to the window)",
        ["setting", "windows", "median"],
        [[k, v["windows"], f"{v['median']:.3f}"] for k, v in result["window_spread"].items()]))
    _output.save(args.json, result)
    return 0


def bench_pooled(args) -> int:
    """The rounds of several live runs of one mix as one sample: each figure's median over
    every round with its 95 % bootstrap interval (``adloader.bench.live.live_pool``)."""
    from adloader.bench.live.live_pool import FIGURES, pool

    result = pool(_lives(args.live, "pooled"), args.live)
    ref = str(result["reference"]).removeprefix("no daemon: ")  # "even" where it ran
    shown = [(key, what.replace("× even", f"× {ref}")) for key, what, _ in FIGURES
             if any(key in s["figures"] for s in result["settings"])]
    rows = []
    for s in result["settings"]:
        cells = []
        for key, _ in shown:
            f = s["figures"].get(key)
            cells.append("—" if f is None else f"{f['median']:.3f} "
                         f"({f['low']:.3f}–{f['high']:.3f}) {f['met']}/{f['rounds']}")
        rows.append([s["policy"], s["rounds"], *cells])
    trace, member = result["mix"]
    n = len(result["reports"])
    reports = f"{n} report{'s' if n != 1 else ''}"
    console = _output.console()
    console.print(_output.table(
        f"{trace} ({member}), {reports} pooled: medians over the "
        "rounds (95 % bootstrap interval), rounds meeting the target",
        ["setting", "rounds", *[what for _, what in shown]], rows))
    for key, what in (("best_fixed", "best fixed"), ("best_nodaemon", "best no-daemon")):
        best = next((s[key] for s in result["settings"] if s.get(key)), None)
        if best:
            console.print(f"{what} in hindsight over the pooled rounds: makespan "
                          f"{best['makespan_s']}, mean JCT {best['mean_jct_s']}")
    console.print("targets: " + ", ".join(f"{what} ≤ {t:.3f}" for _, what, t in FIGURES))
    _output.save(args.json, result)
    return 0
