"""`adloader sim`, `adloader bench static|dynamic|tpm|allocation`, `adloader demo`."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from adloader.allocation import DEFAULT_POLICY, POLICIES
from adloader.cli import env_default
from adloader.errors import InputError
from adloader.workloads import bench, cli_bench, synth
from adloader.workloads.cli_model import describe, load_model, score_table, wide_console
from adloader.workloads.files import write_json
from adloader.workloads.plot import plot_timelines
from adloader.workloads.profile import load_profile
from adloader.workloads.simulator import LIVE_RESIZE_S, SimConfig, simulate
from adloader.workloads.trace import load_trace


def _write_json(data, path) -> None:
    write_json(path, data)


def _setup(args):
    profile = load_profile(args.profile)
    model = load_model(args.model) if args.model else synth.fitted_model(profile, args.seed)
    config = SimConfig(capacity=args.cores, arrival_window_s=args.window,
                       completion_window_s=args.window, realloc_cost_s=args.realloc_cost)
    if args.realloc_cost < 0:
        raise InputError("--realloc-cost must be at least 0")
    if args.cores is not None and args.cores < 1:
        raise InputError("--cores must be at least 1")
    return profile, model, config


def _sim(args) -> int:
    profile, model, config = _setup(args)
    trace = load_trace(args.trace, node_gpus=profile.gpus)
    config.policy, config.realloc = args.policy, not args.no_realloc
    result = simulate(trace, profile, model, config).to_json()
    console = wide_console()
    console.print(result_table(result, f"{trace.name or args.trace}: {args.policy}, "
                                       f"profile {profile.name}"))
    console.print(result_line(result))
    if args.json:
        _write_json(result, args.json)
    if args.plot:
        plot_timelines([result], args.plot)
        console.print(f"wrote {args.plot}")
    return 0


def result_table(result: dict, title: str) -> Table:
    """One run's jobs (simulated or live)."""
    table = Table(title=title)
    for col in ("job", "model", "arrival s", "start s", "end s", "workers", "samples/s"):
        table.add_column(col, justify="left" if col in ("job", "model") else "right")
    for j in result["jobs"]:
        table.add_row(j["name"], j["model"], f"{j['arrival_s']:.0f}", f"{j['start_s']:.0f}",
                      f"{j['end_s']:.0f}", str(j["workers_initial"]), f"{j['throughput']:.1f}")
    return table


def result_line(result: dict) -> str:
    idle = result["gpu_idle_fraction"]
    return (f"makespan {result['makespan_s']:.1f} s · Σ throughput "
            f"{result['aggregate_throughput']:.1f} samples/s · mean JCT "
            f"{result['mean_jct_s']:.1f} s · GPU idle "
            f"{'—' if idle is None else f'{idle:.1%}'} · reallocations {result['reallocations']}")


def static_table(runs) -> Table:
    table = Table(title="static mix (Fig. 3): Σ throughput against fixed balance")
    for col in ("policy", "reallocation", "Σ samples/s", "× balance", "makespan s",
                "mean JCT s", "GPU idle", "reallocs", "initial workers"):
        table.add_column(col, justify="left" if col in ("policy", "reallocation") else "right")
    for r in sorted(runs, key=lambda r: r["ratio"]):
        style = "bold" if r["paper_setting"] else "dim"
        table.add_row(r["policy"], "yes" if r["realloc"] else "no",
                      f"{r['aggregate_throughput']:.0f}", f"{r['ratio']:.3f}",
                      f"{r['makespan_s']:.0f}", f"{r['mean_jct_s']:.0f}",
                      f"{r['gpu_idle_fraction']:.0%}", str(r["reallocations"]),
                      ",".join(str(j["workers_initial"]) for j in r["jobs"]), style=style)
    return table


def dynamic_table(runs) -> Table:
    table = Table(title="dynamic trace (Table III): makespan against no reallocation")
    for col in ("policy", "reallocation", "makespan s", "× no-realloc", "Σ samples/s",
                "× no-realloc ", "mean JCT s", "reallocs"):
        table.add_column(col, justify="left" if col in ("policy", "reallocation") else "right")
    for r in runs:
        table.add_row(r["policy"], "yes" if r["realloc"] else "no", f"{r['makespan_s']:.0f}",
                      f"{r['ratio']:.3f}", f"{r['aggregate_throughput']:.0f}",
                      f"{r['throughput_ratio']:.3f}", f"{r['mean_jct_s']:.0f}",
                      str(r["reallocations"]))
    return table


def _bench(args) -> int:
    if args.which in cli_bench.EXTRA:
        return cli_bench.EXTRA[args.which](args)
    console = wide_console()
    if args.which == "allocation":
        rows = bench.allocation_timing(args.jobs, args.capacity)
        ref = next(r for r in rows if r["policy"] == "balance")
        table = Table(title=f"allocating {args.jobs} jobs over {args.capacity} workers")
        for col in ("policy", "median ms", "× balance time", "workers", "Σ T samples/s"):
            table.add_column(col, justify="left" if col == "policy" else "right")
        for r in rows:
            table.add_row(r["policy"], f"{r['median_ms']:.2f}",
                          f"{r['median_ms'] / ref['median_ms']:.1f}", str(r["workers"]),
                          f"{r['throughput']:.0f}")
        console.print(table)
        return 0
    profile, model, config = _setup(args)
    cost = config.realloc_cost_s
    console.print(f"profile {profile.name!r}: {profile.device or profile.description[:60]}; "
                  f"{config.capacity or profile.loading_workers} loading workers, "
                  f"reallocation cost {cost:g} s")
    if args.which == "tpm":
        console.print(score_table(model))
        console.print(describe(model))
        return 0
    if args.which == "static":
        runs = bench.static(load_trace("paper-static", profile.gpus), profile, model, config)
        console.print(static_table(runs))
        shown = [r for r in runs if r["paper_setting"] and r["policy"] in ("balance", "waa",
                                                                            "optimal")]
    else:
        runs = bench.dynamic(load_trace("paper-dynamic", profile.gpus), profile, model, config)
        console.print(dynamic_table(runs))
        shown = [runs[0], next(r for r in runs if r["policy"] == DEFAULT_POLICY)]
    if args.json:
        _write_json(runs, args.json)
    if args.plot:
        plot_timelines(shown, args.plot, title=f"bench {args.which}, profile {profile.name}")
        console.print(f"wrote {args.plot}")
    return 0


def _demo(args) -> int:
    """The main job on embedded defaults: a real daemon runs a small trace of real jobs
    (replayed over REST), then the paper's static mix in the simulator under every policy."""
    import tempfile

    from adloader.workloads.bench_live import DaemonProcess
    from adloader.workloads.replay import replay

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    console = wide_console()
    work = Path(tempfile.mkdtemp(prefix="adloader-demo-"))
    daemon_args = ["--capacity", str(args.capacity), "--gpus", "1", "--arrival-window", "2",
                   "--completion-window", "2", "--heartbeat", "0.5"]
    with console.status("live: starting a daemon and replaying the small-mix trace"), \
            DaemonProcess(work / "state", daemon_args) as daemon:
        result = replay(load_trace("small-mix"), daemon.call, crop=112, images=64,
                        data=str(work / "jpeg"), timeout_s=600)
    console.print(result_table(result, f"live: small-mix on a real daemon ({result['cores']} "
                                       f"workers, policy {result['policy']})"))
    console.print(result_line(result))
    _write_json(result, out / "live.json")
    plot_timelines([result], out / "live-timeline.png", title="adloader demo: live daemon")
    console.print(f"wrote {out / 'live.json'} and {out / 'live-timeline.png'}\n")
    ns = argparse_namespace(which="static", profile=args.profile, model=None, seed=args.seed,
                            cores=None, window=30.0, realloc_cost=LIVE_RESIZE_S,
                            json=str(out / "static.json"), plot=str(out / "static-timeline.png"))
    return _bench(ns)


def argparse_namespace(**kw):
    import argparse

    return argparse.Namespace(**kw)


def _common(p, trace_flags=True) -> None:
    p.add_argument("--profile", default=env_default("profile", "paper"),
                   help="bundled profile name or a profile JSON (adloader profile)")
    p.add_argument("--model", default=env_default("model"),
                   help="a fitted TPM JSON; default: fit one from the profile's noisy samples")
    p.add_argument("--seed", type=int, default=int(env_default("seed", 0)))
    p.add_argument("--cores", type=int, default=env_default("cores"),
                   help="loading workers of the node (default: the profile's)")
    p.add_argument("--window", type=float, default=float(env_default("window", 30.0)),
                   help="arrival and completion buffer windows, seconds (paper: 30)")
    p.add_argument("--realloc-cost", type=float,
                   default=float(env_default("realloc_cost", LIVE_RESIZE_S)),
                   help="seconds a resized job stalls (default: adloader's live resize, "
                        f"{LIVE_RESIZE_S} s; the paper's pause-and-retrieve: 16)")
    p.add_argument("--json", default=env_default("json"), help="write the result as JSON")
    p.add_argument("--plot", default=env_default("plot"), help="write the timeline PNG")


def register(sub) -> None:
    p = sub.add_parser("sim", help="simulate a trace on one node under a policy")
    p.add_argument("trace", help="trace JSON or bundled name (paper-static, paper-dynamic)")
    p.add_argument("--policy", default=env_default("policy", DEFAULT_POLICY),
                   choices=sorted(POLICIES))
    p.add_argument("--no-realloc", action="store_true",
                   help="running jobs keep their workers; new ones get what is free")
    _common(p)
    p.set_defaults(func=_sim)
    p = sub.add_parser("bench", help="benchmarks with ratios against a same-run baseline")
    p.add_argument("which", choices=("static", "dynamic", "tpm", "allocation", *cli_bench.EXTRA))
    p.add_argument("--jobs", type=int, default=1000, help="allocation: jobs")
    p.add_argument("--capacity", type=int, default=1024, help="allocation: workers")
    _common(p)
    cli_bench.add_arguments(p)
    p.set_defaults(func=_bench)
    p = sub.add_parser("demo", help="a live daemon running real jobs, then the static mix "
                                    "under every policy in the simulator")
    p.add_argument("--capacity", type=int, default=4, help="live: the daemon's workers")
    p.add_argument("--profile", default=env_default("profile", "paper"))
    p.add_argument("--seed", type=int, default=int(env_default("seed", 0)))
    p.add_argument("-o", "--output", default=env_default("output", "adloader-demo"))
    p.set_defaults(func=_demo)
