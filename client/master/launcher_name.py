"""What a job is called, from what started it, so that every part of one job shares a name.

A job launched by Slurm or torchrun carries the launcher's id for it in its environment, the
same on every node: ``SLURM_JOB_ID`` and ``SLURM_STEP_ID`` (an array task as
``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``), ``TORCHELASTIC_RUN_ID`` (torchrun's
``--rdzv-id``; ``none`` when not given). ``ADLOADER_NAME`` (a manifest can set it from a pod's
label) comes first. The name is what operators filter on (``adloader jobs --name``); a job's
id stays its own (``ADLOADER_JOB`` or an unguessable one), so a name anyone can predict never
lets another tenant register as the job.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from adloader import env as names

if TYPE_CHECKING:
    from adloader.protocol import JobFeatures

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # as the daemon keeps names


def launcher_name(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher's name for this job (``slurm-1234.0``, ``slurm-77_3``, ``torchrun-abc``),
    ``ADLOADER_NAME`` if set, else None."""
    environ = os.environ if environ is None else environ
    given = environ.get(names.NAME, "").strip()
    if given:
        return _clean(given)
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    slurm = f"{array}_{task}" if array and task else environ.get("SLURM_JOB_ID")
    if slurm:
        step = environ.get("SLURM_STEP_ID")
        return _clean(f"slurm-{slurm}" + (f".{step}" if step else ""))
    run = environ.get("TORCHELASTIC_RUN_ID", "")
    if run and run != "none":
        return _clean(f"torchrun-{run}")
    return None


def _clean(name: str) -> str:
    return _UNSAFE.sub("-", name)[:64]


def job_name(features: JobFeatures) -> str:
    """What to call a job started by hand: what its launcher calls it (``launcher_name``:
    every node's part of one job the same), else its script (``train.py``), else its model."""
    launched = launcher_name()
    if launched:
        return launched
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if script in ("", "-c", "-m", "python", "__main__.py"):
        script = ""
    return (script or features.model or "job")[:64]
