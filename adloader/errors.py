"""Errors, named for what went wrong; the CLI shows each as one line, never a traceback."""


class InputError(ValueError):
    """Bad input from a user: a trace, a job, a sample file, a model name, a profile."""


class ConflictError(InputError):
    """A valid request the current state refuses: a job that is not running cannot pause, a
    node with 2 GPUs cannot take a job that needs 4 (REST: 409)."""


class StorageError(RuntimeError):
    """The daemon's state on disk cannot be read or written (damaged, full, gone)."""


class DaemonBusy(RuntimeError):
    """Another daemon already owns the state directory or the address."""


class DaemonUnavailable(RuntimeError):
    """The daemon cannot be reached, or failed to serve (a 5xx): not the user's fault."""
