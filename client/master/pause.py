"""Pause and resume inside a job (A-Dloader §III-C): a rank's side of ``Pause``, ``JobPause``.

The daemon pauses a job to free its workers for others: at the batch boundary every rank
releases its loader's workers, rank 0 saves a checkpoint when asked (the user's state, the
loader's position, the iteration), ``Paused`` answers with its path, and the ranks wait
until ``Resume`` (``JobMaster`` exchanges the commands and sends ``Paused``). After a
relaunch, ``resume_from`` loads that checkpoint back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from adloader import env as names
from adloader.protocol import Pause

from .checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from .master_state import MasterState


class JobPause:
    """Releases ``loader``'s workers and checkpoints the job on Pause; loads a checkpoint back.

    Writes ``paused``, ``workers`` and ``iteration`` of the ``MasterState`` it shares with
    the master; reads ``target`` and ``iteration`` for the checkpoint. Only rank 0 saves.
    """

    def __init__(self, state: MasterState, loader, *, job: str, rank: int,
                 checkpoint_dir: Path | None, user_state: Callable[[], dict] | None,
                 log: Callable[[str], None]):
        self._state = state
        self._loader = loader
        self._job = job
        self._rank = rank
        self._checkpoint_dir = checkpoint_dir
        self._user_state = user_state
        self._log = log

    def release(self, command: Pause) -> Path | None:
        """Release the workers unless already paused, then checkpoint if ``command`` asks;
        the checkpoint's path, or None (not asked, not rank 0, or the save failed)."""
        if not self._state.paused:
            if self._loader is not None:
                self._loader.release()
            self._state.paused = True
            self._state.workers = 0
        return self._checkpoint(command.seq) if command.checkpoint else None

    def _checkpoint(self, seq: int) -> Path | None:
        """Rank 0 saves {state, loader, adloader} to CHECKPOINT_DIR/JOB.pt; None if it cannot."""
        if self._rank != 0:
            return None
        loader = self._loader
        payload = {
            "adloader": {"job": self._job, "seq": seq, "iteration": self._state.iteration,
                         "workers": self._state.target},
            "state": self._user_state() if self._user_state is not None else None,
            "loader": loader.state_dict() if hasattr(loader, "state_dict") else None,
        }
        directory = self._checkpoint_dir or Path.cwd() / "checkpoints"
        try:
            return save_checkpoint(checkpoint_path(directory, self._job), payload)
        except Exception as exc:  # a full disk must not kill the training job
            self._log(f"adloader: job {self._job!r}: checkpoint to {directory} failed: {exc}")
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
        if payload.get("loader") is not None and hasattr(self._loader, "load_state_dict"):
            self._loader.load_state_dict(payload["loader"])
        with self._state.lock:
            self._state.iteration = int(payload["adloader"].get("iteration", 0))
        return payload.get("state")
