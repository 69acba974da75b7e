"""``adloader tpm samples | fit``: draw throughput samples from a device profile, fit the
throughput prediction model (TPM, A-Dloader §III-B) and save it. (``model`` is an alias.)"""

from __future__ import annotations

import argparse

from . import _output


def _samples(args: argparse.Namespace) -> int:
    from adloader.device import synth
    from adloader.device.device_profile import load_profile
    from adloader.workloads.samplefile import write_samples

    profile = load_profile(args.profile)
    training, loading = synth.samples(profile, args.seed)
    write_samples(args.output, [*training, *loading])
    print(f"wrote {len(training)} training and {len(loading)} loading samples "
          f"from profile {profile.name!r} to {args.output}")
    return 0


def _fit(args: argparse.Namespace) -> int:
    from adloader.host.atomic import write_json
    from adloader.scheduling.model.throughput import ThroughputModel
    from adloader.workloads.samplefile import read_samples

    training, loading = read_samples(args.samples)
    model = ThroughputModel.fit(training, loading, args.seed)
    out = _output.console()
    out.print(_output.score_table(model))
    out.print(_output.describe(model))
    write_json(args.output, model.to_json(), indent=None)
    out.print(f"wrote {args.output}")
    return 0


def register(sub) -> None:
    for name in ("tpm", "model"):  # `model`: the name before 0.2, kept as an alias
        parser = sub.add_parser(name, help="throughput prediction model: samples, fit"
                                if name == "tpm" else argparse.SUPPRESS)
        cmds = parser.add_subparsers(dest="tpm_command", metavar="ACTION")
        parser.set_defaults(func=lambda _a, parser=parser: parser.print_help() or 2)
        p = cmds.add_parser("samples", help="draw noisy samples from a device profile")
        p.add_argument("--profile", default="paper")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("-o", "--output", default="samples.csv")
        p.set_defaults(func=_samples)
        p = cmds.add_parser("fit", help="fit F_μ and F_λ from a samples CSV, print R², save "
                                        "JSON")
        p.add_argument("samples")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("-o", "--output", default="model.json")
        p.set_defaults(func=_fit)
