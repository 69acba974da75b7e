"""A step's ranks on their nodes, from torchrun's variables or, where they are absent,
Slurm's (``srun -n N`` tasks), so that a node's ranks are one job registered by its first."""

from __future__ import annotations

import pytest

from adloader.client.master.node_ranks import _rank_world, topology

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
SLURM = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
         "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


@pytest.fixture
def environ(monkeypatch):
    for key in (*TORCHRUN, *SLURM):
        monkeypatch.delenv(key, raising=False)

    def put(**values):
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        rank, world = _rank_world()
        return (rank, world), topology(rank, world)

    return put


def test_nothing_said_is_one_rank_on_one_node(environ):
    assert environ() == ((0, 1), (0, 1, 0, 1))


@pytest.mark.parametrize(("tasks", "procid", "localid", "nodeid", "expect"), [
    ("2(x2)", "3", "1", "1", (1, 2, 1, 2)),  # 4 tasks, 2 a node: the 2nd node's 2nd rank
    ("4", "2", "2", "0", (2, 4, 0, 1)),  # one node, 4 tasks
    ("2,2", "1", "1", "0", (1, 2, 0, 2)),
    ("3,1", "1", "1", "0", (1, 4, 0, 1)),  # uneven: one node holding every rank, as before
])
def test_srun_tasks_are_placed_as_torchruns_ranks(environ, tasks, procid, localid, nodeid,
                                                  expect):
    world = str(sum(int(t.split("(")[0]) * (int(t.split("x")[1][:-1]) if "x" in t else 1)
                    for t in tasks.split(",")))
    got = environ(SLURM_PROCID=procid, SLURM_NTASKS=world, SLURM_LOCALID=localid,
                  SLURM_NODEID=nodeid, SLURM_TASKS_PER_NODE=tasks)
    assert got == ((int(procid), int(world)), expect)


def test_torchruns_variables_win_over_slurms(environ):
    got = environ(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                  SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0",
                  SLURM_TASKS_PER_NODE="1")
    assert got == ((1, 2), (1, 2, 0, 1))
