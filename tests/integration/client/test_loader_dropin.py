"""ElasticDataLoader as a drop-in for torch's DataLoader: seeds, errors, dead workers, streams.

Real worker processes throughout; a worker is killed with real signals (by itself, or by
this test from outside), and the epoch must still deliver every sample exactly once.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
import time
import warnings

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from waiting import wait_for

from adloader import ElasticDataLoader
from adloader.client.loader.stream import ShardedStream
from adloader.client.loader.torch_support import has_in_order
from adloader.errors import InputError


class Numbers(Dataset):
    def __init__(self, size: int = 40) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> int:
        return i


class Bad(Numbers):
    """Samples in ``bad`` raise, as a corrupt file would."""

    def __init__(self, size: int, bad: set[int]) -> None:
        super().__init__(size)
        self.bad = bad

    def __getitem__(self, i: int) -> int:
        if i in self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return i


class KillOnce(Numbers):
    """The worker reading sample ``victim`` kills itself with ``sig`` the first time only."""

    def __init__(self, size: int, victim: int, sig: int = signal.SIGKILL) -> None:
        super().__init__(size)
        self.victim, self.sig = victim, sig
        self.hits = multiprocessing.get_context("fork").Value("i", 0)

    def __getitem__(self, i: int) -> int:
        if i == self.victim:
            with self.hits.get_lock():
                self.hits.value += 1
                first = self.hits.value == 1
            if first:
                os.kill(os.getpid(), self.sig)
        return i


class Slow(Numbers):
    def __getitem__(self, i: int) -> int:
        time.sleep(0.01)  # pacing: a slow sample
        return i


def flat(batches) -> list[int]:
    return [int(i) for b in batches for i in torch.as_tensor(b).flatten().tolist()]


# ---- the order ----------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_shuffle_is_torchs_for_the_same_manual_seed(workers):
    torch.manual_seed(1234)
    ref = flat(DataLoader(Numbers(50), batch_size=4, shuffle=True, num_workers=workers))
    after_ref = torch.rand(1)
    torch.manual_seed(1234)
    ours = flat(ElasticDataLoader(Numbers(50), batch_size=4, shuffle=True, num_workers=workers))
    assert ours == ref and sorted(ours) == list(range(50))
    assert torch.equal(torch.rand(1), after_ref)  # the global RNG was drawn exactly as torch's


def test_shuffle_is_torchs_for_the_same_generator_every_epoch():
    ref_loader = DataLoader(Numbers(30), batch_size=5, shuffle=True,
                            generator=torch.Generator().manual_seed(7))
    ours_loader = ElasticDataLoader(Numbers(30), batch_size=5, shuffle=True,
                                    generator=torch.Generator().manual_seed(7))
    for _ in range(3):
        assert flat(ours_loader) == flat(ref_loader)


def test_explicit_seed_is_a_function_of_seed_and_epoch():
    a = ElasticDataLoader(Numbers(30), batch_size=5, shuffle=True, seed=3)
    torch.manual_seed(0)
    first = flat(a)
    torch.manual_seed(99)
    b = ElasticDataLoader(Numbers(30), batch_size=5, shuffle=True, seed=3)
    assert flat(b) == first and flat(b) != first  # epoch 1 differs from epoch 0


@pytest.mark.parametrize("before,after", [(0, 2), (2, 1)])
def test_resume_without_seed_replays_torchs_order_with_other_workers(before, after):
    torch.manual_seed(5)
    full = flat(ElasticDataLoader(Numbers(40), batch_size=4, shuffle=True))
    torch.manual_seed(5)
    first = ElasticDataLoader(Numbers(40), batch_size=4, shuffle=True, num_workers=before)
    it = iter(first)
    head = flat(next(it) for _ in range(4))
    state = first.state_dict()
    del it
    second = ElasticDataLoader(Numbers(40), batch_size=4, shuffle=True, num_workers=after)
    second.load_state_dict(state)
    assert head + flat(second) == full


# ---- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_a_samples_error_is_raised_once_for_its_batch_and_the_epoch_goes_on(workers):
    loader = ElasticDataLoader(Bad(40, {9, 30}), batch_size=4, num_workers=workers)
    it, got, errors = iter(loader), [], []
    while True:
        try:
            got += flat([next(it)])
        except StopIteration:
            break
        except ValueError as exc:
            errors.append(str(exc))
    assert len(errors) == 2 and "sample 9 is corrupt" in errors[0]
    if workers:
        assert "Traceback" in errors[0]  # the worker's own traceback, as torch gives it
    assert got == [i for i in range(40) if i // 4 not in (2, 7)]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("in_order", [True, False] if has_in_order() else [True])
def test_a_worker_killed_by_sigkill_is_respawned_and_nothing_is_lost(workers, in_order):
    ds = KillOnce(120, victim=37)
    got = flat(ElasticDataLoader(ds, batch_size=4, num_workers=workers, in_order=in_order))
    assert ds.hits.value == 2  # it died once, and the sample was read again
    assert sorted(got) == list(range(120))
    if in_order:
        assert got == list(range(120))


def test_a_worker_killed_from_outside_is_respawned_mid_epoch():
    loader = ElasticDataLoader(Slow(200), batch_size=2, num_workers=2)
    it = iter(loader)
    got = flat([next(it) for _ in range(5)])
    me = psutil.Process()
    victims = [c for c in me.children() if c.is_running()]
    assert victims, "no worker process to kill"
    victims[0].send_signal(signal.SIGKILL)
    got += flat(it)
    assert got == list(range(200))


def test_repeated_deaths_end_the_epoch_naming_the_signal_and_the_samples():
    class Segfault(Numbers):
        def __getitem__(self, i: int) -> int:
            if i == 13:
                os.kill(os.getpid(), signal.SIGSEGV)
            return i

    loader = ElasticDataLoader(Segfault(40), batch_size=4, num_workers=2)
    with pytest.raises(RuntimeError, match=r"killed by signal: Segmentation fault.*13"):
        list(loader)


# ---- torch's arguments ---------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"timeout": -1}, "timeout option should be non-negative"),
    ({"num_workers": 2, "multiprocessing_context": "nope"}, "valid start method"),
    ({"multiprocessing_context": "fork"}, "num_workers > 0"),
    ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
    ({"prefetch_factor": 2}, "prefetch_factor option could only be specified"),
    ({"num_workers": -1}, "num_workers option should be non-negative"),
])
def test_bad_arguments_raise_as_torchs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ElasticDataLoader(Numbers(), **kwargs)
    with pytest.raises(ValueError, match=match):
        DataLoader(Numbers(), **kwargs)


def test_settings_are_fixed_after_construction_and_the_class_is_generic():
    loader = ElasticDataLoader(Numbers(), batch_size=2)
    for name in ("batch_size", "sampler", "drop_last", "dataset"):
        with pytest.raises(ValueError, match=f"{name} attribute should not be set"):
            setattr(loader, name, None)
    assert ElasticDataLoader[int] is not None
    loader.num_workers = 1  # a resize, still
    assert loader.num_workers == 1


def test_it_is_a_torch_dataloader_whose_samplers_read_as_torchs():
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler
    from torch.utils.data._utils.collate import default_collate
    from torch.utils.data.dataloader import _DatasetKind

    plain = ElasticDataLoader(Numbers(10), batch_size=3, shuffle=True)
    assert isinstance(plain, DataLoader)
    assert type(plain.sampler) is RandomSampler and plain.sampler is plain.sampler
    assert type(plain.batch_sampler) is BatchSampler and plain.batch_sampler.batch_size == 3
    assert plain.collate_fn is default_collate and plain._dataset_kind == _DatasetKind.Map
    assert type(ElasticDataLoader(Numbers(10)).sampler) is SequentialSampler
    assert ElasticDataLoader(Numbers(10), batch_size=None).batch_sampler is None
    # a seed (or ranks): a RandomSampler that yields exactly what the loader reads this epoch
    for epoch in (0, 1):
        ranked = ElasticDataLoader(Numbers(10), batch_size=2, shuffle=True, seed=3, rank=1,
                                   world_size=2)
        ranked.set_epoch(epoch)
        assert isinstance(ranked.sampler, RandomSampler) and len(ranked.sampler) == 5
        batches = [b.tolist() for b in ranked]
        ranked.set_epoch(epoch)
        assert [list(b) for b in ranked.batch_sampler] == batches
        assert list(ranked.sampler) == sum(batches, [])
    given = torch.utils.data.SubsetRandomSampler(range(4))
    assert ElasticDataLoader(Numbers(10), sampler=given).sampler is given


def test_more_workers_than_cores_warns_as_torch():
    n = (os.cpu_count() or 1) + 1
    with pytest.warns(UserWarning, match=f"will create {n} worker processes"):
        ElasticDataLoader(Numbers(), num_workers=n)


def test_new_torch_arguments_are_accepted():
    if not has_in_order():  # torch < 2.6: refused by name, the rest taken
        with pytest.raises(InputError, match=r"in_order=False needs torch >= 2\.6"):
            ElasticDataLoader(Numbers(20), batch_size=4, num_workers=2, in_order=False)
    loader = ElasticDataLoader(Numbers(20), batch_size=4, num_workers=2,
                               in_order=not has_in_order(), pin_memory_device="",
                               prefetch_factor=4, persistent_workers=True)
    for _ in range(2):
        assert sorted(flat(loader)) == list(range(20))
    loader.close()


def test_unbatched_with_a_sampler_of_lists():
    class Pairs(Numbers):
        def __getitem__(self, idx):
            return list(idx)

    got = list(ElasticDataLoader(Pairs(), batch_size=None, sampler=[[0, 1], [2, 3]]))
    ref = list(DataLoader(Pairs(), batch_size=None, sampler=[[0, 1], [2, 3]]))
    assert [[int(x) for x in g] for g in got] == [[int(x) for x in r] for r in ref]


def test_two_iterators_are_independent():
    loader = ElasticDataLoader(Numbers(12), batch_size=3, num_workers=1)
    a, b = iter(loader), iter(loader)
    assert flat([next(a)]) == [0, 1, 2]
    assert flat(b) == list(range(12))
    assert flat(a) == list(range(3, 12))


def test_deleting_the_iterator_ends_its_workers_without_the_collector():
    loader = ElasticDataLoader(Numbers(400), batch_size=2, num_workers=2)
    before = {p.pid for p in psutil.Process().children()}
    gc.disable()
    try:
        it = iter(loader)
        next(it)
        workers = [p for p in psutil.Process().children() if p.pid not in before]
        assert len(workers) == 2
        del it
        wait_for(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE
                                 for w in workers), 30, "the workers to end with their iterator",
                 interval=0.05)
    finally:
        gc.enable()


# ---- streams ------------------------------------------------------------------------------
class Range(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        info = get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(w, self.n, k))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterable_dataset_runs_as_torch_runs_it(workers):
    ours = flat(ElasticDataLoader(Range(30), batch_size=4, num_workers=workers))
    ref = flat(DataLoader(Range(30), batch_size=4, num_workers=workers))
    assert ours == ref and sorted(ours) == list(range(30))


def test_an_unsharded_stream_warns_past_its_length():
    class Copies(IterableDataset):
        def __len__(self):
            return 4

        def __iter__(self):
            return iter(range(4))

    loader = ElasticDataLoader(Copies(), num_workers=2)
    assert len(loader) == 4
    with pytest.warns(UserWarning, match="Length of IterableDataset"):
        list(loader)


class Shards(ShardedStream):
    def __init__(self, n: int = 24, per: int = 7) -> None:
        self.n, self.per = n, per

    def shards(self):
        return list(range(self.n))

    def read(self, shard):
        for j in range(self.per):
            time.sleep(0.001)  # pacing: a slow stream
            yield shard * 100 + j


def test_a_sharded_stream_resizes_at_shard_boundaries_losing_nothing():
    expected = sorted(s * 100 + j for s in range(24) for j in range(7))
    loader = ElasticDataLoader(Shards(), batch_size=4, num_workers=1)
    got = []
    for k, batch in enumerate(loader):
        got += flat([batch])
        if k % 4 == 0:
            loader.resize([2, 0, 3, 1][(k // 4) % 4])
    assert sorted(got) == expected


def test_a_sharded_stream_resumes_with_other_workers_losing_nothing():
    expected = sorted(s * 100 + j for s in range(24) for j in range(7))
    first = ElasticDataLoader(Shards(), batch_size=4, num_workers=2)
    it = iter(first)
    got = flat([next(it) for _ in range(15)])
    state = first.state_dict()
    del it
    second = ElasticDataLoader(Shards(), batch_size=4, num_workers=1)
    second.load_state_dict(state)
    got += flat(second)
    assert sorted(got) == expected


def test_a_resize_from_another_thread_while_a_worker_dies():
    loader = ElasticDataLoader(KillOnce(300, victim=150), batch_size=2, num_workers=2)
    stop = threading.Event()

    def flip():
        n = 0
        while not stop.is_set():
            loader.resize(1 + n % 3)
            n += 1
            time.sleep(0.01)  # pacing: a resize every 10 ms

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        got = flat(loader)
    finally:
        stop.set()
        flipper.join()
    assert got == list(range(300))


@pytest.fixture(autouse=True)
def _quiet_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def test_the_stream_example_in_the_docs_runs_as_printed(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "loader.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    (tmp_path / "example.py").write_text(code)
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "shards done at batch 20" in out.stdout
