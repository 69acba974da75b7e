"""What a test does when this machine cannot run it: under ``CI=true`` it fails (a CI box must
be able to run every test), elsewhere it is skipped with the reason."""

from __future__ import annotations

import os
import subprocess

import pytest


def cannot(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, and this test cannot run here: {reason}")
    pytest.skip(reason)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    """A command's completed process, its output captured as text, ten minutes at most."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
