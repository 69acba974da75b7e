"""Pause checkpoints (A-Dloader §III-C): the job's state, written atomically, read back later.

A checkpoint is one ``torch.save`` file holding ``{"state": the user's state dicts,
"loader": the loader's state dict, "adloader": {job, seq, iteration, workers}}``. It is
written to a temporary file in the target directory and renamed over the old one, so a
reader sees the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from adloader.errors import InputError
from adloader.host.atomic import atomic_path


def checkpoint_path(directory: str | os.PathLike, job: str) -> Path:
    """Where ``job``'s checkpoint lives in ``directory`` (the job id made file-name safe)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", job) or "job"
    return Path(directory) / f"{safe}.pt"


def save_checkpoint(path: str | os.PathLike, payload: dict) -> Path:
    """``torch.save(payload)`` to ``path`` atomically (temp file, fsync, os.replace)."""
    import torch

    target = Path(path)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with atomic_path(target, mode=0o600, fsync=True) as tmp:
        torch.save(payload, tmp)
    return target


def load_checkpoint(path: str | os.PathLike, *, weights_only: bool = True) -> dict:
    """Read a checkpoint written by ``save_checkpoint``; InputError if it is not one."""
    import torch

    try:
        payload = torch.load(Path(path), map_location="cpu", weights_only=weights_only)
    except FileNotFoundError:
        raise InputError(f"checkpoint {path}: no such file") from None
    except Exception as exc:  # unpickling errors come in many types
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"checkpoint {path}: cannot load: {first}") from None
    if not isinstance(payload, dict) or "adloader" not in payload:
        raise InputError(f"checkpoint {path}: not an adloader checkpoint")
    return payload
