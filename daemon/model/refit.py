"""Fitting the node's TPM in a child process: the daemon sends samples, gets a model back.

Fitting F_μ and F_λ (A-Dloader §III-B) tries four scikit-learn regressors for each and
grid-searches the loading stages: seconds of CPU and tens of MB that, in the daemon,
would hold the GIL against the control loop and stay in its heap. A child process does it
and prints ``ThroughputModel.to_json()``; the daemon rebuilds only the chosen regressors.
Each part keeps the prior until the node has enough samples of its kind (``MIN_REAL``)
spread widely enough to fit it (``fittable``: ``MIN_DISTINCT`` jobs' features for F_μ,
``MIN_SPREAD`` distinct node totals for the loading stages).

    python -m adloader.daemon.model.refit < request.json > model.json

A request is ``{"prior": "paper" | model JSON, "training": [[b, n, f, M, step_s], ...],
"loading": [[d, D, rate], ...], "seed": 0}``; ``"prior"`` alone fits the prior from the
named device profile.

The online refits go to one long-lived child instead (``RefitWorker``,
``python -m adloader.daemon.model.refit --serve --for STATE_DIR``: a request a line in, an answer a
line out). Importing scikit-learn is most of a one-shot fit's CPU (the fit itself is a
small part), and a busy node refits every ``REFIT_INTERVAL_S``; the worker, started at the
first refit, imports it once, and again only after it was left idle for ``IDLE_EXIT_S`` and
exited to give its memory back. Same function, same requests, same models. ``--for`` names
the state dir only so that process listings (and ``bench live``'s accounting) tie the worker
to its daemon. The worker runs at nice 19: a fit waits for CPU the training jobs leave
rather than taking theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time

from adloader.errors import InputError, StorageError

MIN_REAL = 6  # real samples of a kind before they replace the prior
MIN_SPREAD = 4  # distinct node totals before the loading stages are refitted
MIN_DISTINCT = 6  # distinct job features (B, n, f, M) before F_μ is refitted: eq. 6 has five
# coefficients, so fewer points are fitted by many forms and predict nothing for a job not
# seen (on three jobs' samples every regressor can score R² < 0); a job
# already seen is predicted by its own correction (``scheduling.model.correction``), not by a fit
TIMEOUT_S = 300.0
IDLE_EXIT_S = 600.0  # a worker with no request for this long exits (its memory goes back)
WORKER_NICE = 19  # the worker's CPU priority: it runs on what the training jobs leave (not
# SCHED_IDLE, under which a node whose loaders keep every core busy would never refit)


def fit(request: dict) -> dict:
    """The model JSON for ``request`` (runs in the child)."""
    from adloader.scheduling.model.samples import LoadingSample, TrainingSample
    from adloader.scheduling.model.throughput import (
        LoadingRateModel,
        ThroughputModel,
        TrainingRateModel,
    )

    seed = int(request.get("seed", 0))
    prior = request["prior"]
    if isinstance(prior, str):
        from adloader.device import synth
        from adloader.device.device_profile import load_profile

        training, loading = synth.samples(load_profile(prior or "paper"), seed)
        return ThroughputModel.fit(training, loading, seed).to_json()
    base = ThroughputModel.from_json(prior)
    training = [TrainingSample(int(b), int(n), f, m, s) for b, n, f, m, s in request["training"]]
    loading = [LoadingSample(int(d), int(total), rate) for d, total, rate in request["loading"]]
    refit_t, refit_l = fittable(training, loading)
    part_t = TrainingRateModel.fit(training, seed) if refit_t else base.training
    part_l = LoadingRateModel.fit(loading, seed) if refit_l else base.loading
    return ThroughputModel(part_t, part_l).to_json()


def fittable(training: list, loading: list) -> tuple[bool, bool]:
    """Whether a fit from these samples would refit F_μ and F_λ (else it keeps that part):
    ``MIN_REAL`` samples of the kind, spread over ``MIN_DISTINCT`` jobs' features (training)
    or ``MIN_SPREAD`` node totals (loading)."""
    jobs = {(s.batch_size, s.gpus, s.flops_g, s.params_m) for s in training}
    totals = {s.node_workers for s in loading}
    return (len(training) >= MIN_REAL and len(jobs) >= MIN_DISTINCT,
            len(loading) >= MIN_REAL and len(totals) >= MIN_SPREAD)


def fit_in_child(request: dict, timeout_s: float = TIMEOUT_S) -> dict:
    """Run ``fit`` in a child process; InputError with its last line if it fails."""
    try:
        done = subprocess.run([sys.executable, "-m", "adloader.daemon.model.refit"],
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


class RefitWorker:
    """``fit`` in one long-lived child (started by ``start``, restarted when it is gone): the
    daemon's online refits without a fresh interpreter and scikit-learn import each time.
    Errors as ``fit_in_child`` raises them; one request at a time."""

    def __init__(self, label: str = "", idle_exit_s: float = IDLE_EXIT_S):
        self.label, self.idle_exit_s = label, idle_exit_s
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        # what the workers said they used: their starts (the imports) apart from their fits
        self.usage = {"starts": 0, "startup_cpu_s": 0.0, "fits": 0, "fit_cpu_s": 0.0}
        self._counted: tuple[int, float] | None = None  # (worker pid, its CPU at its last answer)

    def start(self) -> None:
        """Start the child now (it imports what fitting needs before its first request)."""
        with self._lock:
            self._running()

    def _running(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            argv = [sys.executable, "-m", "adloader.daemon.model.refit", "--serve",
                    "--idle-exit", str(self.idle_exit_s)]
            if self.label:
                argv += ["--for", self.label]
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE,  # stderr: the log
                                              stdout=subprocess.PIPE)
            except OSError as exc:
                raise StorageError(f"cannot start the model fit: {exc.strerror}") from None
        return self._proc

    def fit(self, request: dict, timeout_s: float = TIMEOUT_S) -> dict:
        """The model JSON for ``request``; a worker that had exited (idle, or killed) is
        started again once."""
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            for attempt in (1, 2):
                proc = self._running()
                try:
                    proc.stdin.write(line)
                    proc.stdin.flush()
                except (BrokenPipeError, ValueError):  # it exited meanwhile: a new one
                    self._stop(proc)
                    continue
                answer = self._answer(proc, timeout_s)
                if answer is not None:
                    break
                self._stop(proc)
                if attempt == 2:
                    raise InputError("fitting the model failed: the fitting process exited "
                                     f"with {proc.returncode} (its message is in the log)")
            else:
                raise InputError("fitting the model failed: the fitting process exited")
        self._account(proc.pid, answer.get("cpu_s"))
        if "error" in answer:
            raise InputError(f"fitting the model failed: {answer['error']}")
        return answer["model"]

    def _account(self, pid: int, cpu: dict | None) -> None:
        """Add a worker's own CPU reading (``{"startup": s, "now": t}``) to ``usage``."""
        if not isinstance(cpu, dict):
            return
        startup, now = float(cpu.get("startup", 0.0)), float(cpu.get("now", 0.0))
        if self._counted is None or self._counted[0] != pid:  # a worker not counted yet
            self.usage["starts"] += 1
            self.usage["startup_cpu_s"] = round(self.usage["startup_cpu_s"] + startup, 3)
            self._counted = (pid, startup)
        self.usage["fits"] += 1
        self.usage["fit_cpu_s"] = round(self.usage["fit_cpu_s"] + now - self._counted[1], 3)
        self._counted = (pid, now)

    def _answer(self, proc: subprocess.Popen, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._stop(proc)
                raise InputError(f"fitting the model took over {timeout_s:g} s")
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if ready:
                text = proc.stdout.readline()  # the child writes its answer in one line
                return json.loads(text) if text else None

    def _stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        if self._proc is proc:
            self._proc = None

    def close(self) -> None:
        """End the child (its stdin closed: it exits at once)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def serve(idle_exit_s: float = IDLE_EXIT_S) -> int:
    """The worker's loop: a request a line on stdin, its answer a line on stdout
    (``{"model": ...}`` or ``{"error": ...}``); ends when stdin closes or stays idle for
    ``idle_exit_s``."""
    from adloader.scheduling.model import throughput

    with contextlib.suppress(OSError):  # the jobs' CPU first: fits use what they leave
        os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)
    throughput._regressor("linear", 0)  # scikit-learn imported now, not at the first request
    throughput._r2([0.0, 1.0], [0.0, 1.0])
    from scipy.optimize import nnls  # noqa: F401  (the loading stages' search)
    startup = time.process_time()  # this worker's start: once, not a fit's cost
    stdin = sys.stdin.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], idle_exit_s)
        if not ready:
            return 0
        line = stdin.readline()
        if not line:
            return 0
        try:
            answer = {"model": fit(json.loads(line))}
        except (InputError, ValueError, KeyError, TypeError) as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answer["cpu_s"] = {"startup": round(startup, 4), "now": round(time.process_time(), 4)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        idle = float(argv[argv.index("--idle-exit") + 1]) if "--idle-exit" in argv \
            else IDLE_EXIT_S
        return serve(idle)
    try:
        print(json.dumps(fit(json.load(sys.stdin))))
    except (InputError, ValueError, KeyError, TypeError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
