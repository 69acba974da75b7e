"""Batches collated into shared-memory segments the workers reuse (client/loader/batch_segments.py):
reused while the loop lets go of each batch, never written again while anything in the
trainer can read it, torch's own path wherever the batch is not the default collate's."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset

from adloader.client.loader import batch_segments
from adloader.client.loader.batch_segments import TAIL, SegmentCollate
from adloader.client.loader.loader import ElasticDataLoader

SHAPE = (3, 64, 64)  # float32: 48 KiB a sample, 3 MiB a batch of 64 (over MIN_BYTES)
BATCH = 64


class Filled(Dataset):
    """Sample i: an image filled with i, and i."""

    def __init__(self, batches: int = 30, cls=torch.Tensor) -> None:
        self.size, self.cls = batches * BATCH, cls

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        return torch.full(SHAPE, float(i)).as_subclass(self.cls), i


class Marked(torch.Tensor):
    pass


def from_segment(x: torch.Tensor) -> bool:
    """Does the batch fill one of a pool's segments (its storage carries the tail)?"""
    return x.untyped_storage().nbytes() == x.nbytes + TAIL * 8


def elastic(ds, **kw) -> ElasticDataLoader:
    kw.setdefault("num_workers", 2)
    if kw["num_workers"]:
        kw["multiprocessing_context"] = "fork"
    return ElasticDataLoader(ds, batch_size=BATCH, shuffle=False, **kw)


def test_a_loop_that_lets_go_of_each_batch_gets_them_all_from_reused_segments():
    seen = 0
    for b, (x, y) in enumerate(elastic(Filled(30))):
        assert torch.equal(x[:, 0, 0, 0], y.float()), b  # each batch is its own samples
        assert from_segment(x), b  # none fresh: each worker's few segments went round
        seen += 1
    assert seen == 30


def test_batches_a_user_keeps_are_never_written_again():
    kept = [(x.clone(), x) for x, _ in elastic(Filled(30))]
    assert len(kept) == 30
    for b, (copy, x) in enumerate(kept):
        assert torch.equal(copy, x), b  # a segment in use was not reused
        assert torch.equal(x[:, 0, 0, 0], torch.arange(b * BATCH, (b + 1) * BATCH).float())
    slots = SegmentCollate(2, 2 + 3).slots
    # each worker filled its own segments once, then every batch was a fresh one
    assert sum(from_segment(x) for _, x in kept) == 2 * slots


def test_a_worker_keeps_no_more_than_its_bytes(monkeypatch):
    monkeypatch.setattr(batch_segments, "RING_BYTES", 4 << 20)  # one 3 MiB batch; forked
    kept = [(x.clone(), x) for x, _ in elastic(Filled(10))]
    assert all(torch.equal(copy, x) for copy, x in kept)
    assert sum(from_segment(x) for _, x in kept) == 2  # one segment a worker, then fresh


def test_torch_s_own_path_where_the_batch_is_not_the_default_collate_s():
    # memory pinned (the copy is made in the trainer), a collate of the user's own, a
    # subclass of Tensor (its type kept), a batch too small to gain, no workers
    runs = [elastic(Filled(4), pin_memory=True),
            elastic(Filled(4), collate_fn=lambda b: torch.stack([x for x, _ in b])),
            elastic(Filled(4, Marked)),
            elastic(Filled(4), num_workers=0)]
    for run in runs:
        for batch in run:
            x = batch[0] if isinstance(batch, list) else batch
            assert not from_segment(x)
    assert all(type(x) is Marked for x, _ in elastic(Filled(2, Marked)))
    small = ElasticDataLoader(Filled(2), batch_size=2, num_workers=1)
    assert not any(from_segment(x) for x, _ in small)
    assert 2 * SHAPE[0] * SHAPE[1] * SHAPE[2] * 4 < batch_segments.MIN_BYTES


def test_the_trainer_gives_back_only_what_it_no_longer_holds():
    """The trainer's side alone: a segment named by its tail is given back once the last
    tensor on it is gone, not before; a tensor of another pool is not this pool's."""
    mine, other = SegmentCollate(1, 2), SegmentCollate(1, 2)
    storage = torch.UntypedStorage._new_shared(4096 + TAIL * 8)
    tail = torch.empty(0, dtype=torch.int64).set_(storage, 4096 // 8, (TAIL,))
    tail.copy_(torch.tensor([batch_segments.MAGIC, mine.token, 0, 1]))
    x = torch.empty(0).set_(storage, 0, (1024,))
    view = x[10:20]
    del tail, storage
    other.received([x])
    mine.received([x, 7])
    assert mine.release() == 0 and mine.free[0, 1] == 0  # still held
    del x
    assert mine.release() == 0  # a view of it still is
    del view
    assert mine.release() == 1 and mine.free[0, 1] == 1
    assert other.release() == 0 and other.free.sum() == 0


@pytest.mark.parametrize("workers", [1, 3])
def test_a_resize_mid_epoch_keeps_every_batch_s_samples(workers):
    run = elastic(Filled(20), num_workers=2)
    got = []
    for b, (x, y) in enumerate(run):
        if b == 5:
            run.resize(workers)
        assert torch.equal(x[:, 0, 0, 0], y.float())
        got.extend(y.tolist())
    assert got == list(range(20 * BATCH))


def test_segments_reach_a_spawned_worker():
    """Under ``spawn`` the collate goes to the worker pickled: its flags stay shared."""
    run = ElasticDataLoader(Filled(8), batch_size=BATCH, num_workers=1,
                            multiprocessing_context="spawn")
    marked = 0
    for b, (x, y) in enumerate(run):
        assert torch.equal(x[:, 0, 0, 0], y.float()), b
        marked += from_segment(x)
    assert marked == 8
