"""The node cache's segment, the one thing of it the daemon and the jobs share: its layout
(``FIELDS``) and how the daemon makes one (``create_segment``: one per dataset, owned and
unlinked by the daemon, sized live with ``SampleArena.set_limit``). What a job does with it is
``adloader.client.data.node_cache``; what the daemon does, ``daemon.cache.node_cache_host``.
"""

from __future__ import annotations

from adloader.host.shm_arena import EMPTY, SampleArena, budget_for

FIELDS = ("uses", "dkey", "dlen", "owner")  # the layout SharedSampleCache's read path expects


def create_segment(capacity_bytes: int, size: int, block_bytes: int = 4096) -> SampleArena:
    """The node's segment for one dataset of ``size`` samples, room for ``capacity_bytes``
    (the daemon's side; it owns and unlinks it). Untouched pages take no memory."""
    budget = budget_for(size, capacity_bytes, block_bytes, len(FIELDS), 1)
    arena = SampleArena(budget, size, block_bytes, fields=FIELDS, counters=1,
                        what="node cache")
    arena.field["dkey"][:] = EMPTY
    return arena
