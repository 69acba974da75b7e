"""``adloader bench`` for the data path: live resizes, caches, epoch order, locality,
storage and loaders — each against a baseline measured in the same run."""

from __future__ import annotations

import contextlib

from rich.progress import Progress

from adloader.cli import _output
from adloader.errors import InputError


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
    from adloader.bench.live.resize import run_resize_bench

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
    from adloader.bench.data.cache import run_cache_bench

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


def bench_locality(args) -> int:
    """Locality-aware assembly: share of samples fetched from another rank or storage after
    the first epoch and transfers per step, simulated for p = 4..256 and on real gloo ranks."""
    from adloader.bench.data.locality_bench import run_gloo_locality_bench, run_locality_bench

    console = _output.console()
    with console.status("bench locality: simulated ranks"):
        rows = run_locality_bench(quick=args.quick, max_imbalance=args.max_imbalance)
    out = [[r["p"], r["mode"], f"{r['remote_share_mean']:.2%}", f"{r['remote_share_median']:.2%}",
            f"{r['remote_share_p95']:.2%}", f"{r['transfers_mean']:.1f}",
            f"{r['transfers_max']} / {r['transfer_bound']}",
            f"{r['largest_local_batch']} ({r['largest_ratio']:.3f}×)"] for r in rows]
    console.print(_output.table(f"simulated: local batch {rows[0]['local_batch']}, epochs ≥ 2 "
                         f"(paper: 3.4 % median)",
                         ["p", "mode", "fetched mean", "median", "p95", "transfers/step",
                          "max / p−1", "largest local batch (× b)"], out))
    with console.status("bench locality: real gloo ranks"):
        real = run_gloo_locality_bench(world_size=2 if args.quick else 4,
                                       steps_per_epoch=4 if args.quick else 10,
                                       max_imbalance=args.max_imbalance)
    out = [[r["p"], r["mode"], f"{r['remote_share']:.2%}",
            f"{r['transfers_mean']:.1f}", f"{r['transfers_max']} / {r['transfer_bound']}",
            f"{r['largest_local_batch']} ({r['largest_ratio']:.3f}×)"] for r in real]
    console.print(_output.table("real gloo ranks on this machine (epochs ≥ 2)",
                         ["ranks", "mode", "fetched", "transfers/step", "max / p−1",
                          "largest local batch (× b)"], out))
    console.print(f"bounded: a local batch may grow to {args.max_imbalance:g} × b before a "
                  "sample is moved (--max-imbalance)")
    _output.save(args.json, {"simulated": rows, "gloo": real})
    return 0


def bench_storage(args) -> int:
    """Epoch times over slow shared storage, with and without the node's RAM cache."""
    from adloader.bench.data.storage_bench import run_storage_bench

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
    from adloader.bench.data.loaders import loaders_table, run_loaders_bench

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


def bench_epoch_order(args) -> int:
    """SOLAR's epoch order: storage reads and hit ratios of LRU, Lobster, NoPFS and Belady
    with the epochs visited in order, in the eq. 1 order, and in the exact-LRU order."""
    from adloader.bench.data.epoch_order_bench import run_epoch_order_bench

    console = _output.console()
    with console.status("bench epoch-order"):
        result = run_epoch_order_bench(quick=args.quick)
    cfg = result["config"]
    plans = {(p["fraction"], p["order"]): p for p in result["orders"]}
    out = []
    for r in result["rows"]:
        plan = plans.get((r["fraction"], r["order"]), {})
        bound = f"{plan['gap']:.2%}" if plan.get("bound") and r["order"] != "sequential" else ""
        out.append([f"{r['fraction']:.0%}", r["order"], r["policy"], f"{r['misses']:,}",
                    f"{r['hit_ratio']:.4f}", f"{r['reads_saved']:.4f}", f"{r['hits_gain']:+.1%}",
                    f"{r['vs_no_buffer']:.2f}", bound])
    console.print(_output.table(
        f"epoch order: {cfg['size']:,} samples × {cfg['epochs']} epochs, {cfg['world_size']} "
        "reader(s); ratios against the sequential order of the same run",
        ["cache", "order", "policy", "storage reads", "hit ratio", "reads × fewer",
         "hits gain", "× fewer than no buffer", "gap to bound"], out))
    console.print("solar: the paper's eq. 1 weight; solar-lru: exact LRU hits (never adds a "
                  "miss). Either changes which shuffle an epoch number reads: opt in.")
    _output.save(args.json, result)
    return 0


def bench_chunks(args) -> int:
    """SOLAR's aggregated chunk loading on a cold HDF5 file: read patterns, then a mini-batch
    workload per-sample against aggregated, through torch's DataLoader and ours."""
    try:
        import h5py  # noqa: F401
    except ImportError:
        raise InputError("bench chunks needs h5py: pip install 'adloader[bench]'") from None
    from adloader.bench.data.chunks import run_chunks_bench

    console = _output.console()
    with console.status("bench chunks: writing and reading an HDF5 file cold"):
        result = run_chunks_bench(quick=args.quick)
    cfg, cache = result["config"], result["cache"]
    console.print(_output.table(
        f"read patterns, {cfg['file_mb']:g} MB file read cold (paper Table 3: 1 / 7.65 / 21.15 "
        "/ 203×)", ["pattern", "MB/s", "× random"],
        [[r["pattern"], f"{r['mb_s']:.1f}", f"{r['speedup']:.2f}"] for r in result["patterns"]]))
    console.print(_output.table(
        f"mini-batches of {cfg['batch_size']}, {cfg['workers']} workers, medians of "
        f"{cfg['rounds']} rounds; ratio: paired with torch per-sample of the same order",
        ["order", "loader", "samples/s", "× torch per-sample"],
        [[r["order"], r["loader"], f"{r['samples_per_s']:.0f}", f"{r['ratio']:.3f}"]
         for r in result["loaders"]]))
    console.print(f"threshold measured cold: gap {cfg['threshold']['max_gap']} rows, run ≤ "
                  f"{cfg['threshold']['max_run']} rows. The file's pages are dropped with "
                  f"posix_fadvise(DONTNEED) before each run: a region read {cache['cold_mb_s']:.0f}"
                  f" MB/s just after, {cache['warm_mb_s']:.0f} MB/s again"
                  f"{'' if cache['took_effect'] else ' (the drop did not take effect)'}. "
                  f"Batches identical across loaders: {all(result['identical'].values())}")
    _output.save(args.json, result)
    return 0


def bench_shared_cache(args) -> int:
    """Jobs sharing one node cache split among datasets by the arbiter, against private
    per-job caches and the multi-job Belady MIN on the merged stream (simulated)."""
    from adloader.bench.data.shared_cache_bench import run_shared_cache_bench, shared_cache_table

    console = _output.console()
    with console.status("bench shared-cache"):
        result = run_shared_cache_bench(quick=args.quick)
    console.print(_output.table(*shared_cache_table(result)))
    console.print(_output.table(
        "a job leaves halfway, unannounced: the split re-planned at its departure",
        ["cache", "leaves at", "split before", "split after", "first plan kept × MIN",
         "re-planned × MIN"],
        [[f"{r['fraction']:.0%}", f"{r['leaves']} t={r['at']:.0f}",
          " ".join(f"{k}:{v}" for k, v in r["split_before"].items()),
          " ".join(f"{k}:{v}" for k, v in r["split_after"].items()),
          f"{r['kept_x_min']:.3f}", f"{r['replanned_x_min']:.3f}"]
         for r in result["come_and_go"]]))
    _output.save(args.json, result)
    return 0



TENSORSOCKET_NA = ("n/a: tensorsocket 0.0.5 here (CPU only): two consumers registered with "
                   "the producer (its heartbeat saw both) but received no batch in 20 s while "
                   "the producer ran its epochs alone; its model (one loader's batches, the "
                   "same order for every consumer) would apply to A and B only")


def bench_node_cache(args) -> int:
    """Three real jobs (two on one dataset) on one node: no cache, private caches, and the
    daemon's shared node cache, over one simulated storage link (same run, medians)."""
    from adloader.bench.data.node_cache_bench import JOBS, run_node_cache_bench

    console = _output.console()
    with _phases(console, "bench node-cache") as tick:
        result = run_node_cache_bench(quick=args.quick, rounds=args.rounds or 2, progress=tick)
    cfg = result["config"]
    names = [n for n, _, _ in JOBS]
    rows = [[r["mode"], f"{r['storage_mb']:.1f}", f"{r['storage_x_none']:.3f}",
             f"{r['storage_x_private']:.3f}", " / ".join(f"{r['reads'][n]:.0f}" for n in names),
             " / ".join(f"{r['epoch_s'][n]:.2f}" for n in names), f"{r['makespan_s']:.1f}",
             f"{r['makespan_x_none']:.3f}", f"{r['makespan_x_private']:.3f}"]
            for r in result["rows"]]
    console.print(_output.table(
        f"three jobs, A and B on X ({cfg['sizes']['X']} samples), C on Y "
        f"({cfg['sizes']['Y']}); {cfg['sample_bytes']} B samples over one "
        f"{cfg['bandwidth_mb_s']:g} MB/s link; node cache {cfg['cache_bytes'] / 2**20:.2f} MiB; "
        f"{cfg['epochs']} epochs; medians of {cfg['rounds']} rounds",
        ["row", "storage MB", "× no cache", "× private", "reads A / B / C",
         "epoch s A / B / C", "makespan s", "× no cache ", "× private "], rows))
    console.print(f"  tensorsocket: {TENSORSOCKET_NA}")
    if result["splits"]:
        console.print("  the daemon's splits (shared row, first round): " + "; ".join(
            " ".join(f"{k}={v / 2**20:.2f} MiB" for k, v in s["bytes"].items())
            for s in result["splits"]))
    _output.save(args.json, result)
    return 0
