"""adloader's version, one place for the package, the daemon's API and ``--version``."""

__version__ = "0.1.0"
