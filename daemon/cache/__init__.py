"""The node cache, the daemon's side (``node_cache``): one shared-memory segment per dataset,
its memory split among datasets (the data path's half of the daemon)."""
