"""The per-job tuners simulated: no daemon, every job runs its own copy of a tuner users
would write, the same class the live baseline runs, on the same truth as the daemon's
policies — the weak one (``autotune``: ``adloader.scheduling.tuners.autotune.Autotuner``,
from 1 worker, one more a window while the gain lasts, then fixed) or the competent one
(``climb``: ``adloader.scheduling.tuners.climb.ClimbingTuner``, from the node's workers ÷ the
jobs, climbing both ways within the node's workers and looking again for as long as the job
runs).

Each job starts at the tuner's first count the moment it arrives (no buffer, no capacity
cap, at most the node's cores for ``autotune``, the node's workers for ``climb``); every
``window`` batches (10 for ``autotune``, 20 for ``climb``: their own windows) the tuner reads
the window's rate and its data-wait fraction and says the count for the next window. The
wait a job sees is the share of its time not spent in its GPU step: with r its rate and
r_free the rate it would have with loading unbounded (its GPU partners as they are),
w = 1 − r / r_free. A changed count stalls the job for the configured reallocation cost
(adloader's live resize, 0.1 s by default), which is less than a new torch pool costs, and
that stall is not read (``climb``'s cold-start batches): the baselines are not made weaker.
"""

from __future__ import annotations

import math
from functools import partial

from adloader.device.device_profile import DeviceProfile
from adloader.scheduling.tuners.autotune import Autotuner
from adloader.scheduling.tuners.climb import ClimbingTuner
from adloader.sim.queues import no_daemon_config
from adloader.sim.simulator import EPS, SimConfig, SimResult, Simulator, gpu_rates
from adloader.sim.trace import Trace

WINDOW = 10  # batches a reading spans (the weak tuner's default)
TUNERS = ("autotune", "climb")


class AutotunedSimulator(Simulator):
    """``Simulator`` with no daemon: each job's workers are its own tuner's (see the module).
    ``tuner``: ``autotune`` or ``climb``; ``window``: batches a reading spans (the tuner's
    own by default)."""

    def __init__(self, trace: Trace, profile: DeviceProfile, model, config: SimConfig,
                 window: int | None = None, tuner: str = "autotune"):
        if tuner not in TUNERS:
            raise ValueError(f"no tuner {tuner!r}: one of {', '.join(TUNERS)}")
        cores = profile.cores
        workers = config.capacity or cores  # the node's workers, as the daemon would get them
        jobs = max(len(trace.jobs), 1)
        # each tuner fed once a window with the window's totals: its own window is 1
        if tuner == "climb":  # from the even split of the node's workers, within them
            start, most = max(1, workers // jobs), workers
            make = partial(ClimbingTuner, start=start, budget=workers, window=1, settle=0)
            window = window or ClimbingTuner.window
        else:  # from its first count, within the node's cores
            start, most = Autotuner().workers, cores
            make = partial(Autotuner, most=cores, window=1)
            window = window or WINDOW
        config = no_daemon_config(config, most * jobs, config.cpu_sharing)
        trace = trace.model_copy(update={"jobs": tuple(
            j.model_copy(update={"workers": start}) for j in trace.jobs)})
        super().__init__(trace, profile, model, config)
        self.window = window
        self.tuners = {j.name: make() for j in self.jobs}
        self.reading = {j.name: [0.0, 0.0, 0.0] for j in self.jobs}  # iterations, time, wait

    def _advance(self, dt: float, rates: dict[str, float]) -> None:
        if dt > 0:
            busy = [j for j in self._running() if j.paused_until <= self.t + EPS]
            consumed = {j.name: rates.get(j.name, 0.0) * j.spec.batch_size for j in busy}
            for j in busy:
                r = rates.get(j.name, 0.0)
                free = gpu_rates(busy, lambda k, j=j: math.inf if k is j else consumed[k.name])
                waited = max(0.0, 1.0 - r / free[j.name]) if free.get(j.name, 0) > 0 else 0.0
                reading = self.reading[j.name]
                reading[0] += r * dt
                reading[1] += dt
                reading[2] += waited * dt
        super()._advance(dt, rates)

    def _plan(self) -> None:
        super()._plan()
        self._observe()  # a job launched now: the end of its first window is an event

    def _observe(self) -> None:
        """A job whose window of batches is complete asks its tuner; the next window's end is
        the job's next event (its rate changes only at events, so that time is exact)."""
        rates = None
        for j in self._running():
            iterations, elapsed, waited = self.reading[j.name]
            if iterations >= self.window - 1e-6 and elapsed > 0:
                samples = iterations * j.spec.batch_size
                want = self.tuners[j.name].observe(int(round(samples)), waited,
                                                   elapsed - waited)
                self.reading[j.name] = [0.0, 0.0, 0.0]
                if want != j.workers:
                    j.workers = want
                    j.paused_until = self.t + self.realloc_cost
                    self.reallocations += 1
                    self._record()
            rates = rates if rates is not None else self._rates()
            left = self.window - self.reading[j.name][0]
            r = rates.get(j.name, 0.0)
            j.observe_at = (self.t + left / r) if r > 0 else (
                j.paused_until if j.paused_until > self.t + EPS else None)


def simulate_autotuned(trace: Trace, profile: DeviceProfile, model,
                       config: SimConfig | None = None, tuner: str = "autotune") -> SimResult:
    return AutotunedSimulator(trace, profile, model, config or SimConfig(),
                              tuner=tuner).run()
