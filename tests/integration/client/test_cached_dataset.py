"""CachedDataset under a real ElasticDataLoader (forked workers): cache → staging → storage,
errors that surface instead of hanging, and the storage bench in quick mode."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from torch.utils.data import get_worker_info

from adloader.client.data.cache_store import SharedSampleCache
from adloader.client.data.cached_dataset import CachedDataset
from adloader.client.data.prefetch import Prefetcher
from adloader.client.data.storage import LocalDirectorySource, RemoteStorageSource, SampleReadError
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.online_cache import AccessPlan

SIZE = 24
DEADLINE_S = 10


def decode(data: bytes, index: int):
    """A stand-in for JPEG decoding that lets the test check every sample's bytes."""
    return torch.tensor([len(data), data[0]]), index


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "samples"
    root.mkdir()
    for i in range(SIZE):
        (root / f"{i:03d}.bin").write_bytes(bytes([i]) * (1500 + 37 * i))
    return LocalDirectorySource(root)


def make_loader(dataset, **kw) -> ElasticDataLoader:
    return ElasticDataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, seed=3,
                             timeout=DEADLINE_S, **kw)


def check(batch) -> list[int]:
    x, idx = batch
    for (n, first), i in zip(x.tolist(), idx.tolist(), strict=True):
        assert (n, first) == (1500 + 37 * i, i)
    return idx.tolist()


def test_workers_fill_one_shared_cache_in_the_first_epoch(source):
    dataset = CachedDataset(decode, source)
    loader = make_loader(dataset)
    plan = AccessPlan.from_loader(loader, 3)
    budget = SharedSampleCache.budget_for(SIZE, int(source.sizes().sum()) + SIZE * 1024, 1024)
    with SharedSampleCache(budget, SIZE, "belady", plan, block_bytes=1024) as cache:
        dataset.attach(cache)
        for e in range(3):
            seen = [i for batch in loader for i in check(batch)]
            assert seen == [i for b in loader.plan(e) for i in b]
        stats = cache.stats()
        assert [r["hit_ratio"] for r in stats] == [0.0, 1.0, 1.0]
        assert [r["storage"] for r in stats] == [SIZE, 0, 0]
        loader.close()


def test_the_prefetcher_stages_samples_before_the_workers_ask(source):
    remote = RemoteStorageSource(source, bandwidth_mb_s=50, latency_ms=20)
    dataset = CachedDataset(decode, remote)
    loader = make_loader(dataset)
    plan = AccessPlan.from_loader(loader, 1)
    cache = SharedSampleCache(256 << 10, SIZE, "lru", block_bytes=1024)
    prefetcher = Prefetcher(plan, remote, cache, staging_bytes=64 << 10, threads=4,
                            block_bytes=1024)
    dataset.attach(cache, prefetcher)
    prefetcher.start()
    try:
        seen = [i for batch in loader for i in check(batch)]
        assert sorted(seen) == list(range(SIZE))
        served = cache.stats()[0]
        assert served["staged"] >= SIZE // 2, served  # workers found (or awaited) them staged
        assert served["staged"] + served["storage"] == SIZE
        # a sample in flight is awaited, not read again (a starved prefetcher may lose a race)
        assert remote.link()["reads"] <= SIZE + 2
    finally:
        loader.close()
        prefetcher.close()
        cache.close()
    assert not any(t.name == "adloader-prefetch" for t in threading.enumerate())
    assert not os.path.exists(prefetcher.staging.arena.segment_path)
    remote.close()


def test_an_unreadable_sample_is_an_error_naming_it(source):
    os.unlink(source.path(5))
    dataset = CachedDataset(decode, source)
    loader = make_loader(dataset)
    with SharedSampleCache(256 << 10, SIZE) as cache:
        dataset.attach(cache)
        with pytest.raises(SampleReadError, match=r"sample 5: cannot read .*005\.bin"):
            for _ in loader:
                pass
        loader.close()


class DiesOnRead:
    """A source whose read of one sample kills the worker process (as an OOM kill would)."""

    def __init__(self, inner, fatal: int) -> None:
        self.inner, self.fatal = inner, fatal

    def __len__(self) -> int:
        return len(self.inner)

    def read(self, index: int) -> bytes:
        if index == self.fatal and get_worker_info() is not None:
            os._exit(9)
        return self.inner.read(index)


def test_a_worker_dying_mid_read_is_an_error_not_a_hang(source):
    dataset = CachedDataset(decode, DiesOnRead(source, fatal=7))
    loader = make_loader(dataset)
    with SharedSampleCache(256 << 10, SIZE) as cache:
        dataset.attach(cache)
        # torch reports the dead worker as "exited unexpectedly", or, when the pipe breaks
        # first, as a reset connection: an error either way, never a hang
        with pytest.raises((RuntimeError, ConnectionError)) as err:
            for _ in loader:
                pass
        assert isinstance(err.value, ConnectionError) or "exited unexpectedly" in str(err.value)
        loader.close()
        done = threading.Event()  # the cache is still usable: no lock left held
        threading.Thread(target=lambda: (cache.fetch(7, lambda i: (b"x", "storage")),
                                         done.set()), daemon=True).start()
        assert done.wait(DEADLINE_S)
