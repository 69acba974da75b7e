"""adloader: share a node's data-loading workers among the training jobs running on it.

``from adloader import ElasticDataLoader, attach`` is the whole change a training script
makes; both are imported on first use, so ``import adloader`` stays light. The core (this
package's own modules, outside ``cli`` and ``host``) is pure: no sockets, processes or disk.
"""

from typing import TYPE_CHECKING

from adloader.version import __version__

if TYPE_CHECKING:  # what type checkers see; at run time ``__getattr__`` below, on first use
    from adloader.client.data.paths import PathTable
    from adloader.client.loader.loader import ElasticDataLoader
    from adloader.client.loader.stream import ShardedStream
    from adloader.client.master.attach import attach
    from adloader.client.master.master import JobCancelled

__all__ = ["ElasticDataLoader", "JobCancelled", "PathTable", "ShardedStream", "attach",
           "__version__"]


def __getattr__(name: str):
    if name == "ElasticDataLoader":
        from adloader.client.loader.loader import ElasticDataLoader

        return ElasticDataLoader
    if name == "ShardedStream":
        from adloader.client.loader.stream import ShardedStream

        return ShardedStream
    if name == "PathTable":
        from adloader.client.data.paths import PathTable

        return PathTable
    if name == "attach":
        from adloader.client.master.attach import attach

        return attach
    if name == "JobCancelled":
        from adloader.client.master.master import JobCancelled

        return JobCancelled
    raise AttributeError(f"module 'adloader' has no attribute {name!r}")
