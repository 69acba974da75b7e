"""The declared space of mixes: where coordinating a node's loaders pays, ties or costs
against what a node does without adloader.

The space is fixed here, before any of it is measured, and every member is run the same way
(``no_daemon.compare``: the fixed ``num_workers`` settings, each job's autotuner, the default
policy under the daemon with the node's cores, on one truth with the CPU shared as the kernel
shares it), with the floor no schedule goes under (``schedule_oracle.jct_floor``). A member
is a gain where the default policy is ≥ 1.2× better than the best fixed setting in makespan
or mean JCT, a cost where it is worse by more than 2 % in both, a tie otherwise; where the
floor is above 1/1.2 of the best fixed setting, no schedule can gain 1.2×, and that is said.

Members (the node sizes users have, the mix shapes of interest):

- ``paper-static`` — the paper's node (24 cores, 4 × RTX 2080 Ti), three jobs at once;
- ``paper-dynamic`` — the same node, eight jobs arriving and leaving (Table III);
- ``fast-gpus`` — the static mix on GPUs 4× faster than the paper's (every true step × 0.25,
  about an A100 against a 2080 Ti for these ResNets): the loaders bind;
- ``big-node`` — 64 cores and 8 GPUs, eight jobs of one GPU each at ``num_workers=16`` (128
  workers asked of 64 cores), arriving together, 500 to 1,500 iterations; the paper's L(D)
  stretched to 64 cores (contention from 29 workers, saturation at 64: an assumption, as the
  node was not measured);
- ``big-node-arrivals`` — the same eight jobs arriving one a minute;
- ``gpu-bound-mix`` — the paper's node, a GPU-bound model (Resnet34: a long step, a worker
  or two feed it) beside three loading-bound ones of lengths 1:2:3, all at once
  (``traces/gpu-bound-mix.json``); also run live (``adloader bench live --member
  gpu-bound-mix``);
- ``lengths-apart`` — the paper's node, six jobs 100 to 2,000 iterations long arriving one a
  minute (``traces/lengths-apart.json``).

Beside the best uniform setting, every row is compared with the best of *every* no-daemon
row (``no_daemon.compare``: the uniform settings, each job's tuner — the competent ``climb``
and the weak ``autotune`` — each job's own best count in hindsight and the FIFO and
shortest-first queues), named in the table, and with the competent tuner alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from adloader.device.device_profile import DeviceProfile, staged_loading
from adloader.sim.generator import PAPER_MIX, batch_for
from adloader.sim.simulator import SimConfig
from adloader.sim.trace import Trace, TraceJob, load_trace

GAIN, COST = 1.2, 1.02
FAST_GPU_STEPS = 0.25


@dataclass(frozen=True)
class Member:
    name: str
    what: str


MEMBERS = (
    Member("paper-static", "the paper's node (24 cores, 4 GPUs), 3 jobs at once"),
    Member("paper-dynamic", "the paper's node, 8 jobs arriving and leaving (Table III)"),
    Member("fast-gpus", "the static mix, GPUs 4× faster (steps × 0.25): loaders bind"),
    Member("big-node", "64 cores, 8 GPUs, 8 one-GPU jobs at num_workers=16, together"),
    Member("big-node-arrivals", "64 cores, 8 GPUs, the same 8 jobs one a minute"),
    Member("gpu-bound-mix", "the paper's node, a GPU-bound job beside 3 loading-bound ones "
           "of lengths 1:2:3"),
    Member("lengths-apart", "the paper's node, 6 jobs 100 to 2,000 iterations, one a minute"),
)
TRACED = ("paper-static", "paper-dynamic", "gpu-bound-mix", "lengths-apart")  # a bundled trace


def big_profile(paper: DeviceProfile) -> DeviceProfile:
    """The paper's loading per worker on a 64-core, 8-GPU node (its knees stretched)."""
    return replace(paper, name="big-node", cores=64, loading_workers=64, gpus=8,
                   node_loading=staged_loading(81.2, 29, 39.7, 64, 128),
                   device="64 cores, 8 GPUs (declared: the paper's L(D) per worker, stretched)")


def big_trace(spaced_s: float = 0.0) -> Trace:
    jobs = tuple(TraceJob(name=f"job{i + 1}", model=m, batch_size=batch_for(m), gpus=1,
                          iterations=(500, 1000, 1500)[i % 3], workers=16,
                          arrival_s=i * spaced_s)
                 for i, m in enumerate(PAPER_MIX[:8]))
    return Trace(name="big-node", gpus=8, jobs=jobs)


def member_case(name: str, paper: DeviceProfile, base: SimConfig
                ) -> tuple[Trace, DeviceProfile, SimConfig]:
    """(trace, profile, config) of one member on ``paper`` (the paper's profile)."""
    if name in TRACED:
        return load_trace(name, paper.gpus), paper, base
    if name == "fast-gpus":
        trace = load_trace("paper-static", paper.gpus)
        return trace, paper, replace(base, slow=tuple((j.name, FAST_GPU_STEPS)
                                                      for j in trace.jobs))
    if name == "big-node":
        return big_trace(), big_profile(paper), base
    if name == "big-node-arrivals":
        return big_trace(60.0), big_profile(paper), base
    raise KeyError(name)


def verdict(row: dict, floor_x_best: float, fair_x_best: float | None = None,
            against: str = "best_fixed") -> str:
    """gain, cost or tie; ``floor_x_best``: the lower of the floor's makespan and mean JCT
    against the best fixed setting's (above 1/1.2: no schedule gains 1.2×); ``fair_x_best``:
    the fair floor's mean JCT against it (above 1/1.2: none gains it keeping every job
    within 1/0.95 of its even-split JCT, as the targets ask); ``against``: the row's figures
    against the best fixed setting (``best_fixed``) or every no-daemon row (``best_nodaemon``),
    the floors then against the same."""
    span, jct = row[f"makespan_x_{against}"], row[f"mean_jct_x_{against}"]
    if min(span, jct) <= 1 / GAIN:
        return "gain"
    if span > COST and jct > COST:
        return "cost"
    if floor_x_best > 1 / GAIN:
        return "tie (no schedule gains 1.2×)"
    if fair_x_best is not None and fair_x_best > 1 / GAIN:
        return "tie (no schedule within 1/0.95 of even gains 1.2×)"
    return "tie"


def _short(setting: str) -> str:
    return setting.removeprefix("no daemon: ")


def run_space(paper: DeviceProfile, model_for, base: SimConfig, policy: str = "ftf",
              names: tuple[str, ...] | None = None,
              floor_slot: float | None = None) -> list[dict]:
    """Every member (or ``names``) once; ``model_for(profile)`` the TPM fitted on a profile;
    ``floor_slot``: the whole-trace floor too where jobs arrive apart (``no_daemon.floor``)."""
    from adloader.sim import no_daemon

    rows = []
    for member in MEMBERS:
        if names and member.name not in names:
            continue
        trace, profile, config = member_case(member.name, paper, base)
        model = model_for(profile)
        compared = no_daemon.compare(trace, profile, model, config, (policy,))
        mine = next(r for r in compared if r["setting"] == f"daemon: {policy}")
        best = no_daemon.best_fixed(compared)
        others = [r for r in compared if r["setting"].startswith("no daemon: ")]
        best_any = {f: min(others, key=lambda r, f=f: r[f]) for f in ("makespan_s",
                                                                       "mean_jct_s")}
        floor = no_daemon.floor(trace, profile, model, config, floor_slot)
        floor_x = floor["mean_jct"] / best["mean_jct_s"]["mean_jct_s"]
        span_x = floor["makespan"] / best["makespan_s"]["makespan_s"]
        jct_any = best_any["mean_jct_s"]["mean_jct_s"]
        span_any = best_any["makespan_s"]["makespan_s"]
        mine = {**mine, "makespan_x_best_nodaemon": mine["makespan_s"] / span_any,
                "mean_jct_x_best_nodaemon": mine["mean_jct_s"] / jct_any}
        floor_any = min(floor["mean_jct"] / jct_any, floor["makespan"] / span_any)
        fair_x = None  # the floor of the schedules within 1/0.95 of even, where it decides
        if floor_slot and verdict(mine, floor_any, against="best_nodaemon") == "tie":
            fair = no_daemon.fair_floor(trace, profile, model, config, compared, floor_slot)
            fair_x = fair["mean_jct"] / jct_any
        rows.append({
            "mix": member.name, "what": member.what, "policy": policy, "jobs": len(trace.jobs),
            "cores": profile.cores, "gpus": profile.gpus,
            "best_fixed_makespan": best["makespan_s"]["setting"],
            "best_fixed_jct": best["mean_jct_s"]["setting"],
            **{k: mine[k] for k in ("makespan_x_best_fixed", "mean_jct_x_best_fixed",
                                    "makespan_x_autotune", "mean_jct_x_autotune",
                                    "makespan_x_climb", "mean_jct_x_climb",
                                    "worst_jct_x_even")},
            "best_nodaemon_makespan": best_any["makespan_s"]["setting"],
            "best_nodaemon_jct": best_any["mean_jct_s"]["setting"],
            "makespan_x_best_nodaemon": mine["makespan_x_best_nodaemon"],
            "mean_jct_x_best_nodaemon": mine["mean_jct_x_best_nodaemon"],
            "floor_jct_x_best_fixed": floor_x, "floor_x_best_nodaemon": floor_any,
            "floor_makespan_x_best_fixed": span_x, "floor_method": floor["method"],
            "fair_floor_jct_x_best_nodaemon": fair_x,
            "verdict": verdict(mine, floor_any, fair_x, against="best_nodaemon")})
    return rows


def declared_benchmark(profile_name: str = "paper", seed: int = 0, truth: str = "model",
                       names: tuple[str, ...] | None = None, json_path=None,
                       floor_slot: float | None = None, closed_loop: bool = False) -> int:
    """``adloader bench declared``: every member of the space, one honest table;
    ``closed_loop``: the policy under the daemon's closed loop (``SimConfig.closed_loop``),
    the baselines as they are."""
    from adloader.bench.sim import output, report
    from adloader.device import synth
    from adloader.scheduling.policies.registry import DEFAULT_POLICY
    from adloader.sim import truth as truths

    unknown = set(names or ()) - {m.name for m in MEMBERS}
    if unknown:
        from adloader.errors import InputError

        raise InputError(f"--mixes: no declared mix {', '.join(sorted(unknown))} (the space: "
                         f"{', '.join(m.name for m in MEMBERS)})")
    paper, model, config = report.setup(profile_name, None, seed, None, 30.0, None, 0.0, truth)
    config = replace(config, closed_loop=closed_loop)
    out = output.console()
    facts = report.intro(out, paper, config, model)

    def model_for(profile: DeviceProfile):
        if profile is paper:
            return model
        return synth.fitted_model(profile, seed, truths.load_truth(truth, profile))

    rows = run_space(paper, model_for, config, DEFAULT_POLICY, names, floor_slot)
    out.print(output.table(
        f"the declared space (adloader.bench.sim.declared), truth {truth}, CPU shared as the "
        f"kernel shares it: {DEFAULT_POLICY} under the daemon (the node's cores; "
        f"{'closed loop' if closed_loop else 'open loop: each plan applied as planned'}) "
        "against the best "
        "fixed num_workers (per figure, the least of requested, even, cores, one) and the best "
        "of every no-daemon row (those, each job's tuners — the competent climb and the weak "
        "autotune — and own best count in hindsight, the FIFO and shortest-first queues); "
        "climb: against the competent tuner alone; floor: no schedule's mean JCT or makespan is "
        "lower (any workers or placement), fair: none that keeps every job within 1/0.95 of its "
        f"even-split JCT (--floor-slot); gain: ≥ {GAIN:g}× better makespan or mean JCT than the "
        f"best no-daemon row, cost: > {COST:g}× "
        "worse in both, else a tie",
        ["mix", "node", "jobs", "makespan × best fixed", "mean JCT × best fixed",
         "makespan × best no-daemon", "mean JCT × best no-daemon (which)",
         "mean JCT × climb", "worst job JCT × even",
         "floor × best no-daemon", "verdict"],
        [[r["mix"], f"{r['cores']} cores, {r['gpus']} GPUs", r["jobs"],
          f"{r['makespan_x_best_fixed']:.3f}", f"{r['mean_jct_x_best_fixed']:.3f}",
          f"{r['makespan_x_best_nodaemon']:.3f}",
          f"{r['mean_jct_x_best_nodaemon']:.3f} ({_short(r['best_nodaemon_jct'])})",
          f"{r['mean_jct_x_climb']:.3f}", f"{r['worst_jct_x_even']:.3f}",
          f"{r['floor_x_best_nodaemon']:.3f}"
          + ("" if r["fair_floor_jct_x_best_nodaemon"] is None
             else f" (fair {r['fair_floor_jct_x_best_nodaemon']:.3f})"),
          r["verdict"]] for r in rows]))
    for member in MEMBERS:
        if not names or member.name in names:
            out.print(f"  {member.name}: {member.what}")
    output.save(json_path, {"truth": facts, "closed_loop": closed_loop, "rows": rows})
    return 0
