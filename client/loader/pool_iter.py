"""One worker pool's torch iterator, taught to report a dead worker instead of ending the epoch,
and to change its number of workers while it runs.

torch raises ``RuntimeError`` when a worker dies (pytorch#97622) — from its SIGCHLD handler,
i.e. wherever the main thread happens to be, even inside the training step — and the
iterator is unusable afterwards. A pool here leaves torch's SIGCHLD registry, checks its
workers every ``CHECK_S`` while it waits, and raises ``WorkerDied`` naming the signal and the
batches that were outstanding (their positions in the window), which the epoch iterator
re-issues to a fresh pool. ``processed`` tells a batch whose sample raised (torch has moved
past it: the error is that batch's) from a wait that raised (nothing was consumed).

``resize(n)`` changes the pool's workers in place (the ``ElasticDataLoader``'s handover
``inplace``): a worker more is one process forked into the running pool (torch's own worker
loop, the next id, the pool's seeds), the others go on loading; a worker fewer is *retired*:
it is handed no new batch, delivers the ones it has, then waits, *parked*, for ``PARK_S``
in case the pool grows again (a parked worker is taken back before any is forked), and is
stopped after that. The batches stay in the epoch's order, each read once. torch's iterator
fixes its pool when made (``docs/loader.md``), so this leans on its internals: the workers'
queues and status, the dispatch cycle, the tasks in flight (checked against torch 2.13).
"""

from __future__ import annotations

import itertools
import signal
import time

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling
from torch.utils.data._utils import worker as torch_worker
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter

from adloader.client.loader.batch_segments import SegmentCollate

CHECK_S = 0.1  # how often a waiting pool looks at its workers
DEATH_WAIT_S = 2.0  # how long a broken receive waits to see which worker died
PARK_S = 30.0  # a retired worker waits this long to be taken back, then it is stopped


def describe_exit(pid: int | None, code: int | None) -> str:
    """torch's wording: "DataLoader worker (pid N) is killed by signal: Killed."."""
    if code is not None and code < 0:
        try:
            name = signal.strsignal(-code) or signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"DataLoader worker (pid {pid}) is killed by signal: {name}."
    return f"DataLoader worker (pid {pid}) exited unexpectedly with exit code {code}."


class WorkerDied(RuntimeError):
    """A worker of the pool ended without being asked to (a signal, the OOM killer, exit)."""

    def __init__(self, exits: list[tuple[int | None, int | None]], outstanding: list[int],
                 lost: list[int]) -> None:
        self.exits, self.outstanding, self.lost = exits, outstanding, lost  # lost: the dead's
        super().__init__("; ".join(describe_exit(pid, code) for pid, code in exits))


class _SeededIter(_BaseDataLoaderIter):
    """Workers seeded from the pool's ``base_seed`` (the first pool's is torch's own draw)."""

    def __init__(self, loader) -> None:
        super().__init__(loader)
        seed = getattr(loader, "base_seed", None)
        if seed is not None:
            self._base_seed = seed


class PoolIter(_MultiProcessingDataLoaderIter, _SeededIter):
    """torch's multi-process iterator with ``WorkerDied`` and ``processed`` (see the module)."""

    def __init__(self, loader: DataLoader) -> None:
        self.processed = False
        collate_fn = loader.collate_fn
        self._segments = collate_fn if isinstance(collate_fn, SegmentCollate) else None
        super().__init__(loader)
        if self._worker_pids_set:  # a death is ours to handle, not a signal anywhere
            signal_handling._remove_worker_pids(id(self))
            self._worker_pids_set = False
        self._context = loader.multiprocessing_context or torch.multiprocessing
        self._retiring: set[int] = set()  # handed no new batch; delivering what they have
        self._parked: dict[int, float] = {}  # idle, since (monotonic): taken back first
        self._stopped: set[int] = set()  # parked too long: ended by us, not dead

    # -- the pool's size, in place --------------------------------------------------------
    def resize(self, n: int) -> None:
        """Run ``n`` (≥ 1) workers from now on: retire the surplus (the ones with the
        fewest batches in flight), or take parked ones back and fork the rest."""
        if n < 1:
            raise ValueError(f"an in-place resize needs at least one worker, got {n}")
        active = self._active()
        if n < len(active):
            by_load = sorted(active, key=lambda i: (self._workers_num_tasks[i], -i))
            self._retiring.update(by_load[:len(active) - n])
            self._park_idle()
        else:
            back = sorted(self._parked)[:n - len(active)]
            for i in back:
                del self._parked[i]
                self._workers_status[i] = True
            for _ in range(n - len(active) - len(back)):
                self._fork(n)
        self._num_workers = n
        self._worker_queue_idx_cycle = itertools.cycle(self._active())
        while self._tasks_outstanding < self._prefetch_factor * n:  # the new ones' share
            sent = self._send_idx
            self._try_put_index()
            if self._send_idx == sent:
                break

    def _active(self) -> list[int]:
        return [i for i, up in enumerate(self._workers_status)
                if up and i not in self._retiring]

    def _fork(self, total: int) -> None:
        """One worker more, as torch starts each of its own (its id: the next)."""
        i = len(self._workers)
        index_queue = self._context.Queue()
        index_queue.cancel_join_thread()
        w = self._context.Process(target=torch_worker._worker_loop, args=(
            self._dataset_kind, self._dataset, index_queue, self._worker_result_queue,
            self._workers_done_event, self._auto_collation, self._collate_fn,
            self._drop_last, self._base_seed, self._worker_init_fn, i, total,
            self._persistent_workers, self._shared_seed))
        w.daemon = True
        w.start()
        self._index_queues.append(index_queue)
        self._workers.append(w)
        self._workers_status.append(True)
        self._workers_num_tasks.append(0)

    def _park_idle(self) -> None:
        """Retiring workers with nothing in flight are parked; parked ones past ``PARK_S``
        stopped (idle on their own queue, holding no lock the others need)."""
        now = time.monotonic()
        for i in [i for i in self._retiring if self._workers_num_tasks[i] == 0]:
            self._retiring.discard(i)
            self._workers_status[i] = False  # torch waits on it no more
            self._parked[i] = now
        for i in [i for i, since in self._parked.items() if now - since > PARK_S]:
            del self._parked[i]
            self._stopped.add(i)
            self._workers[i].terminate()

    def _try_put_index(self) -> None:
        if self._tasks_outstanding < self._prefetch_factor * self._num_workers:
            super()._try_put_index()  # (a shrunk pool may have more in flight than its max)

    def _shutdown_workers(self) -> None:
        for i in list(self._parked):  # torch's shutdown tells the active ones to end
            self._workers_status[i] = True
        self._parked.clear()
        super()._shutdown_workers()

    def outstanding(self) -> list[int]:
        """Send indices handed to workers and not yet returned (torch's ``_task_info`` keys)."""
        return sorted(self._task_info)

    def _try_get_data(self, timeout: float = CHECK_S):
        try:
            return super()._try_get_data(timeout)
        except Exception as exc:  # torch's "exited unexpectedly", or a batch whose sender died
            exits, dead = self._dead(DEATH_WAIT_S if not isinstance(exc, RuntimeError) else 0)
            if not dead:  # (its shared tensors' fds cannot be fetched: ECONNRESET)
                raise
            lost = sorted(k for k, info in self._task_info.items()
                          if len(info) == 1 and info[0] in dead)
            raise WorkerDied(exits, self.outstanding(), lost) from exc

    def _dead(self, wait_s: float) -> tuple[list, set]:
        """The workers that ended, waiting up to ``wait_s`` for one (a reset socket comes
        before its sender is reaped)."""
        deadline = time.monotonic() + wait_s
        while True:
            exits, dead = [], set()
            for i, w in enumerate(self._workers):
                if i in self._stopped:
                    continue
                if w.exitcode is None and not w.is_alive():
                    w.join(timeout=1.0)
                if w.exitcode not in (None, 0):
                    exits.append((w.pid, w.exitcode))
                    dead.add(i)
            if dead or time.monotonic() >= deadline:
                return exits, dead
            time.sleep(0.01)

    def _process_data(self, data, *worker_idx):  # torch < 2.6 passes no worker_idx
        self.processed = True
        try:
            data = super()._process_data(data, *worker_idx)
        finally:
            if self._retiring or self._parked:
                self._park_idle()
        if self._segments is not None:
            self._segments.received(data)
        return data

    def __next__(self):
        self.processed = False
        if self._segments is not None:
            self._segments.release()
        return super().__next__()


class QuietLoader(DataLoader):
    """A torch DataLoader inside an ElasticDataLoader, which has warned about the count."""

    def check_worker_number_rationality(self) -> None:
        pass


class PoolLoader(QuietLoader):
    """A torch DataLoader whose multi-process iterator is a ``PoolIter``."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        return PoolIter(self)
