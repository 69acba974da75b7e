"""``adloader bench NAME``: every benchmark, each printing ratios against a baseline measured in
the same run. The scheduling ones run the simulator (``adloader.bench.sim.report`` over
``adloader.bench.sim.experiments``); the others run real parts (``adloader.bench``): live jobs under
real daemons, the control plane at scale, live resizes, caches, locality, storage, and the
command line's own start-up.

Each benchmark is a sub-command with its own flags (``adloader bench NAME --help``): a flag
means one thing for the bench that takes it, and a bench refuses a flag it does not use."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable

from adloader.bench.sim import report
from adloader.cli import _options, _output

from .bench_cluster import bench_cluster
from .bench_data import (  # the data-path benches
    bench_cache,
    bench_chunks,
    bench_epoch_order,
    bench_loaders,
    bench_locality,
    bench_node_cache,
    bench_resize,
    bench_shared_cache,
    bench_storage,
)
from .bench_live import (
    api_flags,
    bench_api,
    bench_live,
    bench_pooled,
    bench_resize_cost,
    bench_startup,
    bench_tuner,
    live_flags,
    pooled_flags,
    resize_cost_flags,
)
from .bench_multinode import bench_multinode
from .bench_soak import bench_soak, soak_flags

Flags = Callable[[argparse.ArgumentParser], None]


# -- the simulated ones: flags to arguments of adloader.bench.sim.report ------------------------
def bench_static(args) -> int:
    return report.static_benchmark(args.profile, args.seed, args.json, args.plot, args.window,
                                   args.realloc_cost, args.cores, args.model,
                                   args.prediction_error, args.truth)


def bench_dynamic(args) -> int:
    profile, model, config = _options.simulation_setup(args)
    config.closed_loop = args.closed_loop
    return report.dynamic_benchmark(profile, model, config, args.json, args.plot,
                                    args.floor_slot)


def bench_tpm(args) -> int:
    """The TPM fitted from the profile's noisy samples: Table I's held-out R²."""
    profile, model, config = _options.simulation_setup(args)
    out = _output.console()
    report.intro(out, profile, config)
    out.print(_output.score_table(model))
    out.print(_output.describe(model))
    return 0


def bench_declared(args) -> int:
    from adloader.bench.sim.declared import declared_benchmark

    names = tuple(n.strip() for n in args.mixes.split(",") if n.strip()) if args.mixes else None
    return declared_benchmark(args.profile, args.seed, args.truth, names, args.json,
                              args.floor_slot, args.closed_loop)


def bench_allocation(args) -> int:
    return report.allocation_benchmark(args.jobs, args.capacity, args.json)


def bench_mixes(args) -> int:
    return report.mixes_benchmark(*_options.simulation_setup(args), args.mixes, args.seed,
                                  args.jobs, args.rate, args.json, args.floor_slot,
                                  args.placed_as_balance)


def bench_held_out(args) -> int:
    from adloader.bench.sim.report import held_out_benchmark

    return held_out_benchmark(*_options.simulation_setup(args), args.json, args.floor_slot)


def bench_install(args) -> int:
    """A slim install's costs: ftf's and jct's loops in Python against the compiled ones per
    planner decision (same decisions, checked), and the client's import over torch's."""
    from adloader.bench.ops.install import run_install_bench

    result = run_install_bench(quick=args.quick)
    rows = [[r["loops"], str(r["decisions"]), f"{r['median_ms']:.2f}", f"{r['p90_ms']:.2f}",
             f"{r['max_ms']:.1f}", f"{r['x_compiled']:.2f}", f"{r['cpu_median_ms']:.2f}",
             f"{r['cpu_x_compiled']:.2f}"] for r in result["planner"]]
    out = _output.console()
    out.print(_output.table(
        f"ftf planner decisions in the simulator, {result['planner'][0]['traces']} traces "
        "(baseline: the compiled loops, same run; same decisions)",
        ["loops", "decisions", "median ms", "p90 ms", "max ms", "× compiled (median)",
         "CPU median ms", "CPU × compiled"], rows))
    for r in result["arrival"]:
        out.print(f"one ftf call, {r['case']}, {r['loops']} loops: {r['median_ms']:.2f} ms "
                  f"median ({r['cpu_median_ms']:.2f} ms CPU)")
    imp = result["client_import"]
    out.print(f"the client's import after `import torch` ({imp['rounds']} interpreters, "
              f"median / min): ElasticDataLoader {imp['loader_median_ms']:.0f} / "
              f"{imp['loader_min_ms']:.0f} ms; with attach (pydantic, ZeroMQ) "
              f"{imp['median_ms']:.0f} / {imp['min_ms']:.0f} ms; heavy modules loaded: "
              f"{', '.join(imp['heavy_loaded']) or 'none'}")
    _output.save(args.json, result)
    return 0


# -- each bench's flags -------------------------------------------------------------------
def _flag(*names: str, **kw) -> Flags:
    return lambda parser: parser.add_argument(*names, **kw)


QUICK = _flag("--quick", action="store_true", help="small settings (seconds)")
JSON = _options.json_option
JSON_PLOT = _options.output_options  # --json, --plot
SIM = _options.sim_options  # the simulated node: --profile, --model, --seed, --cores, ...
FLOOR_SLOT = _flag("--floor-slot", type=_options.seconds, default=None, metavar="S",
                   help="also the floor over the whole trace, arrivals included, in slots of "
                        "S seconds (a mixed-integer program: minutes; 4 proves the dynamic "
                        "trace's bound)")
CLOSED_LOOP = _flag("--closed-loop", action="store_true",
                    help="the daemon's policy under its closed loop (measured moves, the "
                         "guard), as the daemon runs it by default; without: each plan applied "
                         "as planned")


def _sim(*flags: str) -> Flags:
    return functools.partial(_options.sim_options, only=flags)


def _rounds(text: str) -> Flags:
    return _flag("--rounds", type=int, default=None, help=text)


@dataclasses.dataclass(frozen=True)
class Bench:
    run: Callable[[argparse.Namespace], int]
    help: str  # one line, in `adloader bench --help`
    flags: tuple[Flags, ...] = (JSON,)


BENCHMARKS: dict[str, Bench] = {
    "static": Bench(bench_static, "the static mix (Fig. 3), every policy, simulated",
                    (SIM, JSON_PLOT)),
    "dynamic": Bench(bench_dynamic, "the dynamic trace (Table III), simulated",
                     (SIM, FLOOR_SLOT, CLOSED_LOOP, JSON_PLOT)),
    "tpm": Bench(bench_tpm, "the TPM's held-out R² (Table I)",
                 (_sim("--profile", "--model", "--seed", "--cores", "--realloc-cost"),)),
    "allocation": Bench(bench_allocation, "allocation speed of every policy", (
        _flag("--jobs", type=int, default=None, help=f"jobs (default {report.ALLOCATION_JOBS})"),
        _flag("--capacity", type=int, default=1024, help="workers (default 1024)"), JSON)),
    "mixes": Bench(bench_mixes, "development random mixes from the generator (looked at while "
                                "choosing changes), every policy, simulated", (
        SIM, _flag("--jobs", type=int, default=None,
                   help=f"jobs per mix (default {report.MIXES_JOBS})"),
        _flag("--mixes", type=int, default=10, help="random mixes (default 10)"),
        _flag("--rate", type=float, default=1 / 60,
              help="Poisson arrivals per second (default one a minute)"), FLOOR_SLOT,
        _flag("--placed-as-balance", action="store_true",
              help="pin each job to the GPUs balance gave it, in every run: policies compared "
                   "at the same co-location"), JSON)),
    "held-out": Bench(bench_held_out, "the held-out mixes (seeds fixed in "
                                      "bench/sim/held_out.json): run once per release, "
                                      "reported as they fall; simulated",
                      (SIM, FLOOR_SLOT, JSON)),
    "declared": Bench(bench_declared, "the declared space of mixes: where coordination gains, "
                                      "ties or costs against no daemon, simulated", (
        _sim("--profile", "--seed", "--truth"), FLOOR_SLOT,
        _flag("--mixes", default=None,
              help="declared mixes, comma-separated (default: every one)"),
        CLOSED_LOOP, JSON)),
    "live": Bench(bench_live, "the static mix as real jobs under real daemons",
                  (QUICK, live_flags, JSON_PLOT)),
    "resize-cost": Bench(bench_resize_cost, "what a resize costs the node and a window's "
                                            "noise, read from live.json files of bench live",
                         (resize_cost_flags, JSON)),
    "pooled": Bench(bench_pooled, "the rounds of several bench live runs of one mix as one "
                                  "sample: medians with their bootstrap intervals, read "
                                  "from live.json files", (pooled_flags, JSON)),
    "tuner": Bench(bench_tuner, "the competent per-job tuner alone, live, against each job's "
                                "best fixed num_workers in hindsight",
                   (QUICK, _rounds("rounds (default 2)"),
                    _flag("--iterations-scale", type=float, default=None,
                          help="each job's stated iterations × this (default 0.3: ~150 "
                               "batches; the tuner's trials weigh less on longer jobs)"),
                    JSON)),
    "api": Bench(bench_api, "REST latency, daemon memory and CPU with N heartbeating masters",
                 (QUICK, api_flags, JSON)),
    "resize": Bench(bench_resize, "live resizes and per-batch cost against torch's DataLoader",
                    (QUICK, JSON)),
    "cache": Bench(bench_cache, "cache policies against Belady's MIN", (
        QUICK, _flag("--ranks-per-node", type=int, default=None,
                     help="ranks on the node (default: all of them)"), JSON)),
    "epoch-order": Bench(bench_epoch_order, "SOLAR's epoch order: reads saved per cache policy",
                         (QUICK, JSON)),
    "chunks": Bench(bench_chunks, "SOLAR's aggregated chunk loading on a cold HDF5 file",
                    (QUICK, JSON)),
    "shared-cache": Bench(bench_shared_cache, "jobs sharing one node cache, arbitrated, "
                                              "against multi-job MIN (simulated)", (QUICK, JSON)),
    "node-cache": Bench(bench_node_cache, "three real jobs, two on one dataset: no cache, "
                                          "private caches, the daemon's shared node cache",
                        (QUICK, _rounds("rounds (default 2)"), JSON)),
    "cluster": Bench(bench_cluster, "placement on a simulated cluster of adloader nodes: "
                                    "spread, bin-packing, loading-aware",
                     (QUICK, _sim("--profile", "--seed"), JSON)),
    "multinode": Bench(bench_multinode, "a torchrun job over two nodes, each node's part under "
                                        "its own daemon (two daemons on this machine)", (JSON,)),
    "locality": Bench(bench_locality, "locality-aware batches, simulated and on gloo ranks", (
        QUICK, _flag("--max-imbalance", dest="max_imbalance", type=float, default=1.1,
                     help="how far the bounded mode may grow a local batch (× b, default 1.1)"),
        JSON)),
    "storage": Bench(bench_storage, "epoch time over slow storage with the node's RAM cache",
                     (QUICK, JSON)),
    "soak": Bench(bench_soak, "a daemon through N jobs: its memory, read latency and a store "
                              "bounded by retention", (QUICK, soak_flags, JSON)),
    "startup": Bench(bench_startup, "the command line's start-up time", (QUICK, JSON)),
    "install": Bench(bench_install, "an install without a compiler: the Python loops per "
                                    "planner decision, and the client's import", (QUICK, JSON)),
    "loaders": Bench(bench_loaders, "ElasticDataLoader beside torch, torchdata and SPDL loaders",
                     (QUICK, _flag("--workers", type=_options.counts, default=None,
                                   help="worker counts, a row each (default 1,2,4)"),
                      _rounds("rounds (default 5)"),
                      _flag("--crop", type=int, default=None, help="image crop (default 224)"),
                      JSON)),
}


class _BenchParser(argparse.ArgumentParser):
    """A bench's parser: a flag it does not take is an error that shows this bench's usage
    (not the top parser's, where argparse would report it)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks with ratios against a same-run baseline",
                       description="Benchmarks, each printing ratios against a baseline "
                                   "measured in the same run. `adloader bench NAME --help`: "
                                   "NAME's own flags.")
    names = p.add_subparsers(dest="which", metavar="NAME", required=True,
                             parser_class=_BenchParser)
    for name, bench in BENCHMARKS.items():
        b = names.add_parser(name, help=bench.help, description=bench.help)
        for add in bench.flags:
            add(b)
        b.set_defaults(func=bench.run)
