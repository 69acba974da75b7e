"""adloader's version, one place for the package, the daemon's API and ``--version`` (the
commit and the Python beside it: ``adloader.host.build_info``)."""

from __future__ import annotations

__version__ = "0.1.0"
