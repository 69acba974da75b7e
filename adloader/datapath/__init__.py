"""The data path: everything about which samples are read, when, by whom, and which are kept.

Clairvoyant access streams (``access_stream``, from ``sample_order``), SOLAR's
``epoch_order``, the cache policies (``cache_policies``: one registry, evaluated offline on a
sequence and run online in a job), the ``cache_arbiter`` and the ``shared_cache`` of a node,
locality-aware assembly of a global batch (``locality_batch``, ``bounded_imbalance``) and
SOLAR's ``chunk_runs``. Pure: no sockets, processes or disk.
"""
