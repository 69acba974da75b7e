"""``adloader bench NAME``: every benchmark, each printing ratios against a baseline measured in
the same run. The scheduling ones run the simulator (``adloader.sim.experiments``); the others
run real parts (``adloader.bench``): live jobs under real daemons, the control plane at scale,
live resizes, caches, locality, storage, and the command line's own start-up."""

from __future__ import annotations

import argparse
import dataclasses

from adloader.errors import InputError

from . import _options, _output
from .bench_cluster import bench_cluster
from .bench_data import (  # the data-path benches
    bench_cache,
    bench_chunks,
    bench_epoch_order,
    bench_loaders,
    bench_locality,
    bench_node_cache,
    bench_resize,
    bench_shared_cache,
    bench_storage,
)
from .bench_multinode import bench_multinode


# -- the simulated ones -------------------------------------------------------------------
def static_benchmark(profile_name: str = "paper", seed: int = 0, json_path=None,
                     plot_path=None, window: float = 30.0, realloc_cost: float | None = None,
                     cores: int | None = None, model_path: str | None = None,
                     prediction_error: float = 0.0) -> int:
    """Fig. 3's static mix under every policy, with and without reallocation."""
    from adloader.sim import experiments
    from adloader.sim.simulator import LIVE_RESIZE_S
    from adloader.sim.trace import load_trace

    args = argparse.Namespace(profile=profile_name, seed=seed, model=model_path, cores=cores,
                              prediction_error=prediction_error,
                              window=window, realloc_cost=LIVE_RESIZE_S if realloc_cost is None
                              else realloc_cost)
    profile, model, config = _options.simulation_setup(args)
    out = _output.console()
    _intro(out, profile, config)
    runs = experiments.static(load_trace("paper-static", profile.gpus), profile, model, config)
    rows = [[r["policy"], "yes" if r["realloc"] else "no", f"{r['aggregate_throughput']:.0f}",
             f"{r['ratio']:.3f}", f"{r['makespan_s']:.0f}", f"{r['mean_jct_s']:.0f}",
             f"{r['gpu_idle_fraction']:.0%}", r["reallocations"],
             ",".join(str(j["workers_initial"]) for j in r["jobs"]),
             f"{r['worst_job_ratio']:.2f}", f"{r['makespan_ratio']:.2f}"]
            for r in sorted(runs, key=lambda r: r["ratio"])]
    out.print(_output.table("static mix (Fig. 3): Σ throughput against fixed balance",
                            ["policy", "reallocation", "Σ samples/s", "× balance",
                             "makespan s", "mean JCT s", "GPU idle", "reallocs",
                             "initial workers", "worst job × balance",
                             "makespan × balance"], rows, left=2))
    frontier = experiments.instant_frontier(load_trace("paper-static", profile.gpus), profile,
                                            model, config)
    out.print(_output.table("at t = 0, every allocation (oracle): the Pareto frontier of Σ T "
                            "against the worst job, both against balance",
                            ["workers per job", "Σ T × balance", "worst job × balance"],
                            [[",".join(str(v) for v in p["allocation"].values()),
                              f"{p['throughput_ratio']:.3f}", f"{p['worst_ratio']:.3f}"]
                             for p in frontier], left=1))
    ref = next(r for r in runs if r["policy"] == "balance" and not r["realloc"])
    limits = experiments.schedule_limits(load_trace("paper-static", profile.gpus), profile,
                                         model, ref, base=config)
    for line in limits_text(limits, "ground truth"):
        out.print(line)
    out.print(frontier_table(limits, "ground truth"))
    for r in runs:
        r["bounds"], r["schedule_lp"] = limits["bounds"], limits["schedule_lp"]
        r["frontier"] = limits["frontier"]
    shown = [r for r in runs if r["paper_setting"] and r["policy"] in ("balance", "waa",
                                                                        "optimal")]
    _output.save(json_path, runs)
    _output.plot(plot_path, shown, f"bench static, profile {profile.name}")
    return 0


def limits_text(limits: dict, truth: str) -> list[str]:
    """Two lines for ``experiments.schedule_limits``: the bounds, then the best schedule."""
    bound = limits["bounds"]
    ok = "no schedule meets it" if not bound["feasible"] else \
        f"at most {bound['sum_ub_ratio']:.3f}× balance's Σ"
    return [f"over every schedule (allocations free to change over time, {truth}): makespan ≥ "
            f"{bound['makespan_lb']:.0f} s = {bound['makespan_lb_ratio']:.3f}× balance's; with "
            f"every job ≥ {bound['alpha']:g}× its balance rate, {ok}",
            f"best schedule with every job ≥ {bound['alpha']:g}× its balance rate (LP over "
            f"completion orders, {truth}, switching free): " + "; ".join(
                ("jobs may pause: " if o["pause"] else "every job keeps a worker: ")
                + (f"Σ {o['sum_ratio']:.3f}× balance reached, ≤ {o['sum_upper_ratio']:.3f}×"
                   if o["feasible"] else "none")
                for o in limits["schedule_lp"])]


def frontier_table(limits: dict, truth: str):
    """``experiments.schedule_limits``'s frontier: at each floor on the worst job's ratio,
    the best schedule's Σ (reached, and the bound) and that schedule's makespan."""
    def cells(o: dict) -> list[str]:
        if not o["feasible"]:
            return ["none", "—"]
        return [f"{o['sum_ratio']:.3f} (≤ {o['sum_upper_ratio']:.3f})",
                f"{o['makespan_ratio']:.3f}"]

    rows = {}
    for o in limits["frontier"]:
        rows.setdefault(o["alpha"], {})[o["pause"]] = o
    return _output.table(
        f"the frontier over every schedule (LP, {truth}): Σ against the worst job's floor, "
        "both against balance",
        ["worst job ≥", "every job keeps a worker: Σ ×", "its makespan ×",
         "jobs may pause: Σ ×", "its makespan ×"],
        [[f"{a:g}×" if a > 0 else "none", *cells(r[False]), *cells(r[True])]
         for a, r in rows.items()], left=1)


def _intro(out, profile, config) -> None:
    out.print(f"profile {profile.name!r}: {profile.device or profile.description[:60]}; "
              f"{config.capacity or profile.loading_workers} loading workers, "
              f"reallocation cost {config.realloc_cost_s:g} s")


def bench_static(args) -> int:
    return static_benchmark(args.profile, args.seed, args.json, args.plot, args.window,
                            args.realloc_cost, args.cores, args.model, args.prediction_error)


def bench_dynamic(args) -> int:
    """Table III's dynamic trace: makespan against no reallocation."""
    from adloader.allocation import DEFAULT_POLICY
    from adloader.sim import experiments
    from adloader.sim.trace import load_trace

    profile, model, config = _options.simulation_setup(args)
    out = _output.console()
    _intro(out, profile, config)
    runs = experiments.dynamic(load_trace("paper-dynamic", profile.gpus), profile, model,
                               config)
    rows = [[r["policy"], "yes" if r["realloc"] else "no", f"{r['makespan_s']:.0f}",
             f"{r['ratio']:.3f}", f"{r['aggregate_throughput']:.0f}",
             f"{r['throughput_ratio']:.3f}", f"{r['mean_jct_s']:.0f}", r["reallocations"],
             f"{r['worst_job_ratio']:.2f}"]
            for r in runs]
    out.print(_output.table("dynamic trace (Table III): makespan against no reallocation",
                            ["policy", "reallocation", "makespan s", "× no-realloc",
                             "Σ samples/s", "× no-realloc ", "mean JCT s", "reallocs",
                             "worst job × balance"], rows, left=2))
    lb = experiments.dynamic_bound(load_trace("paper-dynamic", profile.gpus), profile, model,
                                   config)
    start = min(j["start_s"] for j in runs[0]["jobs"])  # the arrival buffer: every policy's
    lb_span = lb["makespan_lb"] - start
    out.print(f"  bound over every schedule (jobs arriving as traced, allocations free): the "
              f"last job ends ≥ {lb['makespan_lb']:.1f} s after the first arrival; measured as "
              f"above (from the first start, {start:g} s) makespan ≥ {lb_span:.1f} s = "
              f"{lb_span / runs[0]['makespan_s']:.3f}× no-realloc (binding: {lb['binding']}; "
              f"the node loads ≤ {lb['node_rate_max']:.0f} samples/s)")
    slow = [r for policy in (DEFAULT_POLICY, "optimal") for r in experiments.correction_runs(
        load_trace("paper-dynamic", profile.gpus), profile, model, "app4", 2.0, policy, config)]
    out.print(_output.table("app4 (VGG13) steps 2× slower than any prediction: online "
                            "correction of its B·F_μ (a step sample every 2 s)",
                            ["policy", "case", "makespan s", "mean JCT s", "app4 JCT s",
                             "first re-plan after start"],
                            [[r["policy"], r["case"], f"{r['makespan_s']:.1f}",
                              f"{r['mean_jct_s']:.1f}", f"{r['job_jct_s']:.1f}",
                              "—" if r["corrected_after_s"] is None else
                              f"{r['corrected_after_s']:g} s"] for r in slow], left=2))
    _output.save(args.json, runs)
    shown = [runs[0], next(r for r in runs if r["policy"] == DEFAULT_POLICY)]
    _output.plot(args.plot, shown, f"bench dynamic, profile {profile.name}")
    return 0


def bench_tpm(args) -> int:
    """The TPM fitted from the profile's noisy samples: Table I's held-out R²."""
    profile, model, config = _options.simulation_setup(args)
    out = _output.console()
    _intro(out, profile, config)
    out.print(_output.score_table(model))
    out.print(_output.describe(model))
    return 0


def bench_allocation(args) -> int:
    """Allocation speed of every policy on many jobs, against ``optimal`` in the same run."""
    from adloader.sim import experiments

    rows = experiments.allocation_timing(1000 if args.jobs is None else args.jobs,
                                         args.capacity)
    out = [[r["policy"], r["case"], f"{r['median_ms']:.3f}", f"{r['time_ratio']:.3f}",
            r["workers"], f"{r['throughput']:.0f}", f"{r['throughput_ratio']:.4f}"]
           for r in rows]
    _output.console().print(_output.table(
        "allocation time, medians (baseline: optimal on the same case)",
        ["policy", "case", "median ms", "× optimal time", "workers", "Σ T samples/s",
         "Σ T × optimal"], out, left=2))
    _output.save(args.json, rows)
    return 0


MIXES_JOBS = 8  # jobs per held-out mix: Table III's count, `adloader workload generate`'s


def bench_mixes(args) -> int:
    """Held-out random mixes from the generator: every policy against no reallocation and
    against balance on each mix; medians and min–max over mixes."""
    from adloader.sim import experiments

    jobs = MIXES_JOBS if args.jobs is None else args.jobs
    profile, model, config = _options.simulation_setup(args)
    out = _output.console()
    _intro(out, profile, config)
    result = experiments.random_mixes(profile, model, config, args.mixes, args.seed, jobs,
                                      args.rate)
    seeds = result["seeds"]
    out.print(f"{len(seeds)} held-out mixes, generator seeds {seeds[0]}–{seeds[-1]} (tests use "
              f"0–11; nothing was tuned on generated traces): {jobs} jobs each, mix "
              f"{result['mix']}, Poisson arrivals at {args.rate:.4g}/s, {profile.gpus} GPUs; "
              f"{result['simulations']} simulations in {result['seconds']:.1f} s")

    def cell(row, key):
        v = row[key]
        return f"{v['median']:.3f} ({v['min']:.2f}–{v['max']:.2f})"

    rows = [[r["policy"] if r["realloc"] else "no realloc",
             *(cell(r, k) for k in experiments.MIX_METRICS),
             f"{r['every_job_kept']}/{r['mixes']}"] for r in result["rows"]]
    out.print(_output.table("held-out random mixes, median (min–max) over mixes; baselines "
                            "from the same mix: no realloc (requested workers kept) and "
                            "balance (with reallocation, as every policy here)",
                            ["policy", "makespan × no-realloc", "makespan × balance",
                             "mean JCT × balance", "Σ T × balance", "worst job × balance",
                             f"every job ≥ {result['alpha']:g}× balance"], rows))
    _output.save(args.json, result)
    return 0


# -- the real ones ------------------------------------------------------------------------
def _policies(text: str) -> tuple[str, ...]:
    """``a,b,c`` as policy names, each checked (a clear error names an unknown one)."""
    from adloader.allocation import get_policy

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--policies: name at least one policy")
    for name in names:
        try:
            get_policy(name)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def bench_live(args) -> int:
    """The static mix as real jobs under a real daemon, one run per policy."""
    from adloader.bench.live import LiveConfig, run_live_bench

    console = _output.console()
    cfg = LiveConfig()
    if args.quick:
        cfg = LiveConfig(policies=("balance", "optimal"), iterations_scale=0.03, rounds=1)
    if args.workers is not None and len(args.workers) != 1:
        raise InputError("bench live: --workers takes one count")
    given = {"rounds": args.rounds, "iterations_scale": args.iterations_scale,
             "policies": getattr(args, "policies", None),
             "crop": args.crop, "capacity": args.workers and args.workers[0]}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    if cfg.rounds < 1 or cfg.iterations_scale <= 0 or cfg.crop < 0 or cfg.capacity < 0:
        raise InputError("bench live: --rounds must be >= 1, --iterations-scale > 0, "
                         "--crop and --workers >= 0")
    result = run_live_bench(cfg, progress=lambda m: console.print(f"  {m}"))
    summary = result["summary"]
    rows = [[r["policy"], f"{r['aggregate_throughput']:.1f}", f"{r['paired_ratio']:.3f}",
             f"{r['spread'][0]:.2f}–{r['spread'][1]:.2f}", f"{r['makespan_s']:.1f}",
             f"{r['makespan_paired']:.3f}", f"{r['jct_paired']:.3f}", f"{r['worst_job']:.3f}",
             f"{r['reallocations']:g}", f"{len(r['met'])}/4"] for r in summary]
    console.print(_output.table(
        f"static mix as real jobs here ({result['mode']}): {result['capacity']} workers, "
        f"iterations × {cfg.iterations_scale:g}; medians of {cfg.rounds} rounds, "
        "ratios paired with balance's run of the same round",
        ["policy", "Σ samples/s", "Σ × balance", "spread", "makespan s", "makespan ×",
         "mean JCT ×", "worst job ×", "reallocs", "targets"], rows))
    names = list(summary[0]["jobs"])
    console.print(_output.table(
        "each job's rate against its rate under balance (median over rounds)",
        ["policy", *names],
        [[r["policy"], *(f"{r['jobs'].get(n, float('nan')):.3f}" for n in names)]
         for r in summary]))
    console.print("targets (issue \"Fair and fast\"): Σ ≥ 1.30×, makespan ≤ 0.90×, mean JCT "
                  "≤ 0.85×, every job ≥ 0.95×; spread: min–max of Σ × balance over rounds")
    truth = "this node's measured profile as the truth, against balance simulated on it"
    for line in limits_text(result["limits"], truth):
        console.print(line)
    console.print(frontier_table(result["limits"], "measured profile"))
    _output.save(args.json, result)
    last = {r["policy"]: r for r in result["runs"]}  # the last round of each policy
    _output.plot(args.plot, list(last.values()), "bench live (real jobs)")
    return 0


def bench_api(args) -> int:
    """The control plane at scale: REST latency per read endpoint, daemon RSS and CPU, with N
    masters heartbeating at 1 Hz (a row per N), against the idle daemon of the same run."""
    from adloader.bench.api import READS, run_api_bench

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
    from adloader.bench.startup import run_startup_bench

    result = run_startup_bench(rounds=5 if args.quick else 15)
    rows = [[r["command"], f"{r['median_ms']:.0f}", f"{r['ratio']:.1f}",
             ", ".join(r["heavy"]) or "none"] for r in result["rows"]]
    out = _output.console()
    out.print(_output.table(f"start-up, median of {result['rounds']} runs (baseline: "
                            f"`python -c 'import argparse'`, {result['baseline_ms']:.0f} ms)",
                            ["command", "ms", "× baseline", "heavy modules loaded"], rows))
    _output.save(args.json, result)
    return 0


BENCHMARKS = {
    "static": (bench_static, "the static mix (Fig. 3), every policy, simulated"),
    "dynamic": (bench_dynamic, "the dynamic trace (Table III), simulated"),
    "tpm": (bench_tpm, "the TPM's held-out R² (Table I)"),
    "allocation": (bench_allocation, "allocation speed of every policy"),
    "mixes": (bench_mixes, "held-out random mixes from the generator, every policy, simulated"),
    "live": (bench_live, "the static mix as real jobs under real daemons"),
    "api": (bench_api, "REST latency, daemon memory and CPU with N heartbeating masters"),
    "resize": (bench_resize, "live resizes and per-batch cost against torch's DataLoader"),
    "cache": (bench_cache, "cache policies against Belady's MIN"),
    "epoch-order": (bench_epoch_order, "SOLAR's epoch order: reads saved per cache policy"),
    "chunks": (bench_chunks, "SOLAR's aggregated chunk loading on a cold HDF5 file"),
    "shared-cache": (bench_shared_cache, "jobs sharing one node cache, arbitrated, against "
                                         "multi-job MIN (simulated)"),
    "node-cache": (bench_node_cache, "three real jobs, two on one dataset: no cache, private "
                                     "caches, the daemon's shared node cache"),
    "cluster": (bench_cluster, "placement on a simulated cluster of adloader nodes: spread, "
                               "bin-packing, loading-aware"),
    "multinode": (bench_multinode, "a torchrun job over two nodes, each node's part under its "
                                   "own daemon (two daemons on this machine)"),
    "locality": (bench_locality, "locality-aware batches, simulated and on gloo ranks"),
    "storage": (bench_storage, "epoch time over slow storage with the node's RAM cache"),
    "startup": (bench_startup, "the command line's start-up time"),
    "loaders": (bench_loaders, "ElasticDataLoader beside torch, torchdata and SPDL loaders"),
}


def _bench(args) -> int:
    return BENCHMARKS[args.which][0](args)


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks with ratios against a same-run baseline",
                       description="\n".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("which", choices=list(BENCHMARKS), metavar="NAME",
                   help=", ".join(BENCHMARKS))
    p.add_argument("--quick", action="store_true", help="small settings (seconds)")
    _options.sim_options(p)
    _options.output_options(p)
    p.add_argument("--jobs", type=int, default=None,
                   help=f"allocation: jobs (default 1000); mixes: jobs per mix (default "
                        f"{MIXES_JOBS})")
    p.add_argument("--mixes", type=int, default=10, help="mixes: random mixes (default 10)")
    p.add_argument("--rate", type=float, default=1 / 60,
                   help="mixes: Poisson arrivals per second (default one a minute)")
    p.add_argument("--capacity", type=int, default=1024, help="allocation: workers")
    p.add_argument("--masters", default="200,1000",
                   help="api: simulated masters, a row per count (default 200,1000)")
    p.add_argument("--rounds", type=int, default=None,
                   help="live: rounds of every policy (default 4); loaders: rounds (default 5); "
                        "node-cache: rounds (default 2)")
    p.add_argument("--iterations-scale", dest="iterations_scale", type=float, default=None,
                   help="live: the trace's iterations × this (default 0.2)")
    p.add_argument("--crop", type=int, default=None,
                   help="live: image crop (default 224 with CUDA, 112 emulated); loaders: "
                        "crop (default 224)")
    p.add_argument("--workers", type=_options.counts, default=None,
                   help="live: the daemon's workers (default: cores with CUDA, else 3 ×); "
                        "loaders: worker counts, a row each (default 1,2,4)")
    p.add_argument("--policies", type=_policies, default=None,
                   help="live: policies to run, comma-separated (default balance,waa,optimal,"
                        "fair,jct,ftf)")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="cache: ranks on the node (default: all of them)")
    p.add_argument("--max-imbalance", dest="max_imbalance", type=float, default=1.1,
                   help="locality: how far the bounded mode may grow a local batch (× b, "
                        "default 1.1)")
    p.set_defaults(func=_bench)
