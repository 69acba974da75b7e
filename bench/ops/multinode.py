"""A two-node DDP job on one machine, each node's part under its own node's daemon.

``run_two_nodes`` starts two daemons (own state dirs, own sockets), then one
``torchrun --nnodes 2 --nproc-per-node 2`` job as two agents (``--node-rank 0/1``, static
rendezvous on 127.0.0.1), each agent's environment pointing at its node's daemon; once both
parts are registered (``job@0`` on node 0, ``job@1`` on node 1) a second, single-node job
arrives on node 1. The ranks hold at the start of their second epoch until node 1's daemon
has re-planned, then finish. Returns both daemons' events and every rank's sample stream;
``plain=True`` runs the same job with no daemon (the reference stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from adloader import env as names
from adloader import rest

RANK_SCRIPT = """
import json, os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader

out = sys.argv[1]
loader = ElasticDataLoader(list(range(960)), batch_size=8, shuffle=True, seed=5)
job = attach(loader, model="smResnet20", iterations=90)
seen, workers = [], []
for epoch in range(3):
    loader.set_epoch(epoch)
    if epoch == 1:
        while not os.path.exists(os.path.join(out, "go")):
            time.sleep(0.02)
    for batch in loader:
        seen.append([int(x) for x in batch])
        workers.append(job.workers)
        time.sleep(0.01)
json.dump({"seen": seen, "workers": workers, "job": job.job},
          open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w"))
job.finish()
dist.barrier()
dist.destroy_process_group()
"""

SECOND_JOB = """
import time
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
loader = ElasticDataLoader(list(range(100000)), batch_size=4)
job = attach(loader, model="Resnet18", iterations=100000)
for i, batch in enumerate(loader):
    time.sleep(0.02)
"""


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise TimeoutError(f"bench multinode: timed out waiting for {what}")


RUN_ID = "bench-ddp"  # torchrun's --rdzv-id: TORCHELASTIC_RUN_ID, the name both parts share


def _agents(script: Path, out: Path, port: int, endpoints: list[str | None]) -> list:
    procs = []
    for node, endpoint in enumerate(endpoints):
        env = {**os.environ, names.JOB: "ddp", "OMP_NUM_THREADS": "1"}
        for key in (names.ENDPOINT, names.SUPERVISOR, names.JOB_TOKEN):
            env.pop(key, None)
        if endpoint:
            env[names.ENDPOINT] = endpoint
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
             "--nproc-per-node", "2", "--node-rank", str(node), "--master-addr", "127.0.0.1",
             "--master-port", str(port), "--rdzv-id", RUN_ID, str(script), str(out)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    return procs


def _finish(procs, timeout: float = 300) -> None:
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"bench multinode: an agent failed: {err.strip()[-1500:]}")


def _streams(out: Path) -> dict[int, dict]:
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(4)}


def run_two_nodes(work: Path, plain: bool = False) -> dict:
    from adloader.remote.process import DaemonProcess, free_port

    work.mkdir(parents=True, exist_ok=True)
    script = work / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = work / "out"
    out.mkdir()
    if plain:
        (out / "go").touch()
        _finish(_agents(script, out, free_port(), [None, None]))
        return {"streams": _streams(out)}
    daemons = [DaemonProcess(work / f"node{n}", ["--capacity", "4", "--gpus", "2",
                                                  "--arrival-window", "0.3",
                                                  "--completion-window", "0.3",
                                                  "--heartbeat", "0.25"]).start()
               for n in range(2)]
    second = None
    procs: list = []
    try:
        def events(d, kind=None):
            got = d.http.get(rest.EVENTS, params={"limit": 5000}).json()
            return [e for e in got if kind is None or e["kind"] == kind]

        t0 = time.monotonic()
        procs = _agents(script, out, free_port(), [d.endpoint for d in daemons])
        for n, d in enumerate(daemons):
            _wait(lambda d=d, n=n: [e for e in events(d, "attached") if e["job"] == f"ddp@{n}"],
                  120, f"ddp@{n} to register with node {n}'s daemon")
        job2 = work / "second.py"
        job2.write_text(SECOND_JOB)
        env = {**os.environ, names.ENDPOINT: daemons[1].endpoint, names.JOB: "other"}
        env.pop(names.SUPERVISOR, None)
        arrived = time.monotonic() - t0
        second = subprocess.Popen([sys.executable, str(job2)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: [e for e in events(daemons[1], "resize") if e["job"] == "ddp@1"
                       and any(a["job"] == "other" for a in events(daemons[1], "attached"))
                       and e["id"] > max(a["id"] for a in events(daemons[1], "attached")
                                         if a["job"] == "other")],
              120, "node 1's daemon to re-plan ddp@1 beside the second job")
        (out / "go").touch()
        _finish(procs)
        return {"streams": _streams(out), "second_arrived_s": arrived, "t0": t0,
                "events": [events(d) for d in daemons],
                "names": [d.http.get(f"{rest.JOBS}/ddp@{n}").json()["name"]
                          for n, d in enumerate(daemons)]}
    finally:
        for p in [*procs, second]:
            if p is not None and p.poll() is None:
                p.kill()
        for d in daemons:
            d.stop()
