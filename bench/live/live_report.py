"""The GPU run kit: ``adloader bench live --report DIR``.

On a CUDA node ``bench live`` trains the mix for real (``workloads/train.py`` on the GPU) under
each policy and each no-daemon setting on torch's own DataLoader, interleaved round after
round. This module turns that result into a report that stands on its own, for anyone to
read or commit:

- ``report.md``: the machine, what ran (the command, the truth of each figure), the settings
  table (every ratio paired with the no-daemon even split of the same round), each job's
  rate, the targets, the simulated baselines against the live ones, and the frontier;
- ``timeline.png``: the last round of every setting, each job's workers over time (under the
  daemon from its events; with no daemon from each job's own report, its tuner's changes
  included), with each job's run marked;
- ``machine.json``: the machine's description; ``live.json``: the whole result.

Nothing here needs a GPU: on a CPU-only machine the same report is written from the
emulated run (``tests/bench/test_bench_live.py`` checks the plumbing that way).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

from adloader.bench.live.live_rounds import TARGETS
from adloader.host.atomic import atomic_path, write_json
from adloader.version import __version__

SUMMARY_COLUMNS = ["setting", "makespan s", "first batch s", "node samples/s",
                   "while all train", "× {ref}",
                   "spread", "× best fixed in hindsight", "× best no-daemon in hindsight",
                   "mean JCT × best no-daemon", "× requested", "mean JCT ×", "worst job JCT ×",
                   "Σ samples/s", "Σ ×",
                   "memory MB", "overhead CPU/s", "after start", "of it, resizes", "reallocs",
                   "targets"]


def summary_rows(summary: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The settings table (columns, rows as text), one for the console and the report."""
    ref = summary[0]["reference"]

    def vs(r, key):
        return f"{r[key]:.3f}" if key in r else "—"

    rows = [[r["policy"], f"{r['makespan_s']:.1f}", f"{r.get('first_batch_s') or 0:.2f}",
             f"{r.get('node_rate') or 0:.0f}",
             f"{r['steady_rate']:.0f}" if r.get("steady_rate") else "—",
             f"{r['makespan_paired']:.3f}",
             f"{r['spread'][0]:.2f}–{r['spread'][1]:.2f}", vs(r, "makespan_vs_best_fixed"),
             vs(r, "makespan_vs_best_nodaemon"), vs(r, "jct_vs_best_nodaemon"),
             vs(r, "makespan_vs_requested"), f"{r['jct_paired']:.3f}",
             f"{r['worst_jct_paired']:.3f}", f"{r['aggregate_throughput']:.0f}",
             f"{r['sum_paired']:.3f}", f"{r['memory_mb']:.0f}",
             f"{r['overhead_cpu_per_training_s']:.4f}",
             f"{r.get('overhead_after_start_cpu_per_training_s', 0.0):.4f}",
             f"{r.get('overhead_resizes_cpu_per_training_s', 0.0):.4f}",
             f"{r['reallocations']:g}",
             f"{len(r['met'])}/{len(TARGETS)}" if r["daemon"] else ""] for r in summary]
    return [c.format(ref=ref) for c in SUMMARY_COLUMNS], rows


def job_rows(summary: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Each job's rate against its rate under the reference (median over rounds)."""
    names = list(summary[0]["jobs"])
    return ["setting", *names], [
        [r["policy"], *(f"{r['jobs'].get(n, float('nan')):.3f}" for n in names)]
        for r in summary]


def model_rows(sims: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The fixed settings simulated on the measured profile, each job against its live rate;
    the loading truth of each row (d/D·L(D) of one pipeline alone, or the contention surface
    measured side by side; a result from before the surface reads as the former)."""
    jobs = list(sims[0]["live"])
    return ["setting", "loading", "CPU sharing", *jobs, "worst |error|"], [
        [s["setting"], s.get("loading", "d/D·L(D)"), s["cpu_sharing"],
         *(f"{s['error'][n]:+.1%}" for n in jobs),
         f"{max(abs(v) for v in s['error'].values()):.1%}"] for s in sims]


def machine() -> dict:
    """What the run ran on: processor, cores, memory, GPUs and their driver, the software."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:  # the model name, where the kernel says it
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                         "multiprocessors": p.multi_processor_count})
    return {"cpu": cpu, "logical_cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "shm_gib": _shm_gib(), "gpus": gpus, "driver": _nvidia_driver(),
            "cuda": torch.version.cuda, "torch": torch.__version__,
            "python": platform.python_version(), "kernel": platform.release(),
            "adloader": __version__, "commit": _commit()}


def _shm_gib() -> float | None:
    try:
        return round(shutil.disk_usage("/dev/shm").total / 2**30, 1)
    except OSError:
        return None


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() \
        else None


def _commit() -> str | None:
    """The commit the code came from, marked when the tree differs from it."""
    here = str(Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"{head} + uncommitted changes" if head and dirty else head or None


def with_timeline(run: dict, capacity: int) -> dict:
    """A run in the shape ``sim.plot`` draws: a no-daemon run gets its timeline from each
    job's own report (its fixed count from its start to its end, or its tuner's changes)."""
    if "timeline" in run:
        return run
    points: list[tuple[float, str, int]] = []
    t0 = min(j["start"] - j["start_s"] for j in run["jobs"])  # the run's start, wall clock
    for j in run["jobs"]:
        changes = j.get("workers_at") or [[j["start"], j.get("workers_initial") or 0]]
        for t, workers in changes:
            points.append((max(round(t - t0, 3), j["start_s"]), j["name"], workers))
        points.append((j["end_s"], j["name"], 0))
    timeline, current = [], {}
    for t, name, workers in sorted(points):
        if workers:
            current[name] = workers
        else:
            current.pop(name, None)
        timeline.append({"t_s": t, "workers": dict(current)})
    return {**run, "timeline": timeline, "events": [], "realloc": False,
            "cores": max(capacity, max(sum(e["workers"].values()) for e in timeline))}


def draw_timelines(result: dict, path: Path) -> Path:
    """The last round of every setting, one panel each."""
    from adloader.bench.sim.plot import plot_timelines

    last = {}
    for run in result["runs"]:
        last[run["policy"]] = run
    runs = [with_timeline(r, result["capacity"]) for r in last.values()]
    return plot_timelines(runs, path, f"bench live ({result['mode']}): the last round of "
                                      f"each setting, workers per job over time")


def _md_table(columns: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def write_report(result: dict, out: str | Path, command: list[str] | None = None) -> Path:
    """Write ``report.md``, ``timeline.png``, ``machine.json`` and ``live.json`` into ``out``;
    the report's path."""
    from adloader.bench.sim.report import limits_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    box = machine()
    write_json(out / "machine.json", box)
    write_json(out / "live.json", result)
    draw_timelines(result, out / "timeline.png")
    cfg, summary = result["config"], result["summary"]
    ref = summary[0]["reference"]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB)" for g in box["gpus"]) or \
        "none (GPU steps emulated)"
    cmd = " ".join(command or ["adloader", *sys.argv[1:]])
    lines = [
        "# adloader against no daemon: the "
        + ("static mix" if cfg.get("mix", "paper-static") == "paper-static"
           else "static mix on an emulated GPU node" if cfg["mix"] == "gpu-node"
           else f"declared space's {cfg['mix']} mix") + " on this machine",
        "",
        f"Written {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by `{cmd}` "
        f"(adloader {box['adloader']}, commit {box['commit'] or 'unknown'}).",
        "",
        "## The machine",
        "",
        *_md_table(["", ""], [
            ["processor", box["cpu"]], ["logical cores", box["logical_cores"]],
            ["memory", f"{box['memory_gib']} GiB (/dev/shm {box['shm_gib']} GiB)"],
            ["GPUs", gpus], ["NVIDIA driver", box["driver"] or "—"],
            ["CUDA (torch's)", box["cuda"] or "—"], ["torch", box["torch"]],
            ["Python", box["python"]], ["kernel", box["kernel"]]]),
        "",
        "## What ran",
        "",
        f"- Mode: {result['mode']}; trace `{result.get('trace', cfg['trace'])}` on "
        f"{result['gpus']} GPU(s), "
        f"its iterations × {cfg['iterations_scale']:g}; {result['capacity']} loading workers "
        f"for the daemon to share.",
        f"- Settings, each run {cfg['rounds']} times in alternating order: under a real "
        f"daemon {', '.join(f'`{p}`' for p in cfg['policies'])}; with no daemon "
        f"{', '.join(f'`{b}`' for b in cfg['baselines'])} "
        "(on torch's own `DataLoader` unless named `elastic`; requested: the trace's "
        "`num_workers`; even: the workers split evenly; cores: the node's cores each; one: "
        "one each; autotune: a weak per-job tuner, from 1 worker, restarting torch's pool; "
        "climb: a competent per-job tuner on `ElasticDataLoader`, from the even split, "
        "in-process; fifo, shortest: a queue, each job alone with the node's workers in "
        "arrival order or shortest first; elastic:X: setting X on adloader's "
        "`ElasticDataLoader` with no daemon, `elastic` the even split).",
        "- One measure for every row, all measured here: makespan and JCT from the run's start "
        "to each job's last batch (the daemon's arrival window and every process's start-up "
        "included); first batch: when the first job trained its first batch (the start-up "
        "before it: processes, imports, the daemon's arrival settle); node samples/s: every "
        "job's samples over the time from then to the last batch (the node's own rate; Σ of "
        "the jobs' own training-loop rates, beside it, is not one: it rises when jobs run "
        "one after another); while all train: the node's rate from the last job's first "
        "batch to the first job's last (the steady state, from each job's progress every "
        "0.5 s), memory the peak Σ PSS of every "
        "process of the run, overhead the CPU-seconds of the daemon (its start-up left out), "
        "supervisors and masters per training-second; after start: the same without the "
        "daemon's fitting worker's start (its scikit-learn import, once a busy period), as the "
        "worker measured it; of it, resizes: what the masters spent starting the worker pools "
        "the daemon's resizes asked for (torch forks every worker of a new pool).",
        f"- Every ratio is paired with `{ref}`'s run of the same round, then the median over "
        "rounds is taken; spread is the min–max of the makespan ratio. Best fixed in "
        "hindsight: of requested, even, cores and one (those run), the one with the least "
        "median (per figure), paired round by round; best no-daemon in hindsight: the same "
        "over every no-daemon row run (queues, tuners, our loader alone included).",
        "",
        "## Settings",
        "",
        *_md_table(*summary_rows(summary)),
        "",
        "Targets, for a policy under the daemon: makespan ≤ 1.00× best fixed in hindsight "
        "and ≤ 0.95× requested, mean JCT ≤ 1.00× best fixed in hindsight; makespan and mean "
        "JCT ≤ 1.00× the best no-daemon row in hindsight.",
        "",
        f"## Each job's rate against its rate under `{ref}` (median over rounds)",
        "",
    ]
    lines += _md_table(*job_rows(summary))
    sims = result.get("simulated_baselines") or []
    if sims:
        lines += ["", "## The model against this machine", "",
                  "Each fixed no-daemon setting simulated on the profile measured here at the "
                  "run's start (a prediction, not a measurement), each job's rate against its "
                  "live median (simulated / live − 1); loading d/D·L(D): one pipeline alone "
                  "measured, shared by workers; surface: the pipelines measured side by side "
                  "(truth `measured`):", ""]
        lines += _md_table(*model_rows(sims))
    if result.get("floor"):
        lines += ["", "## What no schedule can beat here (measured)", "",
                  f"- {floor_text(result['floor'])}"]
    if result.get("limits"):
        lines += ["", "## What the model says no schedule can beat (predicted)", ""]
        lines += [f"- {t}" for t in limits_text(
            result["limits"], "this machine's measured profile as the truth")]
    lines += ["", "## Timelines", "",
              "![each setting's last round: workers per job over time](timeline.png)", "",
              "The whole result is `live.json`; the machine, `machine.json`.", ""]
    path = out / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines))
    return path


def floor_text(floor: dict) -> str:
    """``bench.live.measured_floor`` in a sentence."""
    against = [f"{floor[k]:.3f}× {name}'s median" for k, name in (
        ("makespan_x_best_fixed", "the best fixed setting in hindsight"),
        ("makespan_x_requested", "the requested setting")) if k in floor]
    jct = (f" = {floor['mean_jct_x_best_fixed']:.3f}× the best fixed setting's median (in "
           "hindsight)") \
        if "mean_jct_x_best_fixed" in floor else ""
    return (f"with the node loading at most {floor['peak_loading']:.0f} samples/s (the most "
            "of L(D), the contention surface and every run's own rate in this run) and "
            "each GPU busy at most all the time, from the jobs' first batch (start-up left "
            f"out), no schedule — any workers, any placement, with or without a daemon — "
            f"ends the mix before {floor['makespan']:.1f} s (" + ", ".join(against) +
            f") or gives a mean JCT under {floor['mean_jct']:.1f} s{jct} (LP over completion "
            "orders, `adloader.scheduling.bounds.schedule_lp.least_mean_jct`)")


def report_from_json(path: str | Path, out: str | Path) -> Path:
    """A report again from a saved ``live.json`` (``--json`` of an earlier run)."""
    return write_report(json.loads(Path(path).read_text()), out)
