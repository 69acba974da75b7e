"""Errors, named for what went wrong; the CLI shows each as one line, never a traceback."""


class InputError(ValueError):
    """Bad input from a user: a trace, a job, a sample file, a model name, a profile."""


class StorageError(RuntimeError):
    """The daemon's state on disk cannot be read or written (damaged, full, gone)."""


class DaemonBusy(RuntimeError):
    """Another daemon already owns the state directory or the address."""


class DaemonUnavailable(RuntimeError):
    """The daemon cannot be reached, or failed to serve (a 5xx): not the user's fault."""
