"""One worker pool's torch iterator, taught to report a dead worker instead of ending the epoch.

torch raises ``RuntimeError`` when a worker dies (pytorch#97622) — from its SIGCHLD handler,
i.e. wherever the main thread happens to be, even inside the training step — and the
iterator is unusable afterwards. A pool here leaves torch's SIGCHLD registry, checks its
workers every ``CHECK_S`` while it waits, and raises ``WorkerDied`` naming the signal and the
batches that were outstanding (their positions in the window), which the epoch iterator
re-issues to a fresh pool. ``processed`` tells a batch whose sample raised (torch has moved
past it: the error is that batch's) from a wait that raised (nothing was consumed).
"""

from __future__ import annotations

import signal
import time

from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling
from torch.utils.data.dataloader import _BaseDataLoaderIter, _MultiProcessingDataLoaderIter

from adloader.client.loader.batch_segments import SegmentCollate

CHECK_S = 0.1  # how often a waiting pool looks at its workers
DEATH_WAIT_S = 2.0  # how long a broken receive waits to see which worker died


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
                if w.exitcode is None and not w.is_alive():
                    w.join(timeout=1.0)
                if w.exitcode not in (None, 0):
                    exits.append((w.pid, w.exitcode))
                    dead.add(i)
            if dead or time.monotonic() >= deadline:
                return exits, dead
            time.sleep(0.01)

    def _process_data(self, data, worker_idx):
        self.processed = True
        data = super()._process_data(data, worker_idx)
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
