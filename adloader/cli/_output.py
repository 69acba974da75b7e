"""What every command prints: a console wide enough for pipes, tables, result files and plots."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from adloader.host.atomic import write_json


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
    """Write a result as JSON (atomically) when ``--json PATH`` was given."""
    if path:
        write_json(path, data)


def plot(path: str | Path | None, results: list[dict], title: str | None = None) -> None:
    """Draw timelines when ``--plot PATH`` was given (matplotlib only then)."""
    if path:
        from adloader.workloads.plot import plot_timelines

        plot_timelines(results, path, **({"title": title} if title else {}))
        console().print(f"wrote {path}")


def result_table(result: dict, title: str) -> Table:
    """One run's jobs (simulated or live)."""
    rows = [[j["name"], j["model"], f"{j['arrival_s']:.0f}", f"{j['start_s']:.0f}",
             f"{j['end_s']:.0f}", j["workers_initial"], f"{j['throughput']:.1f}"]
            for j in result["jobs"]]
    return table(title, ["job", "model", "arrival s", "start s", "end s", "workers",
                         "samples/s"], rows, left=2)


def result_line(result: dict) -> str:
    idle = result["gpu_idle_fraction"]
    return (f"makespan {result['makespan_s']:.1f} s · Σ throughput "
            f"{result['aggregate_throughput']:.1f} samples/s · mean JCT "
            f"{result['mean_jct_s']:.1f} s · GPU idle "
            f"{'—' if idle is None else f'{idle:.1%}'} · reallocations {result['reallocations']}")


def score_table(model) -> Table:
    """Table I: held-out R² of each regressor for F_μ and F_λ; the chosen one starred."""
    from adloader.throughput import REGRESSORS

    rows = []
    for name in ("staged", *REGRESSORS):
        cells = []
        for part in (model.training, model.loading):
            score = part.scores.get(name)
            mark = " *" if part.regressor == name else ""
            cells.append("—" if score is None else f"{score:.4f}{mark}")
        rows.append([name, *cells])
    return table("TPM held-out R² (Table I)", ["regressor", "training rate F_μ",
                                               "data loading F_λ"], rows)


def describe(model) -> str:
    st = model.loading.stages
    s = ", ".join(f"{x:.1f}" for x in st.slopes)
    return (f"F_λ stages: contention from {st.contention_from} workers, saturation at "
            f"{st.saturation_at}; samples/s per added worker by stage: {s}")
