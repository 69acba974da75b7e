"""Errors a user can cause: shown as one line by the CLI, never as a traceback."""


class InputError(ValueError):
    """Bad input from a user: a trace, a job, a sample file, a model name, a profile."""
