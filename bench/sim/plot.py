"""The allocation timeline picture (A-Dloader Fig. 7–9): workers per job over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from adloader.host.atomic import atomic_path


def _draw(ax, result: dict, colors: dict[str, object]) -> None:
    timeline = result["timeline"]
    names = [j["name"] for j in sorted(result["jobs"], key=lambda j: j["start_s"])]
    times = [e["t_s"] for e in timeline]
    end = max(j["end_s"] for j in result["jobs"])
    times_ext = times + [end]
    bottom = [0.0] * len(times_ext)
    for name in names:
        height = [e["workers"].get(name, 0) for e in timeline]
        height = height + height[-1:]
        top = [b + h for b, h in zip(bottom, height, strict=True)]
        ax.fill_between(times_ext, bottom, top, step="post", color=colors[name],
                        alpha=0.85, label=name, linewidth=0)
        bottom = top
    for ev in result.get("events", []):
        if ev["kind"] == "plan" and ev["t_s"] > 0:
            ax.axvline(ev["t_s"], color="red" if ev["resized"] else "green", lw=0.8, alpha=0.7)
    ax.axhline(result["cores"], color="black", ls=":", lw=1)
    ax.set_xlim(0, end * 1.01)
    ax.set_ylim(0, result["cores"] * 1.15)
    ax.set_ylabel("workers")
    realloc = "reallocation" if result.get("realloc", True) else "no reallocation"
    ax.set_title(
        f"{result['policy']} ({realloc}): makespan {result['makespan_s']:.0f} s, "
        f"Σ throughput {result['aggregate_throughput']:.0f} samples/s",
        fontsize=10,
    )


def plot_timelines(results: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """One panel per result; red lines mark reallocations, green plans that moved nothing."""
    path = Path(path)
    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.8 * len(results)), squeeze=False)
    names = sorted({j["name"] for r in results for j in r["jobs"]})
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colors = {name: cmap(k % cmap.N) for k, name in enumerate(names)}  # one job, one colour
    for ax, result in zip(axes[:, 0], results, strict=True):
        _draw(ax, result, colors)
        ax.legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path
