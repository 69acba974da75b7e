"""`adloader model samples|fit`: draw samples from a profile, fit and save the TPM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from adloader.cli import env_default
from adloader.errors import InputError
from adloader.throughput import REGRESSORS, ThroughputModel
from adloader.workloads import synth
from adloader.workloads.files import write_json
from adloader.workloads.profile import load_profile
from adloader.workloads.samplefile import read_samples, write_samples


def wide_console() -> Console:
    """A console wide enough for our tables also when stdout is a file or a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=140)


def score_table(model: ThroughputModel) -> Table:
    """Table I: held-out R² of each regressor for F_μ and F_λ; the chosen one starred."""
    table = Table(title="TPM held-out R² (Table I)")
    table.add_column("regressor")
    table.add_column("training rate F_μ", justify="right")
    table.add_column("data loading F_λ", justify="right")
    for name in ("staged", *REGRESSORS):
        cells = []
        for part in (model.training, model.loading):
            score = part.scores.get(name)
            mark = " *" if part.regressor == name else ""
            cells.append("—" if score is None else f"{score:.4f}{mark}")
        table.add_row(name, *cells)
    return table


def describe(model: ThroughputModel) -> str:
    st = model.loading.stages
    s = ", ".join(f"{x:.1f}" for x in st.slopes)
    return (f"F_λ stages: contention from {st.contention_from} workers, saturation at "
            f"{st.saturation_at}; samples/s per added worker by stage: {s}")


def save_model(model: ThroughputModel, path: str | Path) -> None:
    write_json(path, model.to_json(), indent=None)


def load_model(path: str | Path) -> ThroughputModel:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return ThroughputModel.from_json(data)


def _samples(args) -> int:
    profile = load_profile(args.profile)
    training, loading = synth.samples(profile, args.seed)
    write_samples(args.output, [*training, *loading])
    print(f"wrote {len(training)} training and {len(loading)} loading samples "
          f"from profile {profile.name!r} to {args.output}")
    return 0


def _fit(args) -> int:
    training, loading = read_samples(args.samples)
    model = ThroughputModel.fit(training, loading, args.seed)
    console = wide_console()
    console.print(score_table(model))
    console.print(describe(model))
    save_model(model, args.output)
    console.print(f"wrote {args.output}")
    return 0


def register(sub) -> None:
    parser = sub.add_parser("model", help="throughput prediction model: samples, fit")
    cmds = parser.add_subparsers(dest="model_command", metavar="ACTION")
    parser.set_defaults(func=lambda a: parser.print_help() or 2)
    p = cmds.add_parser("samples", help="draw noisy samples from a device profile")
    p.add_argument("--profile", default=env_default("profile", "paper"))
    p.add_argument("--seed", type=int, default=int(env_default("seed", 0)))
    p.add_argument("-o", "--output", default=env_default("output", "samples.csv"))
    p.set_defaults(func=_samples)
    p = cmds.add_parser("fit", help="fit F_μ and F_λ from a samples CSV, print R², save JSON")
    p.add_argument("samples")
    p.add_argument("--seed", type=int, default=int(env_default("seed", 0)))
    p.add_argument("-o", "--output", default=env_default("model", "model.json"))
    p.set_defaults(func=_fit)
