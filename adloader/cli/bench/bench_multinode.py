"""``adloader bench multinode``: a two-node torchrun job, each node's part under its own
daemon, a second job arriving on node 1; both daemons' allocations over time."""

from __future__ import annotations

from adloader.cli import _output


def bench_multinode(args) -> int:
    """Two daemons on one machine as two nodes (bench/ops/multinode.py); the sample stream is
    compared with the same job run without daemons."""
    import tempfile
    from pathlib import Path

    from adloader.bench.ops.multinode import run_two_nodes

    out = _output.console()
    with tempfile.TemporaryDirectory(prefix="adloader-bench-multinode-") as tmp, \
            out.status("bench multinode: two daemons, one torchrun job over both"):
        live = run_two_nodes(Path(tmp) / "live")
        plain = run_two_nodes(Path(tmp) / "plain", plain=True)
    t0 = min(e["t"] for events in live["events"] for e in events)
    rows = []
    for node, events in enumerate(live["events"]):
        for e in events:
            if e["kind"] in ("attached", "plan", "finished"):
                what = (" ".join(f"{j}={w}" for j, w in sorted(e["data"]["workers"].items()))
                        if e["kind"] == "plan" else e["job"])
                rows.append([f"{e['t'] - t0:6.2f}", f"node {node}", e["kind"], what])
    rows.sort(key=lambda r: float(r[0]))
    out.print(_output.table("both daemons over time (workers per job part; ddp@n is the "
                            "torchrun job's part on node n)",
                            ["t s", "daemon", "event", "allocation / job"], rows, left=2))
    same = all(live["streams"][r]["seen"] == plain["streams"][r]["seen"] for r in range(4))
    out.print(f"  sample stream of every rank identical to the run without daemons: "
              f"{'yes' if same else 'NO'}")
    _output.save(args.json, {"events": live["events"], "same_stream": same})
    return 0 if same else 1
