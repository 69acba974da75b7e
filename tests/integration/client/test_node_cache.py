"""The node cache (client/data/node_cache.py): one segment per dataset, shared by the jobs that
read it, sized by the daemon's limit — with real processes attaching by name."""

from __future__ import annotations

import multiprocessing as mp
import os

import msgspec
import numpy as np
import pytest

from adloader.client.data.node_cache import NodeCache
from adloader.datapath.access_stream import access_stream
from adloader.datapath.online_cache import AccessPlan
from adloader.errors import InputError
from adloader.host.node_segment import create_segment

SIZE, BB = 200, 4096


def _plan(seed: int, epochs: int = 2) -> AccessPlan:
    return AccessPlan.from_stream(access_stream(seed, epochs, SIZE, 8))


def _blob(i: int) -> bytes:
    return bytes([i % 251]) * (BB - 16)  # one block each


def _load(reads):
    def load(i):
        reads.append(i)
        return _blob(i), "storage"
    return load


def _read_all(cache: NodeCache, plan: AccessPlan, reads: list) -> None:
    for i in plan.sequence.tolist():
        assert cache.fetch(int(i), _load(reads)) == _blob(int(i))


def test_a_sample_one_job_read_is_a_hit_for_another():
    seg = create_segment(SIZE * BB, SIZE, BB)  # room for the whole dataset
    try:
        a, b = NodeCache(seg.name, _plan(0)), NodeCache(seg.name, _plan(1))
        reads_a, reads_b = [], []
        _read_all(a, a.plan, reads_a)
        _read_all(b, b.plan, reads_b)
        assert len(reads_a) == SIZE  # A read each sample once from storage
        assert reads_b == []  # B found every sample A had put there
        assert a.stats()[0]["storage"] == SIZE and b.stats()[0]["ram"] == SIZE
        a.close()
        b.close()
        assert os.path.exists(seg.segment_path)  # a job never removes the daemon's segment
    finally:
        seg.close()
    assert not os.path.exists(seg.segment_path)


def test_the_limit_bounds_what_is_stored_and_gives_the_memory_back():
    seg = create_segment(SIZE * BB, SIZE, BB)
    try:
        job = NodeCache(seg.name, _plan(0))
        _read_all(job, job.plan, [])
        full = os.stat(seg.segment_path).st_blocks * 512
        with seg.locked():
            left = seg.set_limit(SIZE // 4)
        assert left >= SIZE - SIZE // 4
        assert seg.blocks - seg.free_blocks <= SIZE // 4
        shrunk = os.stat(seg.segment_path).st_blocks * 512
        assert full - shrunk >= (SIZE - SIZE // 4) * BB * 0.9  # pages went back to the OS
        reads = []
        _read_all(job, job.plan, reads)  # reads past the limit are served, not stored
        assert seg.blocks - seg.free_blocks <= SIZE // 4
        assert len(reads) > SIZE
        job.close()
    finally:
        seg.close()


def test_a_job_with_another_dataset_size_cannot_attach():
    seg = create_segment(SIZE * BB, SIZE + 1, BB)
    try:
        with pytest.raises(InputError, match="holds 201 samples"):
            NodeCache(seg.name, _plan(0))
    finally:
        seg.close()


def _job(name: str, seed: int, out) -> None:
    cache = NodeCache(name, _plan(seed))
    reads = []
    bad = sum(cache.fetch(int(i), _load(reads)) != _blob(int(i))
              for i in cache.plan.sequence.tolist())
    out.put((seed, bad, len(reads), cache.stats()))
    cache.close()


def test_jobs_in_their_own_processes_share_one_segment():
    seg = create_segment(SIZE * BB, SIZE, BB)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    try:
        procs = [ctx.Process(target=_job, args=(seg.name, s, out)) for s in (0, 1, 2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert all(bad == 0 for _, bad, _, _ in results)  # nobody read another's bytes
        storage = sum(n for _, _, n, _ in results)
        assert storage < 2 * SIZE  # three jobs, each alone would read 2 × 200 … 600 in all
        stored = int(np.count_nonzero(seg.first >= 0))
        assert stored == seg.stored <= SIZE
    finally:
        seg.close()


# -- through a real daemon: jobs that name one dataset share its segment -----------------
SHARED_JOB = """
import json, os, sys
import numpy as np
from adloader.client import attach
from adloader.client.data.cached_dataset import CachedDataset
from adloader.client.loader.loader import ElasticDataLoader
from adloader.client.data.storage import LocalDirectorySource

source = LocalDirectorySource(sys.argv[1])
dataset = CachedDataset(lambda raw, i: np.frombuffer(raw, dtype=np.uint8)[:4].copy(), source)
loader = ElasticDataLoader(dataset, batch_size=8, shuffle=True, seed=int(sys.argv[2]),
                           num_workers=1)
job = attach(loader, model="smResnet20", share_cache=sys.argv[3], epochs=2,
             connect_timeout_s=30)
assert dataset.cache is not None, "no node cache granted"
open(sys.argv[4] + ".ready", "w").close()
while not os.path.exists(sys.argv[4] + ".go"):  # the test says when to read
    pass
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        pass
storage = sum(r["storage"] for r in dataset.stats())
print(json.dumps({"storage": storage, "accesses": sum(r["accesses"] for r in dataset.stats()),
                  "segment": dataset.cache.name}), flush=True)
job.finish()
"""


def _files(folder, n):
    folder.mkdir()
    for i in range(n):
        (folder / f"{i:05d}.bin").write_bytes(bytes([i % 251]) * 3000)
    return folder


def test_jobs_on_one_dataset_share_the_daemons_segment_and_the_split_follows(tmp_path):
    from daemon_harness import Daemon, script, wait_for

    data = _files(tmp_path / "x", 120)
    other = _files(tmp_path / "y", 60)
    d = Daemon(tmp_path / "state", extra=("--node-cache-mb", "4")).start()
    cmd = script(tmp_path, "shared.py", SHARED_JOB)
    env = dict(os.environ, ADLOADER_ENDPOINT=d.endpoint)
    env.pop("ADLOADER_SUPERVISOR", None)
    procs = []
    try:
        for name, folder, seed in (("a", data, 0), ("c", other, 2), ("b", data, 1)):
            tag, splits = str(tmp_path / name), len(d.events("cache_split"))
            procs.append((name, tag, __import__("subprocess").Popen(
                [*cmd, str(folder), str(seed), "ds-" + folder.name, tag], env=env,
                stdout=__import__("subprocess").PIPE, stderr=__import__("subprocess").PIPE,
                text=True)))
            wait_for(lambda t=tag: os.path.exists(t + ".ready"), 60, f"job {name} to attach")
            if name != "b":  # a reads alone first; b comes after, on a's samples
                # the split made for it is in place first: one made while it reads could
                # let samples it just cached go, and they would be read again
                wait_for(lambda s=splits: len(d.events("cache_split")) > s, 30,
                         f"the split for job {name}")
                open(tag + ".go", "w").close()
                out = procs[-1][2].communicate(timeout=120)
                assert procs[-1][2].returncode == 0, out[1][-2000:]
                procs[-1] = (name, tag, out[0])
        open(procs[-1][1] + ".go", "w").close()
        out = procs[-1][2].communicate(timeout=120)
        assert procs[-1][2].returncode == 0, out[1][-2000:]
        import json

        res = {n: json.loads(o if isinstance(o, str) else out[0]) for n, _, o in procs[:2]}
        res["b"] = json.loads(out[0])
        assert res["a"]["segment"] == res["b"]["segment"] != res["c"]["segment"]
        assert res["a"]["storage"] == 120  # a filled it (room for both datasets)
        assert res["b"]["accesses"] == 240
        assert res["b"]["storage"] == 0, (res, d.events("cache_split"))  # b: all hits
        splits = wait_for(lambda: d.events("cache_split"), 30, "a split")
        assert any(set(s["data"]["bytes"]) == {"ds-x:120", "ds-y:60"} for s in splits)
        assert all(sum(s["data"]["bytes"].values()) <= 4 << 20 for s in splits)
    finally:
        for _, _, p in procs:
            if hasattr(p, "kill"):
                p.kill()
        d.stop()


def test_a_data_spec_s_unknown_field_is_dropped_never_used():
    """A path a job slips into its data spec (a field no release knows) is not refused since
    protocol 1 (a newer peer's fields are ignored), but never reaches the daemon: dropped,
    and counted."""
    import json

    from adloader.protocol import decode_from_job

    frame = {"type": "register", "job": "j", "token": "t",
             "data": {"dataset": "x", "size": 10, "sample_bytes": 10, "batch": 1, "path": "/"},
             "features": {"batch_size": 1, "flops_g": 1, "params_m": 1}}
    msg = decode_from_job(json.dumps(frame).encode())
    assert not hasattr(msg.data, "path") and "path" not in msgspec.structs.asdict(msg.data)
    assert msg.unknown_fields == 1


@pytest.mark.parametrize(("data", "field"), [
    ({"dataset": "x/../y", "size": 10, "sample_bytes": 10, "batch": 1}, "data.dataset"),
    ({"dataset": "x", "size": 0, "sample_bytes": 10, "batch": 1}, "data.size"),
    ({"dataset": "x", "size": 10, "sample_bytes": 2**40, "batch": 1}, "data.sample_bytes"),
])
def test_a_malformed_data_spec_is_refused_naming_the_field(data, field):
    import json

    from adloader.protocol import ProtocolError, decode_from_job

    frame = {"type": "register", "job": "j", "token": "t", "data": data,
             "features": {"batch_size": 1, "flops_g": 1, "params_m": 1}}
    with pytest.raises(ProtocolError, match=field.replace(".", r"\.")):
        decode_from_job(json.dumps(frame).encode())
