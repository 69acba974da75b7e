"""What every report prints with: a console wide enough for pipes, tables, result files
(JSON, atomically) and timelines (matplotlib, imported only when a plot is asked for). The
simulated benches' reports (``adloader.bench.sim.report``) and the command line
(``adloader.cli._output``) share them."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from adloader.host.atomic import write_json

__all__ = ["console", "plot", "save", "table"]


def console() -> Console:
    """A console wide enough for our tables also when stdout is a file or a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=140)


def table(title: str, columns: list[str], rows: list[list], *, left: int = 1) -> Table:
    """A table whose first ``left`` columns are left-aligned and the rest right-aligned."""
    out = Table(title=title)
    for i, col in enumerate(columns):
        out.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        out.add_row(*[str(x) for x in row])
    return out


def save(path: str | Path | None, data) -> None:
    """Write a result as JSON (atomically) when a path is given (``--json PATH``)."""
    if path:
        write_json(path, data)


def plot(path: str | Path | None, results: list[dict], title: str | None = None) -> None:
    """Draw timelines when a path is given (``--plot PATH``; matplotlib only then)."""
    if path:
        from adloader.bench.sim.plot import plot_timelines

        plot_timelines(results, path, **({"title": title} if title else {}))
        console().print(f"wrote {path}")
