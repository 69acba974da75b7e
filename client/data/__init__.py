"""What an ``ElasticDataLoader`` reads through (imports nothing: each module on its own).

``storage`` (where samples come from), ``cache_store`` (the node-local sample cache),
``prefetch`` (clairvoyant prefetching), ``cached_dataset`` (cache → staging → storage),
``node_cache`` (a job's handle on the node cache), ``chunked`` (HDF5 rows in aggregated
chunks), ``locality`` and ``locality_reads`` (locality-aware batches) and ``paths``
(``PathTable``).
"""
