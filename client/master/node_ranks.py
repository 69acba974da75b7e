"""A multi-node job's ranks, node by node: a daemon per node, a master per node.

torchrun gives each rank ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``GROUP_RANK`` (its node),
global ranks node by node (node n holds ranks n·L … n·L + L − 1). Local rank 0 of each node is
that node's master: it registers the node's part (``job@node``) with its own node's daemon
(each agent's ``ADLOADER_ENDPOINT``), and the node's ranks split the node's share among
themselves. ``NodeGroup`` is the node's ranks as a ``torch.distributed`` group (every rank
makes every node's group, as ``new_group`` requires), for the broadcast of the node's
commands and the all-gather of the ranks' miss loads. Worker counts never change which
samples a rank reads: the sample stream is the loader's, whatever the daemons decide.
"""

from __future__ import annotations

import os
import re
import sys


def _dist():
    """``torch.distributed`` when it is initialised, else None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available():
        return None
    return dist if dist.is_initialized() else None


def _rank_world() -> tuple[int, int]:
    dist = _dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    env = _launcher_env()
    try:
        return int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
    except ValueError:
        return 0, 1


def _slurm_per_node(tasks: str) -> str | None:
    """Tasks per node from ``SLURM_TASKS_PER_NODE`` (``2(x3)``, ``4``, ``2,2``) when every
    node has the same count, else None."""
    counts = set()
    for part in tasks.split(","):
        found = re.fullmatch(r"(\d+)(?:\(x\d+\))?", part.strip())
        if found is None:
            return None
        counts.add(found.group(1))
    return counts.pop() if len(counts) == 1 else None


def _launcher_env() -> dict[str, str]:
    """torchrun's rank variables; where they are absent, Slurm's for a step's tasks
    (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, the tasks per node,
    ``SLURM_NODEID``), so that ``srun -n N`` ranks are placed as torchrun's would be."""
    env = os.environ
    if "RANK" in env or "LOCAL_RANK" in env or "SLURM_PROCID" not in env:
        return dict(env)
    per = env.get("SLURM_NTASKS_PER_NODE") or _slurm_per_node(env.get("SLURM_TASKS_PER_NODE",
                                                                       ""))
    out = {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env.get("SLURM_NTASKS", "1"),
           "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
           "GROUP_RANK": env.get("SLURM_NODEID", "0")}
    if per:
        out["LOCAL_WORLD_SIZE"] = per
    return out


def topology(rank: int, world: int) -> tuple[int, int, int, int]:
    """(local rank, ranks on this node, node, nodes) from torchrun's variables (or Slurm's
    for a step's tasks); one node holding every rank when they are absent or inconsistent."""
    env = _launcher_env()
    try:
        local = int(env["LOCAL_RANK"])
        per = int(env["LOCAL_WORLD_SIZE"])
        node = int(env.get("GROUP_RANK", rank // max(per, 1)))
    except (KeyError, ValueError):
        return rank, world, 0, 1
    if per < 1 or world % per or not 0 <= local < per or rank != node * per + local:
        return rank, world, 0, 1
    return local, per, node, world // per


def part_id(job: str, node: int, nodes: int) -> str:
    """The node's part of a multi-node job: ``job@node`` (the job's own id on one node)."""
    if nodes <= 1 or "@" in job:
        return job
    return f"{job}@{node}"


class NodeGroup:
    """This node's ranks as a process group (made by every rank at the same point)."""

    def __init__(self, dist, rank: int, per_node: int, nodes: int) -> None:
        groups = [dist.new_group(list(range(n * per_node, (n + 1) * per_node)))
                  for n in range(nodes)]
        self.dist, self.group = dist, groups[rank // per_node]
        self.src = rank // per_node * per_node  # the node's master, as a global rank
        self.size = per_node

    def broadcast(self, obj):
        box = [obj]
        self.dist.broadcast_object_list(box, src=self.src, group=self.group)
        return box[0]

    def all_gather(self, value) -> list:
        out = [None] * self.size
        self.dist.all_gather_object(out, value, group=self.group)
        return out
