"""``adloader bench NAME``: every benchmark, each printing ratios against a baseline measured in
the same run. The scheduling ones run the simulator (``adloader.sim.experiments``); the others
run real parts (``adloader.bench``): live jobs under real daemons, the control plane at scale,
live resizes, caches, locality, storage, and the command line's own start-up."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses

from rich.progress import Progress

from adloader.errors import InputError

from . import _options, _output


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
    shown = [r for r in runs if r["paper_setting"] and r["policy"] in ("balance", "waa",
                                                                        "optimal")]
    _output.save(json_path, runs)
    _output.plot(plot_path, shown, f"bench static, profile {profile.name}")
    return 0


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

    rows = experiments.allocation_timing(args.jobs, args.capacity)
    out = [[r["policy"], r["case"], f"{r['median_ms']:.3f}", f"{r['time_ratio']:.3f}",
            r["workers"], f"{r['throughput']:.0f}", f"{r['throughput_ratio']:.4f}"]
           for r in rows]
    _output.console().print(_output.table(
        "allocation time, medians (baseline: optimal on the same case)",
        ["policy", "case", "median ms", "× optimal time", "workers", "Σ T samples/s",
         "Σ T × optimal"], out, left=2))
    _output.save(args.json, rows)
    return 0


# -- the real ones ------------------------------------------------------------------------
@contextlib.contextmanager
def _phases(console, label: str):
    """A transient progress bar; yields ``tick(phase, done, total)`` for the benchmark."""
    with Progress(transient=True, console=console) as progress:
        task = progress.add_task(label, total=None)

        def tick(phase, done, total):
            progress.update(task, description=f"{label}: {phase}", completed=done, total=total)

        yield tick


def bench_resize(args) -> int:
    """ElasticDataLoader: live resizes (stall, lost, repeated) and per-batch overhead."""
    from adloader.bench.resize import run_resize_bench

    console = _output.console()
    with _phases(console, "bench resize") as tick:
        result = run_resize_bench(quick=args.quick, progress=tick)
    rows = [[r["handover"], r["resizes"], "yes" if r["in_order"] else "NO", r["lost"],
             r["repeated"], f"{r['stall_median_ms']:.1f}", f"{r['stall_p95_ms']:.1f}",
             f"{r['interval_stall_median_ms']:.1f}"] for r in result["resize"]]
    console.print(_output.table("live resizes (paper: pause and relaunch, 16 s a round)",
                         ["handover", "resizes", "order kept", "lost", "repeated",
                          "stall median ms", "stall p95 ms", "stall to next resize ms"], rows))
    rows = [[r["dataset"], r["workers"], f"{r['torch_ms_per_batch']:.3f}",
             f"{r['elastic_ms_per_batch']:.3f}", f"{r['ratio']:.3f}",
             f"{r['paired_ratio']:.3f}"] for r in result["overhead"]]
    console.print(_output.table("per-batch cost against torch.utils.data.DataLoader (same run, "
                         "medians)", ["dataset", "workers", "torch ms/batch", "elastic ms/batch",
                                      "× torch", "× torch, paired"], rows))
    s, k = result["stream"], result["kill"]
    console.print(_output.table("a ShardedStream resized, workers killed (SIGKILL from outside)",
                                ["row", "events", "samples", "lost", "repeated", "notes"], [
        ["stream resized", s["resizes"], s["samples"], s["lost"], s["repeated"],
         f"{s['samples_per_s']} samples/s"],
        [f"worker killed ({k['workers']} workers)", k["kills"], "", k["lost"], k["repeated"],
         f"respawn stall {k['respawn_stall_ms_median']} ms median; torch: "
         f"{k['torch_samples_lost']} samples lost ({k['torch_error']})"]]))
    rows = [[m["loader"], m["workers"], m["uss_mib_per_worker"], f"{m['ratio']:.3f}"]
            for m in result["memory"]]
    console.print(_output.table("memory per worker, a dataset of 10^6 paths (USS after reading "
                                "a fifth)", ["loader", "workers", "MiB", "× torch"], rows))
    _output.save(args.json, result)
    return 0


def bench_cache(args) -> int:
    """Cache policies on an ImageNet-sized access stream: hit ratio and ratio to Belady."""
    from adloader.bench.cache import run_cache_bench

    console = _output.console()
    kw = {"quick": args.quick}
    if args.ranks_per_node:
        kw["ranks_per_node"] = args.ranks_per_node
    with Progress(transient=True, console=console) as progress:
        task = progress.add_task("bench cache", total=None)
        rows_seen = []

        def tick(row):
            rows_seen.append(row)
            progress.update(task, description=f"bench cache: {row['policy']} at "
                                              f"{row['fraction']:.0%}")

        rows = run_cache_bench(progress=tick, **kw)
    out = [[f"{r['fraction']:.0%}", r["policy"], f"{r['hit_ratio']:.4f}",
            f"{r['hit_ratio_after_first']:.4f}", f"{r['ratio_to_belady_after_first']:.3f}",
            "" if r["expected"] is None else f"{r['expected']:.4f}", f"{r['seconds']:.1f}"]
           for r in rows]
    console.print(_output.table(f"cache hit ratio, {rows[0]['accesses']:,} accesses",
                         ["cache", "policy", "hit ratio", "epochs ≥ 2", "× Belady (≥ 2)",
                          "LRU expected", "seconds"], out))
    _output.save(args.json, rows)
    return 0


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
             "crop": args.crop, "capacity": args.workers and args.workers[0]}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    if cfg.rounds < 1 or cfg.iterations_scale <= 0 or cfg.crop < 0 or cfg.capacity < 0:
        raise InputError("bench live: --rounds must be >= 1, --iterations-scale > 0, "
                         "--crop and --workers >= 0")
    result = run_live_bench(cfg, progress=lambda m: console.print(f"  {m}"))
    rows = [[r["policy"], f"{r['aggregate_throughput']:.1f}", f"{r['ratio']:.3f}",
             f"{r['paired_ratio']:.3f}", f"{r['makespan_s']:.1f}", f"{r['mean_jct_s']:.1f}",
             f"{r['reallocations']:g}", " / ".join(f"{x:.0f}" for x in r["each"])]
            for r in result["summary"]]
    console.print(_output.table(
        f"static mix as real jobs here ({result['mode']}): {result['capacity']} workers, "
        f"iterations × {cfg.iterations_scale:g}; medians of {cfg.rounds} rounds",
        ["policy", "Σ samples/s", "× balance", "× balance, paired", "makespan s", "mean JCT s",
         "reallocs", "each round"], rows))
    console.print("paired: the median over rounds of the ratio to balance in the same round")
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


def bench_locality(args) -> int:
    """Locality-aware assembly: share of samples fetched from another rank or storage after
    the first epoch and transfers per step, simulated for p = 4..256 and on real gloo ranks."""
    from adloader.bench.locality import run_gloo_locality_bench, run_locality_bench

    console = _output.console()
    with console.status("bench locality: simulated ranks"):
        rows = run_locality_bench(quick=args.quick)
    out = [[r["p"], r["mode"], f"{r['remote_share_mean']:.2%}", f"{r['remote_share_median']:.2%}",
            f"{r['remote_share_p95']:.2%}", f"{r['transfers_mean']:.1f}",
            f"{r['transfers_max']} / {r['transfer_bound']}", r["largest_local_batch"]]
           for r in rows]
    console.print(_output.table(f"simulated: local batch {rows[0]['local_batch']}, epochs ≥ 2 "
                         f"(paper: 3.4 % median)",
                         ["p", "mode", "fetched mean", "median", "p95", "transfers/step",
                          "max / p−1", "largest local batch"], out))
    with console.status("bench locality: real gloo ranks"):
        real = run_gloo_locality_bench(world_size=2 if args.quick else 4,
                                       steps_per_epoch=4 if args.quick else 10)
    out = [[r["p"], r["mode"], f"{r['remote_share']:.2%}",
            f"{r['transfers_mean']:.1f}", f"{r['transfers_max']} / {r['transfer_bound']}"]
           for r in real]
    console.print(_output.table("real gloo ranks on this machine (epochs ≥ 2)",
                         ["ranks", "mode", "fetched", "transfers/step", "max / p−1"], out))
    _output.save(args.json, {"simulated": rows, "gloo": real})
    return 0


def bench_storage(args) -> int:
    """Epoch times over slow shared storage, with and without the node's RAM cache."""
    from adloader.bench.storage import run_storage_bench

    console = _output.console()
    with console.status("bench storage: real loader processes over a slow shared link"):
        result = run_storage_bench(quick=args.quick)
    cfg, un, ca = result["config"], result["uncached"], result["cached"]
    rows = [[e + 1, f"{un['epoch_s'][e]:.2f}", f"{ca['epoch_s'][e]:.2f}",
             f"{result['speedup_per_epoch'][e]:.2f}", f"{ca['hit_ratio'][e]:.3f}",
             un["storage_reads"][e], ca["storage_reads"][e]] for e in range(len(un["epoch_s"]))]
    console.print(_output.table(
        f"epoch time over {cfg.get('bandwidth_mb_s', '?')} MB/s shared storage, policy "
        f"{cfg.get('policy', '?')}, RAM cache {cfg.get('cache_fraction', 0):.0%} of the data",
        ["epoch", "no cache s", "cache s", "× faster", "hit ratio", "reads (no cache)",
         "reads (cache)"], rows))
    mem = result["memory"]
    console.print(f"epochs ≥ 2: {result['later_epoch_speedup']:.2f}× faster (target "
                  f"{result['target']:g}×); RAM tier resident {mem['resident_bytes']:,} B of a "
                  f"{mem['budget_bytes']:,} B budget (psutil), within budget: "
                  f"{mem['within_budget']}")
    _output.save(args.json, result)
    return 0


def bench_loaders(args) -> int:
    """torch's DataLoader, torchdata's StatefulDataLoader, SPDL's pipeline (threads, processes)
    and ElasticDataLoader on one JPEG workload: samples/s and CPU per sample, per worker count."""
    from adloader.bench.loaders import loaders_table, run_loaders_bench

    console = _output.console()
    with _phases(console, "bench loaders") as tick:
        result = run_loaders_bench(workers=args.workers, rounds=args.rounds, crop=args.crop,
                                   quick=args.quick, progress=tick)
    title, columns, rows = loaders_table(result)
    console.print(_output.table(title, columns, rows, left=2))
    cfg = result["config"]
    console.print(f"load average {cfg['load_before'][0]:.2f} before, {cfg['load_after'][0]:.2f} "
                  f"after; paired: the median over rounds of the ratio to torch in that round")
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
    "live": (bench_live, "the static mix as real jobs under real daemons"),
    "api": (bench_api, "REST latency, daemon memory and CPU with N heartbeating masters"),
    "resize": (bench_resize, "live resizes and per-batch cost against torch's DataLoader"),
    "cache": (bench_cache, "cache policies against Belady's MIN"),
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
    p.add_argument("--jobs", type=int, default=1000, help="allocation: jobs")
    p.add_argument("--capacity", type=int, default=1024, help="allocation: workers")
    p.add_argument("--masters", default="200,1000",
                   help="api: simulated masters, a row per count (default 200,1000)")
    p.add_argument("--rounds", type=int, default=None,
                   help="live: rounds of every policy (default 3); loaders: rounds (default 5)")
    p.add_argument("--iterations-scale", dest="iterations_scale", type=float, default=None,
                   help="live: the trace's iterations × this (default 0.2)")
    p.add_argument("--crop", type=int, default=None,
                   help="live: image crop (default 224 with CUDA, 112 emulated); loaders: "
                        "crop (default 224)")
    p.add_argument("--workers", type=_options.counts, default=None,
                   help="live: the daemon's workers (default: cores with CUDA, else 3 ×); "
                        "loaders: worker counts, a row each (default 1,2,4)")
    p.add_argument("--ranks-per-node", type=int, default=None,
                   help="cache: ranks on the node (default: all of them)")
    p.set_defaults(func=_bench)
