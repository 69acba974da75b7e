"""What the installed torch's ``DataLoader`` offers, for the torch versions the job side accepts
(``torch>=2.1``): ``in_order`` came with torch 2.6, and with it the per-worker task counts the
in-place resize keeps (``pool_iter.PoolIter``). Where they are missing the loader passes no
``in_order`` (refusing ``in_order=False`` by name) and a resize starts a new pool, as the
``drain`` handover does."""

from __future__ import annotations

import functools
import inspect

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import worker as torch_worker

from adloader.errors import InputError

# what ``PoolIter._fork`` passes to torch's worker loop, in its order
WORKER_LOOP = ("dataset_kind", "dataset", "index_queue", "data_queue", "done_event",
               "auto_collation", "collate_fn", "drop_last", "base_seed", "init_fn",
               "worker_id", "num_workers", "persistent_workers", "shared_seed")
# the multi-process iterator's state an in-place resize reads and changes
IN_PLACE_STATE = ("_workers", "_workers_status", "_workers_num_tasks", "_index_queues",
                  "_worker_queue_idx_cycle", "_task_info", "_tasks_outstanding", "_send_idx",
                  "_prefetch_factor", "_worker_result_queue", "_workers_done_event",
                  "_dataset_kind", "_dataset", "_auto_collation", "_collate_fn", "_drop_last",
                  "_base_seed", "_worker_init_fn", "_persistent_workers", "_shared_seed")


@functools.cache
def has_in_order() -> bool:
    """Whether ``DataLoader`` takes ``in_order`` (torch ≥ 2.6)."""
    return "in_order" in inspect.signature(DataLoader.__init__).parameters


@functools.cache
def worker_loop_matches() -> bool:
    """Whether torch's worker loop takes the arguments an in-place fork passes."""
    params = tuple(inspect.signature(torch_worker._worker_loop).parameters)
    return params == WORKER_LOOP


def resizable(iterator) -> bool:
    """Whether a running multi-process iterator can change its workers in place here."""
    return worker_loop_matches() and all(hasattr(iterator, a) for a in IN_PLACE_STATE)


def order_kwargs(in_order: bool) -> dict:
    """``in_order`` for torch's ``DataLoader`` where it takes one; ``in_order=False`` on a
    torch without it is refused naming the version."""
    if has_in_order():
        return {"in_order": in_order}
    if not in_order:
        raise InputError(f"in_order=False needs torch >= 2.6 (DataLoader's in_order); this is "
                         f"torch {torch.__version__}")
    return {}
