"""Fitting the node's TPM in a child process: the daemon sends samples, gets a model back.

Fitting F_μ and F_λ (A-Dloader §III-B) tries four scikit-learn regressors for each and
grid-searches the loading stages: seconds of CPU and tens of MB that, in the daemon,
would hold the GIL against the control loop and stay in its heap. A child process does it
and prints ``ThroughputModel.to_json()``; the daemon rebuilds only the chosen regressors.
Each part keeps the prior until the node has enough samples of its kind (``MIN_REAL``;
the loading stages also need ``MIN_SPREAD`` distinct node totals).

    python -m adloader.daemon.refit < request.json > model.json

A request is ``{"prior": "paper" | model JSON, "training": [[b, n, f, M, step_s], ...],
"loading": [[d, D, rate], ...], "seed": 0}``; ``"prior"`` alone fits the prior from the
named device profile.
"""

from __future__ import annotations

import json
import subprocess
import sys

from adloader.errors import InputError, StorageError

MIN_REAL = 6  # real samples of a kind before they replace the prior
MIN_SPREAD = 4  # distinct node totals before the loading stages are refitted
TIMEOUT_S = 300.0


def fit(request: dict) -> dict:
    """The model JSON for ``request`` (runs in the child)."""
    from adloader.scheduling.samples import LoadingSample, TrainingSample
    from adloader.scheduling.throughput import LoadingRateModel, ThroughputModel, TrainingRateModel

    seed = int(request.get("seed", 0))
    prior = request["prior"]
    if isinstance(prior, str):
        from adloader.sim import synth
        from adloader.sim.device_profile import load_profile

        training, loading = synth.samples(load_profile(prior or "paper"), seed)
        return ThroughputModel.fit(training, loading, seed).to_json()
    base = ThroughputModel.from_json(prior)
    training = [TrainingSample(int(b), int(n), f, m, s) for b, n, f, m, s in request["training"]]
    loading = [LoadingSample(int(d), int(total), rate) for d, total, rate in request["loading"]]
    part_t = (TrainingRateModel.fit(training, seed) if len(training) >= MIN_REAL
              else base.training)
    spread = len({s.node_workers for s in loading})
    part_l = (LoadingRateModel.fit(loading, seed)
              if len(loading) >= MIN_REAL and spread >= MIN_SPREAD else base.loading)
    return ThroughputModel(part_t, part_l).to_json()


def fit_in_child(request: dict, timeout_s: float = TIMEOUT_S) -> dict:
    """Run ``fit`` in a child process; InputError with its last line if it fails."""
    try:
        done = subprocess.run([sys.executable, "-m", "adloader.daemon.refit"],
                              input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise InputError(f"fitting the model took over {timeout_s:g} s") from None
    except OSError as exc:
        raise StorageError(f"cannot start the model fit: {exc.strerror}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise InputError(f"fitting the model failed: {lines[-1]}")
    return json.loads(done.stdout)


def main() -> int:
    try:
        print(json.dumps(fit(json.load(sys.stdin))))
    except (InputError, ValueError, KeyError, TypeError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
