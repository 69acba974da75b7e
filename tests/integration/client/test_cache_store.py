"""SharedSampleCache: one shared copy across forked workers, the budget as the OS measures it,
the same decisions as ``adloader.datapath.eviction.evaluate``, bad inputs, dead lock holders,
cleanup."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading

import numpy as np
import pytest

from adloader.client.data.cache_store import SharedSampleCache
from adloader.datapath.access_stream import access_stream, node_sequence
from adloader.datapath.cache_policies import evaluate
from adloader.datapath.online_cache import AccessPlan
from adloader.errors import InputError
from adloader.host.shm_arena import DIRTY, FREE_TOP

CTX = multiprocessing.get_context("fork")
DEADLINE_S = 10


def blob(i: int, n: int = 3000) -> bytes:
    return bytes((i + k) % 251 for k in range(n))


def storage(i: int) -> tuple[bytes, str]:
    return blob(i), "storage"


def no_storage(i: int):
    raise AssertionError(f"sample {i} should have been a hit")


def run_child(target, *args) -> int:
    p = CTX.Process(target=target, args=args)
    p.start()
    p.join(DEADLINE_S)
    assert not p.is_alive(), "child hung"
    return p.exitcode


def test_a_sample_put_by_one_worker_is_a_hit_in_another():
    with SharedSampleCache(1 << 20, 50) as cache:
        def put():
            assert cache.fetch(7, storage) == blob(7)

        def get():
            os._exit(0 if cache.fetch(7, no_storage) == blob(7) else 3)

        assert run_child(put) == 0
        assert run_child(get) == 0  # a hit (no_storage would have raised)
        assert cache.fetch(7, no_storage) == blob(7)
        served = {r["epoch"]: (r["storage"], r["ram"]) for r in cache.stats()}
        assert served == {0: (1, 0), 1: (0, 1), 2: (0, 1)}  # k-th read counts for epoch k


def test_the_ram_tier_never_exceeds_its_budget_as_measured():
    budget = 200_000
    rng = np.random.default_rng(0)
    with SharedSampleCache(budget, 400, "lru", block_bytes=1024) as cache:
        def fill():
            for i in range(400):
                cache.fetch(i, lambda j: (blob(j, int(rng.integers(500, 9000))), "storage"))
            os._exit(0)

        assert run_child(fill) == 0
        m = cache.memory([os.getpid()])
        assert m["segment_bytes"] <= budget
        assert m["resident_bytes"] <= budget
        assert 0 < m["rss_max_bytes"] <= budget and m["pss_sum_bytes"] <= budget
        use = cache.usage()
        assert use["stored"] > 10 and use["stored_bytes"] <= use["data_bytes"] <= budget


@pytest.mark.parametrize("policy", ["lru", "belady", "nopfs", "lobster", "lobster-lazy"])
def test_decisions_match_the_simulator(policy):
    """Rank 1 of 2 (ragged last batches), equal-size samples, room for C: the same hit at every
    access. Lobster looks up one iteration ahead of use here (prefetch=0): the loader hands a
    worker one local batch at a time."""
    size, capacity, bb, gb = 60, 9, 4096, 8  # a block of a page: the budget gives exactly C
    stream = access_stream(5, 4, size, gb, world_size=2)
    plan = AccessPlan.from_stream(stream, rank=1)
    seq = node_sequence(stream, ranks=[1])
    budget = SharedSampleCache.budget_for(size, capacity * bb, bb, plan.epochs)
    kw = {"prefetch": 0} if policy.startswith("lobster") else {}
    ref = evaluate(policy, seq, capacity, **kw)
    with SharedSampleCache(budget, size, policy, plan, block_bytes=bb,
                           sample_bytes=[bb] * size) as cache:
        assert cache.arena.blocks == capacity
        hit = []
        cuts = np.flatnonzero(np.diff(seq.step)) + 1  # one local batch per iteration
        for batch in np.split(seq.samples, cuts):
            batch = batch.tolist()
            loaded = set()

            def load(i, loaded=loaded):
                loaded.add(i)
                return bytes(bb), "storage"

            cache.fetch_many(batch, load)
            hit += [i not in loaded for i in batch]
        assert np.array_equal(np.array(hit), ref.hit)
        assert sum(r["ram"] for r in cache.stats()) == ref.hits


def test_bad_policies_and_plans():
    with pytest.raises(InputError, match="unknown cache policy 'mru'"):
        SharedSampleCache(1 << 20, 10, "mru")
    with pytest.raises(InputError, match="needs the access plan"):
        SharedSampleCache(1 << 20, 10, "belady")
    plan = AccessPlan([np.arange(10)], 10)
    with pytest.raises(InputError, match="sample_bytes"):
        SharedSampleCache(1 << 20, 10, "nopfs", plan)
    with pytest.raises(InputError, match="covers 10 samples"):
        SharedSampleCache(1 << 20, 11, "belady", plan)


def test_budget_larger_than_free_memory_is_refused():
    import psutil

    too_much = psutil.virtual_memory().available + (1 << 30)
    with pytest.raises(InputError, match="more than the free memory"):
        SharedSampleCache(too_much, 10)
    with pytest.raises(InputError, match="cannot hold the index of 100000 samples"):
        SharedSampleCache(4096, 100_000)


def test_disk_tier_folder_is_created_or_refused(tmp_path):
    target = tmp_path / "a" / "b"
    with SharedSampleCache(64 << 10, 10, disk_dir=target, disk_budget_bytes=1 << 20):
        assert target.is_dir()
    assert not target.exists()  # created by the cache, removed with it
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="cannot create or write"):
        SharedSampleCache(64 << 10, 10, disk_dir=tmp_path / "file" / "sub",
                          disk_budget_bytes=1 << 20)
    with pytest.raises(InputError, match="disk_budget_bytes must be > 0"):
        SharedSampleCache(64 << 10, 10, disk_dir=tmp_path / "d")


def test_disk_tier_takes_what_ram_evicts_within_its_budget(tmp_path):
    disk = tmp_path / "tier"
    disk.mkdir()
    budget = SharedSampleCache.budget_for(40, 4 * 3072, 1024)
    with SharedSampleCache(budget, 40, "lru", disk_dir=disk, disk_budget_bytes=5 * 3000,
                           block_bytes=1024) as cache:
        for i in range(12):
            cache.fetch(i, storage)
        assert cache.usage()["stored"] == 4  # RAM: the 4 most recent
        files = sorted(p.name for p in disk.iterdir())
        assert len(files) == 5 and all(f.endswith(".smp") for f in files)  # no temp files
        assert cache.usage()["disk_bytes"] == 5 * 3000
        assert cache.fetch(6, no_storage) == blob(6)  # evicted from RAM, on disk
        assert cache.stats()[-1]["disk"] == 1
    assert list(disk.iterdir()) == []  # the folder was there before: only our files go


def test_a_holder_that_dies_mid_write_neither_hangs_nor_corrupts():
    with SharedSampleCache(1 << 20, 50, "lru", block_bytes=1024) as cache:
        for i in range(5):
            cache.fetch(i, storage)
        ar = cache.arena

        def die_holding_the_lock():
            with ar.locked():
                ar.header[DIRTY] = 1
                ar.header[FREE_TOP] -= 7  # blocks taken, never published
                os._exit(1)

        assert run_child(die_holding_the_lock) == 1
        done = threading.Event()
        threading.Thread(target=lambda: (cache.fetch(2, no_storage), done.set()),
                         daemon=True).start()
        assert done.wait(DEADLINE_S), "the lock of a dead holder was never released"
        per_sample = ar.blocks_for(3000)
        assert ar.header[DIRTY] == 0 and ar.stored == 5
        assert ar.free_blocks == ar.blocks - 5 * per_sample  # the leaked blocks came back


def test_close_unlinks_the_segment_and_attached_copies_do_not():
    cache = SharedSampleCache(1 << 20, 10)
    path = cache.arena.segment_path
    cache.fetch(3, storage)
    twin = pickle.loads(pickle.dumps(cache))  # attaches by name, as a spawned worker would
    assert twin.fetch(3, no_storage) == blob(3)
    assert run_child(lambda: (cache.close(), os._exit(0))) == 0  # a forked worker's close
    twin.close()
    assert os.path.exists(path)
    cache.close()
    assert not os.path.exists(path)
    cache.close()  # twice is fine
