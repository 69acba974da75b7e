"""Pause and resume inside a job (A-Dloader §III-C): the master's side of ``Pause``.

The daemon pauses a job to free its workers for others: at the batch boundary every rank
releases its loader's workers, rank 0 saves a checkpoint when asked (the user's state, the
loader's position, the iteration), ``Paused`` answers with its path, and the ranks wait,
meeting every PAUSE_POLL_S, until ``Resume``. After a relaunch, ``resume_from`` loads that
checkpoint back. ``JobMaster`` provides the loader, the ranks' exchange and the channel.
"""

from __future__ import annotations

import os
from pathlib import Path

from adloader import env as names
from adloader.protocol import Pause, Paused

from .checkpoint import checkpoint_path, load_checkpoint, save_checkpoint

PAUSE_POLL_S = 1.0  # how often paused ranks meet to look for Resume


class PauseMixin:
    """``_pause``, ``_checkpoint`` and ``resume_from`` of ``client.master.master.JobMaster``."""

    def _pause(self, command: Pause) -> None:
        """Release the workers, checkpoint if asked, say Paused; wait for Resume if new."""
        waiting = self._paused  # already paused: only answer again
        if not waiting:
            if self.loader is not None:
                self.loader.release()
            self._paused = True
            self._workers = 0
        path = self._checkpoint(command.seq) if command.checkpoint else None
        self._exchange([])  # every rank has released (and rank 0 saved) before Paused
        self._applied_seq = command.seq
        if self.channel is not None:
            self.channel.post(Paused(job=self.job, token=self._token, seq=command.seq,
                                     checkpoint=str(path) if path else None))
        while not waiting and self._paused and not self._finished:
            for later in self._exchange(self._take(PAUSE_POLL_S) if self.local_rank == 0
                                        else []):
                self._apply(later)

    def _checkpoint(self, seq: int) -> Path | None:
        """Rank 0 saves {state, loader, adloader} to CHECKPOINT_DIR/JOB.pt; None if it cannot."""
        if self.rank != 0:
            return None
        payload = {
            "adloader": {"job": self.job, "seq": seq, "iteration": self._iteration,
                         "workers": self._target},
            "state": self._state() if self._state is not None else None,
            "loader": self.loader.state_dict() if hasattr(self.loader, "state_dict") else None,
        }
        directory = self.checkpoint_dir or Path.cwd() / "checkpoints"
        try:
            return save_checkpoint(checkpoint_path(directory, self.job), payload)
        except Exception as exc:  # a full disk must not kill the training job
            self._log(f"adloader: job {self.job!r}: checkpoint to {directory} failed: {exc}")
            return None

    def resume_from(self, path: str | os.PathLike | None = None, *,
                    weights_only: bool = True) -> dict | None:
        """Load a Pause checkpoint after a relaunch (``path`` or ADLOADER_RESUME).

        Restores the loader's state and the iteration count; returns the user's state
        (what ``state()`` gave) for the script to load into its model and optimizer,
        or None when there is nothing to resume from.
        """
        path = path or os.environ.get(names.RESUME) or None
        if path is None:
            return None
        payload = load_checkpoint(path, weights_only=weights_only)
        if payload.get("loader") is not None and hasattr(self.loader, "load_state_dict"):
            self.loader.load_state_dict(payload["loader"])
        with self._lock:
            self._iteration = int(payload["adloader"].get("iteration", 0))
        return payload.get("state")
