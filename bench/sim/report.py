"""What the simulated benchmarks print: each runs ``adloader.bench.sim.experiments`` and shows its
ratios against a baseline of the same run as tables (rich), saving the numbers as JSON and the
timelines as a PNG when asked. ``adloader bench static|dynamic|allocation|mixes|held-out`` call
these,
``adloader demo`` calls ``static_benchmark``, and ``bench live`` prints its schedule limits
with ``limits_text`` and ``frontier_table``. The console, table, save and plot helpers are
``adloader.bench.sim.output``'s, the command line's too."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from adloader.bench.sim.output import console, plot, save, table
from adloader.errors import InputError

MIXES_JOBS = 8  # jobs per development mix: Table III's count, `adloader workload generate`'s
ALLOCATION_JOBS = 1000  # jobs of `bench allocation`


# -- the simulated node -------------------------------------------------------------------
def setup(profile: str = "paper", model: str | None = None, seed: int = 0,
          cores: int | None = None, window: float = 30.0, realloc_cost: float | None = None,
          prediction_error: float = 0.0, truth: str = "model"):
    """(profile, model, SimConfig): a bundled profile name or a profile JSON (its sha256 in
    ``extra``), a fitted TPM JSON or one fitted from noisy samples of the truth's steps
    (``adloader.sim.truth``) and the profile's loading, and the node's settings, each checked."""
    from dataclasses import replace

    from adloader.device import synth
    from adloader.device.device_profile import load_profile
    from adloader.sim import truth as truths
    from adloader.sim.simulator import LIVE_RESIZE_S, SimConfig

    realloc_cost = LIVE_RESIZE_S if realloc_cost is None else realloc_cost
    if realloc_cost < 0:
        raise InputError("--realloc-cost must be at least 0")
    if cores is not None and cores < 1:
        raise InputError("--cores must be at least 1")
    if not 0.0 <= prediction_error < 1.0:
        raise InputError(f"--prediction-error must be in [0, 1), got {prediction_error}")
    truths.check_truth(truth)
    node = load_profile(profile)
    node = replace(node, extra={**node.extra, "sha256": truths.profile_sha256(profile)})
    tpm = load_model(model) if model else synth.fitted_model(
        node, seed, truths.load_truth(truth, node))
    config = SimConfig(capacity=cores, arrival_window_s=window, completion_window_s=window,
                       realloc_cost_s=realloc_cost, prediction_error=prediction_error,
                       error_seed=seed, truth=truth)
    return node, tpm, config


def load_model(path: str | Path):
    """A fitted TPM from its JSON file (``adloader tpm fit -o``)."""
    import json

    from adloader.scheduling.model.throughput import ThroughputModel

    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return ThroughputModel.from_json(data)


def intro(out: Console, profile, config, model=None, jobs=()) -> dict:
    """The node a simulated benchmark runs on, in one line; then its truth: name, source,
    the sha256 of its file and of the profile's, and the TPM's step-time error against it
    over ``jobs`` ((model, global batch, GPUs) each). Returns the truth's facts."""
    from adloader.sim import truth as truths

    out.print(f"profile {profile.name!r}: {profile.device or profile.description[:60]}; "
              f"{config.capacity or profile.loading_workers} loading workers, "
              f"reallocation cost {config.realloc_cost_s:g} s")
    truth = truths.load_truth(config.truth, profile)
    facts = {"truth": truth.name, "source": truth.source, "truth_sha256": truth.file_sha256,
             "profile_sha256": str(profile.extra.get("sha256", ""))}
    out.print(f"truth {truth.name!r}: {truth.source}; sha256 {facts['truth_sha256'] or '—'}; "
              f"profile sha256 {facts['profile_sha256'] or '—'}")
    if model is not None and jobs:
        err = facts["tpm_error"] = truths.tpm_error(truth, model, jobs)
        out.print(f"TPM step-time error against truth {truth.name!r} over {err['jobs']} jobs: "
                  f"median {err['median']:.1%}, max {err['max']:.1%} ({err['worst_job']})")
    return facts


def trace_jobs(trace) -> list[tuple[str, int, int]]:
    """(model, global batch, GPUs) of each job of a trace (``intro``'s ``jobs``)."""
    return [(j.model, j.batch_size, j.gpus) for j in trace.jobs]


# -- the benchmarks -----------------------------------------------------------------------
def static_benchmark(profile_name: str = "paper", seed: int = 0, json_path=None,
                     plot_path=None, window: float = 30.0, realloc_cost: float | None = None,
                     cores: int | None = None, model_path: str | None = None,
                     prediction_error: float = 0.0, truth: str = "model") -> int:
    """Fig. 3's static mix under every policy, with and without reallocation."""
    from adloader.bench.sim import experiments
    from adloader.sim.trace import load_trace

    profile, model, config = setup(profile_name, model_path, seed, cores, window, realloc_cost,
                                   prediction_error, truth)
    out = console()
    facts = intro(out, profile, config, model,
                  trace_jobs(load_trace("paper-static", profile.gpus)))
    runs = experiments.static(load_trace("paper-static", profile.gpus), profile, model, config)
    rows = [[r["policy"], "yes" if r["realloc"] else "no", f"{r['aggregate_throughput']:.0f}",
             f"{r['ratio']:.3f}", f"{r['makespan_s']:.0f}", f"{r['mean_jct_s']:.0f}",
             f"{r['gpu_idle_fraction']:.0%}", r["reallocations"],
             ",".join(str(j["workers_initial"]) for j in r["jobs"]),
             f"{r['worst_job_ratio']:.2f}", f"{r['makespan_ratio']:.2f}"]
            for r in sorted(runs, key=lambda r: r["ratio"])]
    out.print(table("static mix (Fig. 3): Σ throughput against fixed balance",
                    ["policy", "reallocation", "Σ samples/s", "× balance", "makespan s",
                     "mean JCT s", "GPU idle", "reallocs", "initial workers",
                     "worst job × balance", "makespan × balance"], rows, left=2))
    frontier = experiments.instant_frontier(load_trace("paper-static", profile.gpus), profile,
                                            model, config)
    out.print(table("at t = 0, every allocation (oracle): the Pareto frontier of Σ T "
                    "against the worst job, both against balance",
                    ["workers per job", "Σ T × balance", "worst job × balance"],
                    [[",".join(str(v) for v in p["allocation"].values()),
                      f"{p['throughput_ratio']:.3f}", f"{p['worst_ratio']:.3f}"]
                     for p in frontier], left=1))
    ref = next(r for r in runs if r["policy"] == "balance" and not r["realloc"])
    limits = experiments.schedule_limits(load_trace("paper-static", profile.gpus), profile,
                                         model, ref, base=config)
    for line in limits_text(limits, "ground truth"):
        out.print(line)
    out.print(frontier_table(limits, "ground truth"))
    for r in runs:
        r["bounds"], r["schedule_lp"] = limits["bounds"], limits["schedule_lp"]
        r["frontier"] = limits["frontier"]
    kept = against_no_daemon(out, load_trace("paper-static", profile.gpus), profile, model,
                             config)
    for r in runs:  # as the bounds: the same for every run
        r["no_daemon"], r["truth"] = kept, facts
    shown = [r for r in runs if r["paper_setting"] and r["policy"] in ("balance", "waa",
                                                                        "optimal")]
    save(json_path, runs)
    plot(plot_path, shown, f"bench static, profile {profile.name}")
    return 0


def against_no_daemon(out: Console, trace, profile, model, config,
                      floor_slot: float | None = None) -> list[dict]:
    """``no_daemon.compare`` on ``trace``, printed: what a node does without adloader beside
    ``balance`` and ``ftf`` under the daemon, on the same truth, the targets
    (``no_daemon.targets``), and — when every job arrives at once — the floor no schedule goes
    under; the rows, less timelines."""
    from adloader.sim import no_daemon

    compared = no_daemon.compare(trace, profile, model, config)
    capacity = config.capacity or profile.cores
    out.print(table(
        f"against no daemon (truth: {config.truth}, profile {profile.name}, CPU shared as the "
        "kernel shares it; no daemon: no buffers, no capacity cap, fixed num_workers or each "
        f"job's tuner, the competent climb or the weak autotune; the daemon: {capacity} "
        "workers, as it takes the node's cores by default): ratios against the even split, the "
        "best fixed setting (per figure, the least of requested, even, cores, one) and the "
        "competent tuner; makespan from the first arrival",
        ["setting", "workers", "makespan s", "mean JCT s", "makespan × even", "mean JCT × even",
         "worst job JCT × even", "makespan × best fixed", "mean JCT × best fixed",
         "makespan × climb", "mean JCT × climb", "Σ × even"],
        [[r["setting"], ",".join(str(j["workers_initial"]) for j in r["jobs"]),
          f"{r['makespan_s']:.0f}", f"{r['mean_jct_s']:.0f}", f"{r['makespan_x_even']:.3f}",
          f"{r['mean_jct_x_even']:.3f}", f"{r['worst_jct_x_even']:.3f}",
          f"{r['makespan_x_best_fixed']:.3f}", f"{r['mean_jct_x_best_fixed']:.3f}",
          f"{r['makespan_x_climb']:.3f}", f"{r['mean_jct_x_climb']:.3f}",
          f"{r['sum_x_even']:.3f}"] for r in compared]))
    floor = no_daemon.floor(trace, profile, model, config, floor_slot)
    fixed = no_daemon.best_fixed(compared)
    best, span = fixed["mean_jct_s"]["mean_jct_s"], fixed["makespan_s"]["makespan_s"]
    how = ("LP over completion orders per group of jobs arriving together"
           if floor["method"] == "groups" else
           f"one program over the whole trace, arrivals included, in "
           f"{floor['whole_trace']['slot_s']:g} s slots; per group alone "
           f"{floor['groups_mean_jct']:.1f} s")
    out.print(f"  no schedule, any workers or placement, with or without a daemon (the node "
              f"loads ≤ {floor['peak_loading']:.0f} samples/s, a GPU is busy at most all the "
              f"time; {how}; truth {config.truth}): mean JCT ≥ {floor['mean_jct']:.1f} s = "
              f"{floor['mean_jct'] / best:.3f}× the best fixed setting's, makespan ≥ "
              f"{floor['makespan']:.1f} s = {floor['makespan'] / span:.3f}×")
    impossible = min(floor["mean_jct"] / best, floor["makespan"] / span) > 1 / 1.2
    for r in compared:
        if r["setting"].startswith("daemon"):
            met = no_daemon.targets(r)
            out.print(f"  targets, {r['setting']}: " + "; ".join(
                f"{name} {'met' if ok else 'MISSED'}" + (
                    " (no schedule can: floor above 1/1.2 of the best fixed setting in both)"
                    if name == "1.2x best fixed" and not ok and impossible else "")
                for name, ok in met.items()))
            r["targets"] = met
    kept = [{k: v for k, v in r.items() if k not in ("timeline", "events")} for r in compared]
    for r in kept:
        r["floor"] = floor
    return kept


def dynamic_benchmark(profile, model, config, json_path=None, plot_path=None,
                      floor_slot: float | None = None) -> int:
    """Table III's dynamic trace: makespan against no reallocation; ``floor_slot``: the
    floor over the whole trace too (``schedule_oracle.whole_trace_floor``, minutes)."""
    from adloader.bench.sim import experiments
    from adloader.scheduling.policies.registry import DEFAULT_POLICY
    from adloader.sim.trace import load_trace

    out = console()
    facts = intro(out, profile, config, model,
                  trace_jobs(load_trace("paper-dynamic", profile.gpus)))
    runs = experiments.dynamic(load_trace("paper-dynamic", profile.gpus), profile, model,
                               config)
    for r in runs:
        r["truth"] = facts
    rows = [[r["policy"], "yes" if r["realloc"] else "no", f"{r['makespan_s']:.0f}",
             f"{r['ratio']:.3f}", f"{r['aggregate_throughput']:.0f}",
             f"{r['throughput_ratio']:.3f}", f"{r['mean_jct_s']:.0f}", r["reallocations"],
             f"{r['worst_job_ratio']:.2f}"]
            for r in runs]
    out.print(table("dynamic trace (Table III): makespan against no reallocation",
                    ["policy", "reallocation", "makespan s", "× no-realloc", "Σ samples/s",
                     "× no-realloc ", "mean JCT s", "reallocs", "worst job × balance"],
                    rows, left=2))
    lb = experiments.dynamic_bound(load_trace("paper-dynamic", profile.gpus), profile, model,
                                   config)
    start = min(j["start_s"] for j in runs[0]["jobs"])  # the arrival buffer: every policy's
    lb_span = lb["makespan_lb"] - start
    out.print(f"  bound over every schedule (jobs arriving as traced, allocations free): the "
              f"last job ends ≥ {lb['makespan_lb']:.1f} s after the first arrival; measured as "
              f"above (from the first start, {start:g} s) makespan ≥ {lb_span:.1f} s = "
              f"{lb_span / runs[0]['makespan_s']:.3f}× no-realloc (binding: {lb['binding']}; "
              f"the node loads ≤ {lb['node_rate_max']:.0f} samples/s)")
    fair_floor_line(out, load_trace("paper-dynamic", profile.gpus), profile, model, config,
                    runs)
    slow = [r for policy in (DEFAULT_POLICY, "optimal") for r in experiments.correction_runs(
        load_trace("paper-dynamic", profile.gpus), profile, model, "app4", 2.0, policy, config)]
    out.print(table("app4 (VGG13) steps 2× slower than any prediction: online correction of "
                    "its B·F_μ (a step sample every 2 s)",
                    ["policy", "case", "makespan s", "mean JCT s", "app4 JCT s",
                     "first re-plan after start"],
                    [[r["policy"], r["case"], f"{r['makespan_s']:.1f}",
                      f"{r['mean_jct_s']:.1f}", f"{r['job_jct_s']:.1f}",
                      "—" if r["corrected_after_s"] is None else
                      f"{r['corrected_after_s']:g} s"] for r in slow], left=2))
    kept = against_no_daemon(out, load_trace("paper-dynamic", profile.gpus), profile, model,
                             config, floor_slot)
    for r in runs:  # the same for every run
        r["no_daemon"] = kept
    save(json_path, runs)
    shown = [runs[0], next(r for r in runs if r["policy"] == DEFAULT_POLICY)]
    plot(plot_path, shown, f"bench dynamic, profile {profile.name}")
    return 0


def fair_floor_line(out: Console, trace, profile, model, config, runs: list[dict],
                    alpha: float = 0.95) -> dict:
    """What the daemon's lever can do on ``trace``, printed: the least mean JCT of any
    schedule of its workers on the GPUs the planner gives, every job within 1/``alpha`` of
    its JCT under ``balance`` in ``runs`` (``schedule_oracle.placed_floor``), beside the
    default policy's."""
    from adloader.scheduling.policies.registry import DEFAULT_POLICY
    from adloader.sim.schedule_oracle import placed_floor

    even = next(r for r in runs if r["policy"] == "balance" and r["realloc"])
    default = next(r for r in runs if r["policy"] == DEFAULT_POLICY and r["realloc"])
    due = {j["name"]: j["jct_s"] / alpha for j in even["jobs"]}
    floor = placed_floor(trace, profile, model, config, jct_limit=due)
    loop = "closed loop" if config.closed_loop else "open loop"
    out.print(f"  fair floor (truth {config.truth}): within the daemon's {floor['capacity']} "
              f"workers (the node loads ≤ {floor['loading']:.0f} samples/s), on the GPUs the "
              f"planner gives, each job within 1/{alpha:g} of its JCT under balance ({loop}), "
              f"no schedule's mean JCT is under {floor['mean_jct']:.1f} s = "
              f"{floor['mean_jct'] / even['mean_jct_s']:.3f}× balance's; {DEFAULT_POLICY} "
              f"{default['mean_jct_s'] / even['mean_jct_s']:.3f}× (LP over completion orders "
              f"and arrivals, {floor['parts']} part(s))")
    return floor


def allocation_benchmark(jobs: int | None = None, capacity: int = 1024,
                         json_path=None) -> int:
    """Allocation speed of every policy on many jobs, against ``optimal`` in the same run."""
    from adloader.bench.sim import experiments

    rows = experiments.allocation_timing(ALLOCATION_JOBS if jobs is None else jobs, capacity)
    out = [[r["policy"], r["case"], f"{r['median_ms']:.3f}", f"{r['time_ratio']:.3f}",
            r["workers"], f"{r['throughput']:.0f}", f"{r['throughput_ratio']:.4f}"]
           for r in rows]
    console().print(table(
        "allocation time, medians (baseline: optimal on the same case)",
        ["policy", "case", "median ms", "× optimal time", "workers", "Σ T samples/s",
         "Σ T × optimal"], out, left=2))
    save(json_path, rows)
    return 0


def mixes_benchmark(profile, model, config, mixes: int = 10, seed: int = 0,
                    jobs: int | None = None, rate: float = 1 / 60, json_path=None,
                    floor_slot: float | None = None, placed_as_balance: bool = False,
                    seeds: list[int] | None = None, mix: str = "paper",
                    label: str = "development", allow_held_out: bool = False,
                    about: dict | None = None) -> int:
    """Development random mixes from the generator (``bench mixes``; they have been looked at
    while choosing between changes): every policy against no reallocation and against
    balance on each mix; medians and min–max over mixes. ``floor_slot``: each mix's floor
    over its whole trace too (``no_daemon.floor``), where the groups' floor is loose.
    ``placed_as_balance``: each job pinned to the GPUs balance gave it, in every run (the
    no-daemon comparison is then left out: its settings place jobs their own way).
    ``seeds``, ``label``, ``allow_held_out``, ``about``: another set of mixes, as
    ``bench held-out`` runs the held-out set (``adloader.bench.sim.held_out``), saved with it."""
    from adloader.bench.sim import held_out_mixes
    from adloader.sim.generator import GPU_CHOICES, PAPER_MIX, batch_for

    jobs = MIXES_JOBS if jobs is None else jobs
    out = console()
    facts = intro(out, profile, config, model,  # the mix's models, each on every GPU count
                  [(m, batch_for(m), n) for m in PAPER_MIX for n in GPU_CHOICES])
    result = held_out_mixes.random_mixes(profile, model, config, mixes, seed, jobs, rate,
                                         mix, placed_as_balance=placed_as_balance,
                                         seeds=seeds, allow_held_out=allow_held_out)
    result["truth"] = facts
    if about is not None:
        result["set"] = about
    seeds = result["seeds"]
    looked = ("tests use 0–11; these development mixes were looked at while choosing between "
              "changes" if label == "development" else
              "fixed before any was generated; run once, reported as they fall")
    out.print(f"{len(seeds)} {label} mixes, generator seeds {seeds[0]}–{seeds[-1]} ({looked}): "
              f"{jobs} jobs each, mix "
              f"{result['mix']}, Poisson arrivals at {rate:.4g}/s, {profile.gpus} GPUs; "
              f"{result['simulations']} simulations in {result['seconds']:.1f} s")

    def cell(row, key):
        v = row[key]
        return f"{v['median']:.3f} ({v['min']:.2f}–{v['max']:.2f})"

    rows = [[r["policy"] if r["realloc"] else "no realloc",
             *(cell(r, k) for k in held_out_mixes.MIX_METRICS),
             f"{r['every_job_kept']}/{r['mixes']}"] for r in result["rows"]]
    out.print(table(f"{label} random mixes, median (min–max) over mixes; baselines from the "
                    "same mix: no realloc (requested workers kept) and balance (with "
                    "reallocation, as every policy here)",
                    ["policy", "makespan × no-realloc", "makespan × balance",
                     "mean JCT × balance", "Σ T × balance", "worst job × balance",
                     f"every job ≥ {result['alpha']:g}× balance"], rows))
    if placed_as_balance:
        out.print("  every run placed as balance placed the mix (each job pinned to its GPUs "
                  "there); the no-daemon comparison is left out")
        save(json_path, result)
        return 0
    from adloader.scheduling.policies.registry import DEFAULT_POLICY
    from adloader.sim import no_daemon

    versus = no_daemon.across_mixes(profile, model, config, seeds, jobs, result["mix"], rate,
                                    DEFAULT_POLICY, floor_slot)
    result["no_daemon"] = versus
    out.print(table(
        f"the same mixes against no daemon (truth {config.truth}; CPU shared as the kernel "
        f"shares it; the daemon with {versus['capacity']} workers, the node's cores): "
        f"{DEFAULT_POLICY} against the best fixed setting of each mix (per figure) and the "
        "competent per-job tuner (climb), median (min–max) over mixes; floor: no schedule's "
        "mean JCT is lower"
        + (f" (over each whole trace in {floor_slot:g} s slots where higher than the groups')"
           if floor_slot else " (per group of jobs present together)"),
        ["makespan × best fixed", "mean JCT × best fixed", "makespan × climb",
         "mean JCT × climb", "worst job JCT × even", "floor × best fixed"],
        [[cell(versus["summary"], k) for k in (
            "makespan_x_best_fixed", "mean_jct_x_best_fixed", "makespan_x_climb",
            "mean_jct_x_climb", "worst_jct_x_even", "floor_x_best_fixed")]]))
    out.print("  targets held in: " + "; ".join(
        f"{name} {n}/{versus['mixes']}" for name, n in versus["targets_held"].items())
        + f"; a 1.2× mean-JCT gain over the best fixed setting is possible (floor ≤ 1/1.2) in "
        f"{versus['gain_possible']}/{versus['mixes']} mixes, impossible in the rest")
    out.print(table(
        f"the same mixes against the careful user's other baselines (no daemon, truth "
        f"{config.truth}): {DEFAULT_POLICY} against each job's own fixed num_workers chosen in "
        "hindsight (coordinate descent on the mean JCT from the best uniform setting) and the "
        f"jobs one at a time, each alone with the node's {versus['capacity']} workers, in "
        "arrival order (FIFO) or fewest samples first; median (min–max) over mixes",
        ["mean JCT × per-job hindsight", "makespan × per-job hindsight", "mean JCT × FIFO queue",
         "mean JCT × shortest-first queue"],
        [[cell(versus["summary"], k) for k in no_daemon.BASELINE_KEYS]]))
    save(json_path, result)
    return 0


# -- the limits over every schedule (simulated static mix and `bench live`) ----------------
def limits_text(limits: dict, truth: str) -> list[str]:
    """Two lines for ``experiments.schedule_limits``: the bounds, then the best schedule."""
    bound = limits["bounds"]
    ok = "no schedule meets it" if not bound["feasible"] else \
        f"at most {bound['sum_ub_ratio']:.3f}× balance's Σ"
    return [f"over every schedule (allocations free to change over time, {truth}): makespan ≥ "
            f"{bound['makespan_lb']:.0f} s = {bound['makespan_lb_ratio']:.3f}× balance's; with "
            f"every job ≥ {bound['alpha']:g}× its balance rate, {ok}",
            f"best schedule with every job ≥ {bound['alpha']:g}× its balance rate (LP over "
            f"completion orders, {truth}, switching free): " + "; ".join(
                ("jobs may pause: " if o["pause"] else "every job keeps a worker: ")
                + (f"Σ {o['sum_ratio']:.3f}× balance reached, ≤ {o['sum_upper_ratio']:.3f}×"
                   if o["feasible"] else "none")
                for o in limits["schedule_lp"])]


def frontier_table(limits: dict, truth: str) -> Table:
    """``experiments.schedule_limits``'s frontier: at each floor on the worst job's ratio,
    the best schedule's Σ (reached, and the bound) and that schedule's makespan."""
    def cells(o: dict) -> list[str]:
        if not o["feasible"]:
            return ["none", "—"]
        return [f"{o['sum_ratio']:.3f} (≤ {o['sum_upper_ratio']:.3f})",
                f"{o['makespan_ratio']:.3f}"]

    rows = {}
    for o in limits["frontier"]:
        rows.setdefault(o["alpha"], {})[o["pause"]] = o
    return table(
        f"the frontier over every schedule (LP, {truth}): Σ against the worst job's floor, "
        "both against balance",
        ["worst job ≥", "every job keeps a worker: Σ ×", "its makespan ×",
         "jobs may pause: Σ ×", "its makespan ×"],
        [[f"{a:g}×" if a > 0 else "none", *cells(r[False]), *cells(r[True])]
         for a, r in rows.items()], left=1)


def held_out_benchmark(profile, model, config, json_path=None,
                       floor_slot: float | None = None, path: Path | None = None) -> int:
    """``adloader bench held-out``: ``bench mixes`` on exactly the held-out seeds, with the
    set's jobs, mix and rate, printed as ``bench mixes`` prints (every policy against no
    reallocation and balance; the default policy against no daemon, its best fixed settings
    in hindsight, the autotuner and the queues). ``path``: another set's file (tests)."""
    from adloader.bench.sim.held_out import PATH, seeds, spec

    data = spec(path)
    first, last = data["seeds"]
    console().print(
        f"the held-out set ({path or PATH}): generator seeds {first}–{last}, fixed "
        f"{data['written']}; rule: {data['rule']}")
    return mixes_benchmark(profile, model, config, jobs=data["jobs"],
                           rate=data["rate_per_s"], json_path=json_path,
                           floor_slot=floor_slot, seeds=seeds(path), mix=data["mix"],
                           label="held-out", allow_held_out=True,
                           about={"file": str(path or PATH), **data})
