"""``ElasticDataLoader`` and its worker pool (imports nothing: each module on its own).

``loader`` (the loader), ``loader_args`` and ``loader_contract`` (torch's checks and attribute
contract), ``elastic_sampler`` (an epoch's batches, windows, pools), ``epoch`` (one iteration),
``pool_iter`` (one pool's iterator), ``torch_support`` (what the installed torch offers),
``batch_segments`` (shared-memory batches) and ``stream`` (``ShardedStream``, iterable
datasets).
"""
