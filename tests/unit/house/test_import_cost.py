"""The command line pays only for what a command uses: parsing any command, and running the
ones that talk to the daemon, never loads torch, scikit-learn, scipy or matplotlib."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "sklearn", "scipy", "matplotlib")
PROBE = """
import sys
from adloader.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
sys.stderr.write("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules) + "\\n")
"""


def _heavy_after(argv: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)],
                          capture_output=True, text=True, timeout=120, check=True)
    line = next(x for x in done.stderr.splitlines() if x.startswith("HEAVY:"))
    return [m for m in line[len("HEAVY:"):].split(",") if m]


@pytest.mark.parametrize("argv", [
    ["--help"], ["jobs", "--help"], ["submit", "--help"], ["daemon", "--help"],
    ["run", "--help"], ["logs", "--help"], ["ui", "--help"], ["models", "list"],
    ["workload", "list"],
    ["jobs", "--url", "http://127.0.0.1:9"],  # runs: no daemon there
])
def test_parsing_and_client_commands_load_nothing_heavy(argv):
    assert _heavy_after(argv) == []


def test_the_daemon_and_the_in_job_library_import_no_torch_for_their_protocol():
    code = ("import sys, adloader.daemon.node, adloader.daemon.api.app, "
            "adloader.client.master.attach; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]"
