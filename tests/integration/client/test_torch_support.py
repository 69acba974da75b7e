"""``torch_support``: what the installed torch's DataLoader offers. On the torch the project
pins (2.13) every in-place resize runs in place; the loader's tests pass on torch 2.1 and 2.5
too (docs/loader.md), where a resize starts a new pool and ``in_order=False`` is refused."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from adloader.client.loader.loader import ElasticDataLoader
from adloader.client.loader.pool_iter import PoolIter
from adloader.client.loader.torch_support import (
    has_in_order,
    order_kwargs,
    resizable,
    worker_loop_matches,
)


class Numbers(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        return torch.tensor([i])


def test_the_pinned_torch_resizes_in_place_and_takes_in_order():
    """Fails where a torch release renames what an in-place resize leans on: the loader
    would go on working, a resize starting a new pool, and this says so."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert has_in_order() == ((major, minor) >= (2, 6))
    assert order_kwargs(True) == ({"in_order": True} if has_in_order() else {})
    if (major, minor) < (2, 6):
        return
    assert worker_loop_matches()
    loader = ElasticDataLoader(Numbers(), batch_size=4, num_workers=2,
                               multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    pools = [p.wait().iterator for p in it.pools]
    assert pools and all(isinstance(p, PoolIter) and resizable(p) for p in pools)
    loader.resize(3)
    assert [int(x) for b in it for x in b.flatten()] == list(range(4, 64))
    del it
    loader.close()
