"""Two nodes on one machine: a torchrun job over both, each node's part under its own
node's daemon; a second job on node 1 (bench/ops/multinode.py). Real daemons, real ranks."""

from __future__ import annotations

import pytest

pytest.importorskip("torch.distributed")

from adloader.bench.ops.multinode import run_two_nodes  # noqa: E402


def test_each_node_governs_its_own_part_and_the_stream_is_unchanged(tmp_path):
    live = run_two_nodes(tmp_path / "live")
    plain = run_two_nodes(tmp_path / "plain", plain=True)
    node0, node1 = live["events"]

    def of(events, kind, job):
        return [e for e in events if e["kind"] == kind and e["job"] == job]

    # each node's part registered with its own node's daemon, and only there
    assert of(node0, "attached", "ddp@0") and not of(node0, "attached", "ddp@1")
    assert of(node1, "attached", "ddp@1") and not of(node1, "attached", "ddp@0")
    # the parts share the launcher's name for the job (torchrun's --rdzv-id), on both nodes
    assert live["names"] == ["torchrun-bench-ddp", "torchrun-bench-ddp"]
    # node 1's daemon re-planned its part beside the second job; node 0's part kept its count
    other = of(node1, "attached", "other")[0]["id"]
    after = [e for e in of(node1, "resize", "ddp@1") if e["id"] > other]
    assert after and after[0]["data"]["workers"] < of(node1, "resize", "ddp@1")[0]["data"][
        "workers"]
    assert len({e["data"]["workers"] for e in of(node0, "resize", "ddp@0")}) == 1
    # the ranks of each node ran under their node's part
    assert {r: s["job"] for r, s in live["streams"].items()} == {0: "ddp@0", 1: "ddp@0",
                                                                 2: "ddp@1", 3: "ddp@1"}
    # worker counts never change which samples a rank reads
    for rank in range(4):
        assert live["streams"][rank]["seen"] == plain["streams"][rank]["seen"], rank
    everything = sorted(i for s in plain["streams"].values() for b in s["seen"][:30] for i in b)
    assert everything == list(range(960))  # epoch 0: the ranks together read every sample
