"""The benchmarks of the live system and the data path, printed as tables:
`adloader bench resize|cache|live|api` (the scheduling ones are in cli_sim)."""

from __future__ import annotations

import dataclasses

from rich.progress import Progress
from rich.table import Table

from adloader.errors import InputError
from adloader.workloads.cli_model import wide_console
from adloader.workloads.files import write_json


def _save(args, data) -> None:
    if getattr(args, "json", None):
        write_json(args.json, data)


def _table(title: str, columns: list[str], rows: list[list]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[str(x) for x in row])
    return table


def bench_resize(args) -> int:
    """ElasticDataLoader: live resizes (stall, lost, repeated) and per-batch overhead."""
    from adloader.workloads.bench_resize import run_resize_bench

    console = wide_console()
    with Progress(transient=True, console=console) as progress:
        task = progress.add_task("bench resize", total=None)

        def tick(phase, done, total):
            progress.update(task, description=f"bench resize: {phase}", completed=done,
                            total=total)

        result = run_resize_bench(quick=args.quick, progress=tick)
    rows = [[r["handover"], r["resizes"], "yes" if r["in_order"] else "NO", r["lost"],
             r["repeated"], f"{r['stall_median_ms']:.1f}", f"{r['stall_p95_ms']:.1f}",
             f"{r['interval_stall_median_ms']:.1f}"] for r in result["resize"]]
    console.print(_table("live resizes (paper: pause and relaunch, 16 s a round)",
                         ["handover", "resizes", "order kept", "lost", "repeated",
                          "stall median ms", "stall p95 ms", "stall to next resize ms"], rows))
    rows = [[r["dataset"], r["workers"], f"{r['torch_ms_per_batch']:.3f}",
             f"{r['elastic_ms_per_batch']:.3f}", f"{r['ratio']:.3f}",
             f"{r['paired_ratio']:.3f}"] for r in result["overhead"]]
    console.print(_table("per-batch cost against torch.utils.data.DataLoader (same run, "
                         "medians)", ["dataset", "workers", "torch ms/batch", "elastic ms/batch",
                                      "× torch", "× torch, paired"], rows))
    _save(args, result)
    return 0


def bench_cache(args) -> int:
    """Cache policies on an ImageNet-sized access stream: hit ratio and ratio to Belady."""
    from adloader.workloads.bench_cache import run_cache_bench

    console = wide_console()
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
    console.print(_table(f"cache hit ratio, {rows[0]['accesses']:,} accesses",
                         ["cache", "policy", "hit ratio", "epochs ≥ 2", "× Belady (≥ 2)",
                          "LRU expected", "seconds"], out))
    _save(args, rows)
    return 0


def bench_live(args) -> int:
    """The static mix as real jobs under a real daemon, one run per policy."""
    from adloader.workloads.bench_live import LiveConfig, run_live_bench
    from adloader.workloads.plot import plot_timelines

    console = wide_console()
    cfg = LiveConfig()
    if args.quick:
        cfg = LiveConfig(policies=("balance", "optimal"), iterations_scale=0.03, rounds=1)
    given = {"rounds": args.rounds, "iterations_scale": args.iterations_scale,
             "crop": args.crop, "capacity": args.workers}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    if cfg.rounds < 1 or cfg.iterations_scale <= 0 or cfg.crop < 0 or cfg.capacity < 0:
        raise InputError("bench live: --rounds must be >= 1, --iterations-scale > 0, "
                         "--crop and --workers >= 0")
    result = run_live_bench(cfg, progress=lambda m: console.print(f"  {m}"))
    rows = [[r["policy"], f"{r['aggregate_throughput']:.1f}", f"{r['ratio']:.3f}",
             f"{r['paired_ratio']:.3f}", f"{r['makespan_s']:.1f}", f"{r['mean_jct_s']:.1f}",
             f"{r['reallocations']:g}", " / ".join(f"{x:.0f}" for x in r["each"])]
            for r in result["summary"]]
    console.print(_table(
        f"static mix as real jobs here ({result['mode']}): {result['capacity']} workers, "
        f"iterations × {cfg.iterations_scale:g}; medians of {cfg.rounds} rounds",
        ["policy", "Σ samples/s", "× balance", "× balance, paired", "makespan s", "mean JCT s",
         "reallocs", "each round"], rows))
    console.print("paired: the median over rounds of the ratio to balance in the same round")
    _save(args, result)
    if args.plot:
        last = {r["policy"]: r for r in result["runs"]}  # the last round of each policy
        plot_timelines(list(last.values()), args.plot, title="bench live (real jobs)")
        console.print(f"wrote {args.plot}")
    return 0


def bench_api(args) -> int:
    """The control plane at scale: REST latency per read endpoint, daemon RSS and CPU, with N
    masters heartbeating at 1 Hz (a row per N), against the idle daemon of the same run."""
    from adloader.workloads.bench_api import READS, run_api_bench

    console = wide_console()
    counts = (30,) if args.quick else tuple(int(n) for n in str(args.masters).split(","))
    seconds = 6.0 if args.quick else 30.0
    with console.status(f"bench api: {', '.join(map(str, counts))} masters at 1 Hz"):
        result = run_api_bench(masters=counts, seconds=seconds)
    for row in result["rows"]:
        cells = [[path, f"{row['idle'][path]['p99_ms']:.1f}",
                  f"{row['loaded'][path]['p50_ms']:.1f}", f"{row['loaded'][path]['p99_ms']:.1f}",
                  f"{row['loaded'][path]['p99_ms'] / row['idle'][path]['p99_ms']:.2f}"]
                 for path in READS]
        console.print(_table(f"{row['registered']} masters at 1 Hz: daemon RSS "
                             f"{row['daemon_rss_mb']:.0f} MB, CPU {row['daemon_cpu_percent']:.0f} %"
                             f" of a core", ["GET", "idle p99 ms", "p50 ms", "p99 ms",
                                             "p99 × idle"], cells))
        lost = {k: v for k, v in row["counters"].items() if v}
        console.print(f"worst p99 {row['worst_p99_ms']:.1f} ms; counters {lost or 'all 0'}")
        deep = row["deep_submit"]
        worst = max(v["p99_ms"] for v in deep["latency"].values())
        console.print(f"while a Resnet600 job was submitted ({deep['count_s']:.1f} s to count "
                      f"its FLOPs, {deep['status']}): reads p99 ≤ {worst:.1f} ms")
    _save(args, result)
    return 0


def bench_locality(args) -> int:
    """Locality-aware assembly: share of samples fetched from another rank or storage after
    the first epoch and transfers per step, simulated for p = 4..256 and on real gloo ranks."""
    from adloader.workloads.bench_locality import run_gloo_locality_bench, run_locality_bench

    console = wide_console()
    with console.status("bench locality: simulated ranks"):
        rows = run_locality_bench(quick=args.quick)
    out = [[r["p"], r["mode"], f"{r['remote_share_mean']:.2%}", f"{r['remote_share_median']:.2%}",
            f"{r['remote_share_p95']:.2%}", f"{r['transfers_mean']:.1f}",
            f"{r['transfers_max']} / {r['transfer_bound']}", r["largest_local_batch"]]
           for r in rows]
    console.print(_table(f"simulated: local batch {rows[0]['local_batch']}, epochs ≥ 2 "
                         f"(paper: 3.4 % median)",
                         ["p", "mode", "fetched mean", "median", "p95", "transfers/step",
                          "max / p−1", "largest local batch"], out))
    with console.status("bench locality: real gloo ranks"):
        real = run_gloo_locality_bench(world_size=2 if args.quick else 4,
                                       steps_per_epoch=4 if args.quick else 10)
    out = [[r["p"], r["mode"], f"{r['remote_share']:.2%}",
            f"{r['transfers_mean']:.1f}", f"{r['transfers_max']} / {r['transfer_bound']}"]
           for r in real]
    console.print(_table("real gloo ranks on this machine (epochs ≥ 2)",
                         ["ranks", "mode", "fetched", "transfers/step", "max / p−1"], out))
    _save(args, {"simulated": rows, "gloo": real})
    return 0


def bench_storage(args) -> int:
    """Epoch times over slow shared storage, with and without the node's RAM cache."""
    from adloader.workloads.bench_storage import run_storage_bench

    console = wide_console()
    with console.status("bench storage: real loader processes over a slow shared link"):
        result = run_storage_bench(quick=args.quick)
    cfg, un, ca = result["config"], result["uncached"], result["cached"]
    rows = [[e + 1, f"{un['epoch_s'][e]:.2f}", f"{ca['epoch_s'][e]:.2f}",
             f"{result['speedup_per_epoch'][e]:.2f}", f"{ca['hit_ratio'][e]:.3f}",
             un["storage_reads"][e], ca["storage_reads"][e]] for e in range(len(un["epoch_s"]))]
    console.print(_table(
        f"epoch time over {cfg.get('bandwidth_mb_s', '?')} MB/s shared storage, policy "
        f"{cfg.get('policy', '?')}, RAM cache {cfg.get('cache_fraction', 0):.0%} of the data",
        ["epoch", "no cache s", "cache s", "× faster", "hit ratio", "reads (no cache)",
         "reads (cache)"], rows))
    mem = result["memory"]
    console.print(f"epochs ≥ 2: {result['later_epoch_speedup']:.2f}× faster (target "
                  f"{result['target']:g}×); RAM tier resident {mem['resident_bytes']:,} B of a "
                  f"{mem['budget_bytes']:,} B budget (psutil), within budget: "
                  f"{mem['within_budget']}")
    _save(args, result)
    return 0


EXTRA = {"resize": bench_resize, "live": bench_live, "api": bench_api, "cache": bench_cache,
         "storage": bench_storage, "locality": bench_locality}


def add_arguments(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="small settings (seconds)")
    parser.add_argument("--masters", default="200,1000",
                        help="api: simulated masters, a row per count (default 200,1000)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="live: rounds of every policy (default 3)")
    parser.add_argument("--iterations-scale", dest="iterations_scale", type=float,
                        default=None, help="live: the trace's iterations × this (default 0.2)")
    parser.add_argument("--crop", type=int, default=None,
                        help="live: image crop (default 224 with CUDA, 112 emulated)")
    parser.add_argument("--workers", type=int, default=None,
                        help="live: the daemon's workers (default: cores with CUDA, else 3 ×)")
    parser.add_argument("--ranks-per-node", type=int, default=None,
                        help="cache: ranks on the node (default: all of them)")
