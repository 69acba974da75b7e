"""ElasticDataLoader: same batches as torch's DataLoader, resizes that lose and repeat nothing."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from adloader.client.loader.elastic_sampler import BatchWindow, Lookahead
from adloader.client.loader.loader import BatchStats, ElasticDataLoader
from adloader.client.loader.torch_support import has_in_order
from adloader.datapath.sample_order import rank_order
from adloader.errors import InputError

CTX = "fork"


class Numbers(Dataset):
    """Sample i is (tensor([i]), i * 10); ``bad`` raises like a corrupt file would."""

    def __init__(self, size: int = 50, bad: int | None = None) -> None:
        self.size, self.bad = size, bad

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        if i == self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return torch.tensor([i]), i * 10


def indices(batches) -> list[int]:
    return [i for x, _ in batches for i in x.flatten().tolist()]


def loader(ds=None, **kw) -> ElasticDataLoader:
    kw.setdefault("batch_size", 4)
    if kw.get("num_workers"):
        kw.setdefault("multiprocessing_context", CTX)
    return ElasticDataLoader(ds if ds is not None else Numbers(), **kw)


def same(a, b) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(
        torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_torch(workers, drop_last):
    ds = Numbers(50)
    order = rank_order(7, 0, 50, shuffle=True).tolist()
    ref = DataLoader(ds, batch_size=4, sampler=order, num_workers=workers, drop_last=drop_last,
                     multiprocessing_context=CTX if workers else None)
    ours = loader(ds, shuffle=True, seed=7, num_workers=workers, drop_last=drop_last)
    assert len(ours) == len(ref) == (12 if drop_last else 13)
    assert same(ours, ref)
    plain = DataLoader(ds, batch_size=4, drop_last=drop_last)
    assert same(loader(ds, drop_last=drop_last), plain)


def test_given_sampler_and_batch_sampler_and_unbatched():
    ds = Numbers(30)
    sampler = list(reversed(range(30)))
    assert same(loader(ds, sampler=sampler, num_workers=1),
                DataLoader(ds, batch_size=4, sampler=sampler))
    bs = BatchSampler(SequentialSampler(ds), 7, drop_last=False)
    ours = ElasticDataLoader(ds, batch_sampler=bs, num_workers=0)
    assert same(ours, DataLoader(ds, batch_sampler=bs)) and len(ours) == 5
    single = ElasticDataLoader(ds, batch_size=None, shuffle=True, seed=1)
    order = rank_order(1, 0, 30).tolist()
    assert [int(x) for x, _ in single] == order


@pytest.mark.parametrize("handover", ["inplace", "drain", "restart", "serial"])
def test_resize_many_times_keeps_the_order(handover):
    ds = Numbers(96)
    ours = loader(ds, shuffle=True, seed=3, num_workers=1, handover=handover)
    seen, counts = [], []
    for k, (x, _) in enumerate(ours):
        seen += x.flatten().tolist()
        ours.resize([0, 2, 1, 3, 0, 1][k % 6])
        counts.append(ours.num_workers)
    assert seen == rank_order(3, 0, 96).tolist()
    assert set(counts) == {0, 1, 2, 3}
    assert ours.epoch == 1 and ours.consumed == 0


class WhoLoads(Dataset):
    """Sample i is (tensor([i]), tensor([pid of the process that loaded it]))."""

    def __len__(self) -> int:
        return 400  # > 12 batches + the 64 batches "drain" may read ahead

    def __getitem__(self, i: int):
        return torch.tensor([i]), torch.tensor([os.getpid()])


@pytest.mark.parametrize("handover", ["inplace", "drain", "restart", "serial"])
def test_resize_hands_the_batches_to_the_new_pool(handover):
    ours = loader(WhoLoads(), num_workers=2, handover=handover)
    it, main = iter(ours), os.getpid()

    def take(k: int) -> tuple[list[int], list[int]]:
        got = [next(it) for _ in range(k)] if k else list(it)
        return indices(got), [int(pid.flatten()[0]) for _, pid in got]  # one loader a batch

    seen, before = take(4)
    assert main not in before and len(set(before)) == 2
    ours.resize(0)
    got, after = take(8)
    seen += got
    old = 0 if handover not in ("drain", "inplace") else next(
        k for k, p in enumerate(after) if p == main)  # to no workers, "inplace" drains
    assert old <= 4 and set(after[:old]) <= set(before) and set(after[old:]) == {main}
    ours.resize(1)  # "drain" loads a few more batches here while the new worker starts
    got, last = take(0)
    seen += got
    ahead = next(k for k, p in enumerate(last) if p != main)
    assert ahead == 0 or handover in ("drain", "inplace")
    assert len(set(last[ahead:])) == 1 and not set(last[ahead:]) & {main, *before}
    assert seen == list(range(400))


@pytest.mark.skipif(not has_in_order(), reason="torch < 2.6: a resize starts a new pool")
def test_an_in_place_resize_keeps_the_running_workers_and_takes_a_retired_one_back():
    """2 → 3 workers: both keep loading and one process is forked; 3 → 1: the two retired
    deliver what they had, then only one process loads; 1 → 2: a retired (parked) worker
    loads again, no process forked. Every batch once, in order; the processes that ran
    are the pool's four at most... three."""
    ours = loader(WhoLoads(), num_workers=2)
    it = iter(ours)

    def take(k: int) -> tuple[list[int], list[int]]:
        got = [next(it) for _ in range(k)] if k else list(it)
        return indices(got), [int(pid.flatten()[0]) for _, pid in got]

    seen, first = take(6)
    two = set(first)
    assert len(two) == 2
    ours.resize(3)
    got, grown = take(12)
    seen += got
    assert two < set(grown) and len(set(grown)) == 3  # the two went on; one forked
    ours.resize(1)
    got, shrunk = take(12)
    seen += got
    one = set(shrunk[-6:])
    assert len(one) == 1 and one < set(grown)  # the retired delivered theirs, then one
    ours.resize(2)
    got, back = take(0)
    seen += got
    assert set(back[-6:]) <= set(grown) and len(set(back[-6:])) == 2  # a parked one, back
    assert seen == list(range(400))


def test_resize_from_another_thread():
    ds = Numbers(80)
    ours = loader(ds, shuffle=True, seed=5, num_workers=1)
    workers_seen: list[int] = []
    progressed, done = threading.Semaphore(0), threading.Event()

    def resizer():
        for n in [2, 0, 1, 2, 0, 3, 1, 0, 2]:
            progressed.acquire()  # one batch consumed since the last resize
            ours.resize(n)
        done.set()

    def hook(stats: BatchStats) -> None:
        workers_seen.append(stats.workers)
        progressed.release()

    ours.on_batch = hook
    thread = threading.Thread(target=resizer)
    thread.start()
    seen = indices(ours)
    thread.join(timeout=10)
    assert done.is_set()
    assert seen == rank_order(5, 0, 80).tolist()
    assert {0, 1, 2} <= set(workers_seen)


APP_LOCK = threading.Lock()  # a lock of the training script's (tempfile's, a library's)


class NeedsTheAppLock(Numbers):
    def __getitem__(self, i: int):
        with APP_LOCK:  # a forked worker inherits it as it was at the fork
            return super().__getitem__(i)


@pytest.mark.parametrize("handover", ["drain", "restart", "serial"])
def test_no_worker_is_forked_while_the_training_thread_holds_a_lock(handover):
    """A resize from the master's thread during the step must not fork then: a child forked
    while the consumer holds a lock inherits it locked and hangs on its first sample."""
    ours = loader(NeedsTheAppLock(40), num_workers=1, handover=handover)
    it = iter(ours)
    got = [next(it)]
    with APP_LOCK:  # the training step, holding a lock of its own
        resizer = threading.Thread(target=ours.resize, args=(2,))
        resizer.start()
        resizer.join(timeout=10)
        assert not resizer.is_alive()
    rest: list = []
    reader = threading.Thread(target=lambda: rest.extend(it), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "a worker forked under the lock hangs"
    assert indices(got + rest) == list(range(40))
    assert ours.num_workers == 2


@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 3), (1, 2)])
def test_state_dict_resumes_with_other_workers(before, after):
    ds = Numbers(60)
    full = indices(loader(ds, shuffle=True, seed=9))
    first = loader(ds, shuffle=True, seed=9, num_workers=before)
    got = []
    for k, (x, _) in enumerate(first):
        got += x.flatten().tolist()
        if k == 6:
            state = first.state_dict()
            break
    assert state["consumed"] == 7 and state["epoch"] == 0
    first.close()
    second = loader(ds, shuffle=True, num_workers=after)  # seed comes from the state
    second.load_state_dict(state)
    second.set_epoch(0)  # the usual epoch loop keeps the resume position
    assert second.consumed == 7
    got += indices(second)
    assert got == full
    assert indices(second) == rank_order(9, 1, 60).tolist()  # then the next epoch


def test_state_dict_refuses_another_partition():
    state = loader(world_size=2, rank=0).state_dict()
    with pytest.raises(InputError, match="world_size"):
        loader(world_size=4, rank=0).load_state_dict(state)
    with pytest.raises(InputError, match="missing"):
        loader().load_state_dict({"epoch": 0})


def test_set_epoch_is_deterministic_and_equals_rank_order():
    ds = Numbers(40)
    a, b = loader(ds, shuffle=True, seed=11), loader(ds, shuffle=True, seed=11)
    orders = []
    for epoch in (0, 1, 2):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        got = indices(a)
        assert got == indices(b) == rank_order(11, epoch, 40).tolist()
        orders.append(got)
    assert orders[0] != orders[1] != orders[2]
    assert indices(a) == rank_order(11, 3, 40).tolist()  # a finished epoch advances by one


@pytest.mark.parametrize("size", [40, 41])
def test_ranks_partition_the_epoch(size):
    ds = Numbers(size)
    parts = [indices(loader(ds, shuffle=True, seed=2, world_size=2, rank=r, num_workers=r))
             for r in (0, 1)]
    assert len(parts[0]) == len(parts[1]) == -(-size // 2)
    assert set(parts[0]) | set(parts[1]) == set(range(size))
    if size % 2 == 0:
        assert not set(parts[0]) & set(parts[1])


def test_release_then_continue():
    pids = multiprocessing.get_context(CTX).SimpleQueue()

    def alive() -> list[int]:
        while not pids.empty():
            started.append(pids.get())
        return [p for p in started if _running(p)]

    started: list[int] = []
    ds = Numbers(48)
    ours = loader(ds, shuffle=True, seed=4, num_workers=2,
                  worker_init_fn=lambda _: pids.put(os.getpid()))
    seen = []
    for k, (x, _) in enumerate(ours):
        seen += x.flatten().tolist()
        if k == 3:
            assert len(alive()) == 2
            ours.release()
            assert alive() == []
        if k == 7:
            ours.release()
            ours.resize(1)  # restarts the pool at once, before the next batch is asked for
            while len(started) < 5:  # 2, 2 again after the first release, then this 1
                started.append(pids.get())  # blocks until that worker has started
            assert len(alive()) == 1
    assert seen == rank_order(4, 0, 48).tolist()
    assert pids.empty() and len(started) == 5


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("workers", [0, 2])
def test_threads_give_the_same_batches(workers):
    ds = Numbers(45)
    assert same(loader(ds, shuffle=True, seed=4, threads=2, num_workers=workers),
                loader(ds, shuffle=True, seed=4, num_workers=0))


def test_on_batch_receives_stats_and_may_resize():
    ds = Numbers(30)
    ours = loader(ds, batch_size=8, num_workers=0)
    stats: list[BatchStats] = []

    def hook(s: BatchStats) -> None:
        stats.append(s)
        assert ours.consumed == s.index + 1
        ours.resize(2 if s.index % 2 == 0 else 0)

    ours.on_batch = hook
    assert indices(ours) == list(range(30))
    assert [s.index for s in stats] == [0, 1, 2, 3]
    assert [s.samples for s in stats] == [8, 8, 8, 6]
    assert [s.workers for s in stats] == [0, 2, 0, 2]
    assert stats[0].step_s == 0 and all(s.wait_s >= 0 and s.step_s >= 0 for s in stats)
    assert all(s.epoch == 0 for s in stats)
    with pytest.raises(AttributeError):
        stats[0].epoch = 1  # frozen


def test_persistent_workers_across_epochs_and_resizes():
    ds = Numbers(36)
    ours = loader(ds, shuffle=True, seed=8, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        got = indices(ours)
        assert got == rank_order(8, epoch, 36).tolist()
        ours.resize(1 if epoch == 0 else 2)
    ours.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_worker_error_propagates(workers):
    ours = loader(Numbers(40, bad=21), num_workers=workers, timeout=20 if workers else 0)
    it = iter(ours)
    for _ in range(5):
        next(it)
    with pytest.raises(ValueError, match="sample 21 is corrupt"):
        next(it)
    rest = indices(it)  # as torch: the error was that batch's, the epoch goes on
    assert rest == list(range(24, 40))
    ours.close()


def test_bad_arguments_are_input_errors():
    with pytest.raises(ValueError, match="num_workers"):
        loader().resize(-1)
    with pytest.raises(ValueError, match="shuffle"):
        loader(sampler=[0, 1], shuffle=True)
    with pytest.raises(InputError, match="rank"):
        loader(rank=2, world_size=2)


def test_lookahead_learns_startup_and_the_window_cut_respects_it():
    ahead = Lookahead(startup_s=0.1)
    assert ahead.batches() == 0  # no interval seen yet
    ahead.batch(0.01)
    assert ahead.batches() == 10
    ahead.started(created=0.0, asked=0.05, got=0.5)  # waited: started after 0.5 s
    assert ahead.startup_s == pytest.approx(0.1 + 0.3 * 0.4)
    ahead.started(created=0.0, asked=0.02, got=0.0201)  # ready when asked: at most 0.02 s
    assert ahead.startup_s < 0.22 - 0.05
    ahead.started(created=0.0, asked=9.0, got=9.0001)  # ready long ago: bounds nothing
    assert ahead.startup_s < 0.22 - 0.05
    window = BatchWindow(list(range(10)), 2)
    it = iter(window)
    assert [next(it), next(it)] == [2, 3]
    assert window.cut(3) == 7 and list(it) == [4, 5, 6]
    assert window.cut(99) == 7  # a cut never extends a window


class BatchReads(Numbers):
    """A dataset that reads a batch itself (as a cache's batched policy or chunk runs do)."""

    def __init__(self, n):
        super().__init__(n)
        self.calls = []

    def __getitems__(self, idx):
        self.calls.append(tuple(idx))
        return [self[i] for i in idx]


def test_threads_hand_the_datasets_own_batched_read_contiguous_parts():
    ds = BatchReads(40)
    ours = loader(ds, batch_size=10, shuffle=True, seed=3, threads=3, num_workers=0)
    assert same(ours, loader(Numbers(40), batch_size=10, shuffle=True, seed=3, num_workers=0))
    parts = [tuple(b[k:k + 4]) for b in ours.plan(0) for k in (0, 4, 8)]  # ⌈10 / 3⌉ a thread
    assert sorted(ds.calls) == sorted(parts)


def test_a_state_taken_under_one_epoch_order_does_not_resume_under_another():
    a = loader(Numbers(40), batch_size=10, shuffle=True, seed=1, epoch_order=[1, 0, 2])
    state = a.state_dict()
    assert state["epoch_order"] == [1, 0, 2]
    b = loader(Numbers(40), batch_size=10, shuffle=True, seed=1, epoch_order=[0, 1, 2])
    with pytest.raises(InputError, match="epoch_order"):
        b.load_state_dict(state)
    old = {k: v for k, v in state.items() if k != "epoch_order"}  # a state from before
    loader(Numbers(40), batch_size=10, shuffle=True, seed=1, epoch_order=[1, 0, 2]
           ).load_state_dict(old)
