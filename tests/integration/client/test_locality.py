"""Locality-aware batches on real gloo ranks: Theorem 1 (same parameters as the regular loader),
also with the reads in an ElasticDataLoader's workers and across live resizes, the remote share
after the first epoch, and peers that die or stall mid-exchange."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from adloader.client.data.locality import ExchangeError, LocalityBatches
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.locality_batch import global_batches, plan_step
from adloader.errors import InputError
from adloader.workloads.ranks import spawn_gloo

SEED, SIZE, LOCAL, EPOCHS = 7, 48, 4, 3


@pytest.fixture(autouse=True, scope="module")
def _import_optimizers_before_forking():
    """The first optimizer imports ~800 modules (~2 s): once here, not in every forked rank."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


class Images(torch.utils.data.Dataset):
    def __init__(self, size: int = SIZE) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(size, 1, 8, 8, generator=g)
        self.y = torch.randint(0, 3, (size,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def _sgd_step(model, opt, loss, world_size: int, average: bool) -> None:
    opt.zero_grad()
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)  # SUM
    if average:
        flat /= world_size
    torch.nn.utils.vector_to_parameters(flat, grads)
    opt.step()


def _train(rank, world_size, mode, options):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    data = Images()
    if mode == "regular":  # the ElasticDataLoader, averaged gradients (DDP-style)
        loader = ElasticDataLoader(data, batch_size=LOCAL, shuffle=True, seed=SEED)
        for _ in range(EPOCHS):
            for x, y in loader:
                _sgd_step(model, opt, F.cross_entropy(model(x), y), world_size, average=True)
        stats = None
    else:
        batches = LocalityBatches(data, LOCAL, mode=mode, seed=SEED, **options)
        for _ in range(EPOCHS):
            for x, y, w in batches:
                out = model(x)
                loss = w * F.cross_entropy(out, y) if len(y) else out.sum() * 0
                _sgd_step(model, opt, loss, world_size, average=False)
        later = [batches.stats[e] for e in range(1, EPOCHS)]
        stats = {k: sum(getattr(s, k) for s in later)
                 for k in ("samples", "hits", "received", "read")}
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), stats


def _all_modes(rank, world_size):
    small = SIZE // (2 * world_size)  # caches holding half a rank's share
    runs = [("regular", {}), ("locality", {}), ("solar", {}),
            ("locality", {"cache_capacity": small, "read_cost": 0.5}),
            ("solar", {"cache_capacity": small, "threads": 2}), ("bounded", {}),
            ("bounded", {"cache_capacity": small, "max_imbalance": 1.5})]
    return [(mode, opts, *_train(rank, world_size, mode, opts)) for mode, opts in runs]


@pytest.mark.parametrize("world_size", [2, 4])
def test_same_parameters_as_the_regular_loader(world_size):
    ranks = spawn_gloo(_all_modes, world_size, timeout=60)
    init = torch.cat([p.detach().reshape(-1) for p in _model().parameters()]).numpy()
    reference = ranks[0][0][2]
    assert not np.allclose(reference, init, atol=1e-3)  # training moved the parameters
    for runs in ranks:
        for mode, opts, params, _stats in runs:
            np.testing.assert_allclose(params, reference, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{mode} {opts} on {world_size} ranks")
    total = {}
    for mode, opts, _, stats in (run for runs in ranks for run in runs):
        if stats is None:
            continue
        key = (mode, tuple(sorted(opts)))
        agg = total.setdefault(key, dict.fromkeys(stats, 0))
        for k, v in stats.items():
            agg[k] += v
    for (mode, opts), s in total.items():
        assert s["hits"] + s["received"] + s["read"] == s["samples"]
        if not opts:  # full caches: after epoch 1 most samples come from the own cache
            assert s["hits"] / s["samples"] > 0.6, (mode, s)
        if mode == "solar" and not opts:
            assert s["received"] == s["read"] == 0


# ---- reads through the ElasticDataLoader's worker pool ------------------------------------
def _allow_worker_processes() -> None:
    """spawn_gloo's ranks are daemonic, and a daemonic process may not start loader workers."""
    multiprocessing.current_process().daemon = False


def _with_workers(rank, world_size):
    _allow_worker_processes()
    small = SIZE // (2 * world_size)  # half a rank's share: storage reads in every epoch
    runs = [("regular", {}), ("locality", {"num_workers": 2}),
            ("locality", {"num_workers": 2, "cache_capacity": small, "read_cost": 0.5}),
            ("solar", {"num_workers": 2, "cache_capacity": small, "threads": 2})]
    return [(mode, opts, *_train(rank, world_size, mode, opts)) for mode, opts in runs]


def test_same_parameters_with_the_reads_in_loader_workers():
    ranks = spawn_gloo(_with_workers, 2, timeout=60)
    reference = ranks[0][0][2]
    for runs in ranks:
        for mode, opts, params, stats in runs:
            np.testing.assert_allclose(params, reference, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{mode} {opts} with loader workers")
            if stats is not None:
                assert stats["hits"] + stats["received"] + stats["read"] == stats["samples"]
    small_cache_reads = [runs[2][3]["read"] for runs in ranks]
    assert all(n > 0 for n in small_cache_reads)  # the workers did read after epoch 1


RESIZES = {(0, 2): 1, (1, 1): 0, (1, 4): 3, (2, 0): 2}  # (epoch, step) → new worker count


def _samples_seen(rank, world_size, workers, resize):
    _allow_worker_processes()
    data = Images()
    batches = LocalityBatches(data, LOCAL, seed=SEED, num_workers=workers,
                              cache_capacity=SIZE // (2 * world_size))
    seen = []

    def on_batch(stats):  # what the application master's hook sees, and when it resizes
        seen.append((stats.epoch, stats.index, stats.workers, stats.samples))
        if resize and (stats.epoch, stats.index) in RESIZES:
            batches.loader.resize(RESIZES[stats.epoch, stats.index])

    if batches.loader is not None:
        batches.loader.on_batch = on_batch
    got = [[(b.step, b.ids, b.inputs, b.targets, b.loss_weight) for b in batches]
           for _ in range(EPOCHS)]
    return {"got": got, "seen": seen, "loader": batches.loader is not None,
            "workers": batches.loader.num_workers if batches.loader else 0}


def _same_samples(a, b, what):
    assert len(a) == len(b), what
    for epoch_a, epoch_b in zip(a, b, strict=True):
        assert len(epoch_a) == len(epoch_b), what
        for (s1, ids1, x1, y1, w1), (s2, ids2, x2, y2, w2) in zip(epoch_a, epoch_b, strict=True):
            assert s1 == s2, what
            np.testing.assert_array_equal(ids1, ids2, err_msg=what)
            assert torch.equal(x1, x2) and torch.equal(y1, y2) and w1 == w2, what


def test_a_live_resize_of_the_loader_keeps_every_ranks_samples():
    plain = spawn_gloo(_samples_seen, 2, 0, False, timeout=60)
    steady = spawn_gloo(_samples_seen, 2, 2, False, timeout=60)
    resized = spawn_gloo(_samples_seen, 2, 2, True, timeout=60)
    data = Images()
    for rank in range(2):
        assert not plain[rank]["loader"] and steady[rank]["loader"]
        _same_samples(steady[rank]["got"], plain[rank]["got"], f"rank {rank}, 2 workers")
        _same_samples(resized[rank]["got"], steady[rank]["got"], f"rank {rank}, resized")
        for epoch in resized[rank]["got"]:
            for _, ids, x, y, _ in epoch:
                assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
        seen = resized[rank]["seen"]
        workers = {(e, i): w for e, i, w, _ in seen}
        assert len(seen) == sum(len(e) for e in resized[rank]["got"])
        # each resize is in effect from the next batch on, mid-epoch
        assert workers[0, 2] == 2 and workers[0, 3] == 1 and workers[1, 2] == 0
        assert workers[1, 5] == 3 and workers[2, 1] == 2 and resized[rank]["workers"] == 2
        # the hook counts the samples the rank trains on (the job's throughput), not its reads
        trained = [ids.size for epoch in resized[rank]["got"] for _, ids, *_ in epoch]
        assert [n for *_, n in seen] == trained
        assert {w for *_, w, _ in steady[rank]["seen"]} == {2}


# ---- peers that fail ----------------------------------------------------------------------
def _one_sided(rank, world_size, behaviour, on_failure, event):
    """Rank 1 caches everything, rank 0 nothing: every step moves b samples 1 → 0."""
    data = Images()
    cache = {i: data[i] for i in range(SIZE)} if rank == 1 else {}
    batches = LocalityBatches(data, LOCAL, seed=SEED, cache=cache, timeout=1.0,
                              on_peer_failure=on_failure)
    if rank == 1:
        if behaviour == "dies before the directory":
            os._exit(0)
        batches.directory()  # takes part in the epoch's directory exchange, then fails
        if behaviour == "dies":
            os._exit(0)
        event.wait(30)  # stalls until rank 0 is done
        return None
    t0 = time.monotonic()
    try:
        got = [(b.ids, b.inputs, b.targets) for b in batches]
    except ExchangeError as exc:
        event.set()
        return {"error": str(exc), "seconds": time.monotonic() - t0}
    event.set()
    return {"got": got, "seconds": time.monotonic() - t0, "stats": batches.stats[0],
            "abandoned": len(batches._abandoned)}  # exchanges given up waiting on


@pytest.mark.parametrize("behaviour", ["dies", "stalls"])
def test_a_failed_peer_falls_back_to_storage(behaviour):
    event = torch.multiprocessing.get_context("fork").Event()
    result = spawn_gloo(_one_sided, 2, behaviour, "storage", event, timeout=30)[0]
    data = Images()
    expected = global_batches(SEED, 0, SIZE, 2, LOCAL)
    assert len(result["got"]) == len(expected)
    for (ids, x, y), batch in zip(result["got"], expected, strict=True):
        owner = np.ones(SIZE, dtype=np.int64)  # rank 1 holds everything
        np.testing.assert_array_equal(ids, plan_step(batch, owner, 2, LOCAL).local_samples[0])
        assert torch.equal(x, data.x[ids]) and torch.equal(y, data.y[ids])
    stats = result["stats"]
    assert stats.lost_peers == {1}
    assert stats.fallbacks == stats.samples == SIZE // 2 and stats.received == 0
    assert result["abandoned"] <= 1  # one wait given up at most, then no more waiting


def test_a_dead_peer_raises_a_clear_error():
    event = torch.multiprocessing.get_context("fork").Event()
    result = spawn_gloo(_one_sided, 2, "dies", "error", event, timeout=30)[0]
    assert "rank 1 failed in step 0" in result["error"]
    assert "\n" not in result["error"] and result["seconds"] < 3.0


def test_a_peer_lost_before_the_directory_exchange_raises():
    event = torch.multiprocessing.get_context("fork").Event()
    result = spawn_gloo(_one_sided, 2, "dies before the directory", "storage", event,
                        timeout=30)[0]
    assert "cache directory all-gather of epoch 0 failed on rank 0" in result["error"]
    assert "\n" not in result["error"] and result["seconds"] < 3.0


def _bad_args(rank, world_size):
    errors = []
    for kwargs in ({"mode": "nearest"}, {"on_peer_failure": "retry"}, {"timeout": 0},
                   {"reduction": "max"}, {"cache_capacity": -1}, {"num_workers": -1},
                   {"mode": "bounded", "max_imbalance": 0.9}):
        try:
            LocalityBatches(Images(), LOCAL, **kwargs)
        except InputError as exc:
            errors.append(str(exc))
    return errors


def test_bad_arguments_are_input_errors():
    with pytest.raises(InputError, match="not initialised"):
        LocalityBatches(Images(), LOCAL)
    errors = spawn_gloo(_bad_args, 1, timeout=30)[0]
    assert len(errors) == 7 and all("\n" not in e for e in errors)
    assert "nearest" in errors[0] and "num_workers" in errors[5]
    assert "max_imbalance must be at least 1" in errors[6]
