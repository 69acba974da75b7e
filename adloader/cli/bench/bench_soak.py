"""``adloader bench soak``: a daemon through N jobs (``adloader.bench.ops.soak``), its figures
and whether the targets of retention and paging hold."""

from __future__ import annotations

import argparse

from adloader.cli import _output


def soak_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=None,
                   help="jobs to register, heartbeat and finish (default 50000; --quick 600)")


def bench_soak(args) -> int:
    from adloader.bench.ops.soak import P99_BUDGET_MS, RSS_BUDGET_MB, run_soak_bench

    console = _output.console()
    with console.status("bench soak: jobs registering, heartbeating and finishing"):
        row = run_soak_bench(jobs=args.jobs, quick=args.quick)
    cells = [[path, f"{v['idle_p99_ms']:.1f}", str(v["requests"]), f"{v['p50_ms']:.1f}",
              f"{v['p99_ms']:.1f}", f"{v['max_ms']:.1f}"] for path, v in row["latency"].items()]
    console.print(_output.table(
        f"{row['jobs']} jobs in {row['played_s']:.0f} s ({row['jobs_per_s']:.0f}/s), "
        f"{row['live_jobs']} live throughout: read latency (idle: before any job)",
        ["GET", "idle p99 ms", "requests", "p50 ms", "p99 ms", "max ms"], cells))
    mb = 2**20
    console.print(f"daemon RSS {row['rss_mb_prior_model']:.1f} MB at {row['first']} jobs with "
                  f"the prior model, {row['rss_mb_at_first']:.1f} MB with the online one; "
                  f"{row['rss_mb_at_last']:.1f} MB at {row['jobs']} "
                  f"({row['rss_growth_mb']:+.1f} MB; budget {RSS_BUDGET_MB:g})")
    console.print("  on the way: " + ", ".join(
        f"{c['jobs']}: {c['rss_mb']:.0f} MB" + (" (scikit-learn loaded)" if c["sklearn"] else "")
        for c in row["rss_curve"]))
    console.print(f"store {row['store_bytes_at_first'] / mb:.1f} MB at {row['first']} jobs, "
                  f"{row['store_bytes_at_last'] / mb:.1f} MB at {row['jobs']}; kept "
                  f"{row['kept']} (retain {row['retain_jobs']} ended), pruned "
                  f"{row['pruned_jobs']}; pages listed {row['paged_ids']} jobs")
    for name, ok in row["checks"].items():
        console.print(f"  {'ok  ' if ok else 'MISS'} {name.replace('_', ' ')}"
                      + (f" (p99 ≤ {P99_BUDGET_MS:g} ms)" if name.startswith("p99") else ""))
    for failure in row["read_failures"]:
        console.print(f"  read failed: {failure}")
    _output.save(args.json, row)
    return 0 if row["meets_targets"] else 1
