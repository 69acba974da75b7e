"""`adloader bench startup`: how long the command line takes to start, against the bare
interpreter in the same run.

Each command runs as a user runs it — the installed ``adloader`` console script next to this
interpreter (``python -m adloader`` if there is none) — ``rounds`` times, interleaved with
the baseline ``python -c "import argparse"``; medians are reported. ``jobs`` talks to a real
daemon started for the run. A probe run of each command lists the heavy modules it loaded.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from adloader import env as names

HEAVY = ("torch", "sklearn", "scipy", "matplotlib")
PROBE = ("import atexit, sys\n"
         "atexit.register(lambda: sys.stderr.write('HEAVY:' + ','.join(m for m in {heavy!r} "
         "if m in sys.modules) + '\\n'))\n"
         "from adloader.cli import main\n"
         "sys.exit(main({argv!r}))\n")


def adloader_command() -> list[str]:
    script = Path(sys.executable).with_name("adloader")
    return [str(script)] if script.exists() else [sys.executable, "-m", "adloader"]


def _time(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return (time.perf_counter() - t0) * 1000


def heavy_modules(argv: list[str], env: dict) -> list[str]:
    """The heavy modules ``adloader ARGV`` has loaded when it exits."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY, argv=argv)],
                          env=env, capture_output=True, text=True, check=False)
    line = next((x for x in done.stderr.splitlines() if x.startswith("HEAVY:")), "HEAVY:?")
    return [m for m in line[len("HEAVY:"):].split(",") if m]


def run_startup_bench(rounds: int = 15) -> dict:
    from adloader.remote.process import DaemonProcess

    base = [sys.executable, "-c", "import argparse"]
    adl = adloader_command()
    with DaemonProcess(Path(tempfile.mkdtemp(prefix="adloader-startup-")) / "state") as daemon:
        env = {**os.environ, names.URL: daemon.url, names.API_TOKEN: daemon.token}
        commands = {"adloader --help": ["--help"], "adloader jobs": ["jobs"],
                    "adloader submit --help": ["submit", "--help"]}
        times: dict[str, list[float]] = {name: [] for name in ("baseline", *commands)}
        for _ in range(rounds):
            times["baseline"].append(_time(base, env))
            for name, argv in commands.items():
                times[name].append(_time([*adl, *argv], env))
        heavy = {name: heavy_modules(argv, env) for name, argv in commands.items()}
    baseline = statistics.median(times["baseline"])
    rows = [{"command": name, "median_ms": statistics.median(times[name]),
             "ratio": statistics.median(times[name]) / baseline, "heavy": heavy[name]}
            for name in commands]
    return {"rounds": rounds, "baseline_ms": baseline, "command": adl, "rows": rows}
