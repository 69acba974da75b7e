"""The loops of ``ftf`` and ``jct``: one source each (Cython's pure-Python mode), compiled
where a compiler exists and run as plain Python where not."""
