"""adloader: share a node's data-loading workers among the training jobs running on it.

The core (this package's own modules) is pure: no sockets, processes or disk.
"""

__version__ = "0.1.0"
