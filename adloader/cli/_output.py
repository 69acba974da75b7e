"""What every command prints: a console wide enough for pipes, tables, result files and plots."""

from __future__ import annotations

import sys

from rich.table import Table

# the console, tables, result files and plots: one implementation, shared with the simulated
# benchmarks' reports (which ``adloader demo`` prints too)
from adloader.bench.sim.output import console, plot, save, table

__all__ = ["console", "describe", "listing", "plot", "result_line", "result_table", "save",
           "score_table", "table"]


def listing(title: str, columns: list[str], rows: list[list], *, left: int = 1) -> None:
    """A listing on standard output: a table on a terminal; piped, plain columns a line per
    row, no title, no box and no colour (what ``awk``, ``grep`` and ``cut`` expect)."""
    if sys.stdout.isatty():
        console().print(table(title, columns, rows, left=left))
        return
    cells = [[str(c) for c in columns], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        line = "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        sys.stdout.write(line.rstrip() + "\n")


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
    from adloader.scheduling.model.throughput import REGRESSORS

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
