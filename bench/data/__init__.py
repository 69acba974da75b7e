"""Benches of the data path: the caches, chunked reads, SOLAR's epoch order, the loaders,
locality, the node's shared cache and remote storage."""
