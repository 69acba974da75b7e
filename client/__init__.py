"""What runs inside a training job: the application master and the elastic loader.

Four sub-packages, one concept each: ``loader`` (``ElasticDataLoader`` and its worker pool),
``master`` (the embedded application master and ``attach``), ``data`` (caches, prefetch,
storage, chunks, locality) and ``integrations`` (Accelerate, the Hugging Face Trainer).

``JobMaster`` and ``JobCancelled`` are imported on first use, and ``attach`` imports the
master only when a job attaches: the master's messages are pydantic models
(``adloader.protocol``) and its channel is ZeroMQ, which a script that only builds an
``ElasticDataLoader`` (``adloader.client.loader.loader``) need not load
(``adloader bench install`` times the import). ``attach`` itself is bound here at import, so
that ``adloader.client.attach`` names the function (its module is
``adloader.client.master.attach``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .master.attach import attach

if TYPE_CHECKING:  # what type checkers see; at run time ``__getattr__`` below
    from .master.master import JobCancelled, JobMaster

__all__ = ["JobCancelled", "JobMaster", "attach"]


def __getattr__(name: str):
    if name in ("JobCancelled", "JobMaster"):
        from .master import master

        return getattr(master, name)
    raise AttributeError(f"module 'adloader.client' has no attribute {name!r}")
