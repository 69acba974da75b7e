"""``adloader bench cluster``: placement on a simulated cluster, every node running adloader."""

from __future__ import annotations

from adloader.cli import _output

SIZES = (16, 128, 1024)
QUICK_SIZES = (4, 16)


def bench_cluster(args) -> int:
    """Kubernetes-like placement (spread, bin-packing) against loading-aware placement from
    the node summaries, at 16, 128 and 1,024 nodes (simulated; ratios against spread)."""
    from adloader.device import synth
    from adloader.device.device_profile import load_profile
    from adloader.sim.cluster import compare

    profile = load_profile(args.profile)
    model = synth.fitted_model(profile, args.seed)
    out = _output.console()
    rows, result = [], []
    with out.status("bench cluster"):
        for n in QUICK_SIZES if args.quick else SIZES:
            for r in compare(n, profile, model, seed=args.seed, jobs_per_node=8,
                             rate_per_node_s=1 / 150):
                result.append(r)
                rows.append([n, r["placement"], r["jobs"], r["multi_node_jobs"],
                             f"{r['makespan_s']:.0f}", f"{r['makespan_x_spread']:.3f}",
                             f"{r['mean_jct_s']:.0f}", f"{r['mean_jct_x_spread']:.3f}",
                             f"{r['gpu_idle_held']:.3f}", f"{r['gpu_idle']:.3f}",
                             f"{r['wall_s']:.2f}", f"{r['node_hours_per_s']:.0f}"])
    out.print(_output.table(
        f"cluster of N nodes × {profile.gpus} GPUs ({profile.name}), 8 jobs a node arriving "
        f"at one per 150 s a node, 10 % over 2 whole nodes; adloader's default policy "
        "on every node", ["nodes", "placement", "jobs", "multi-node", "makespan s",
                          "× spread", "mean JCT s", "× spread ", "GPU idle (held)",
                          "GPU idle (all)", "sim s", "node-h / s"], rows, left=2))
    _output.save(args.json, result)
    return 0
