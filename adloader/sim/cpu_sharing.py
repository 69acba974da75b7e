"""How the node's CPU reaches each job's loader workers in a simulated truth.

``static`` (the model's own assumption, an ablation): every worker of the node holds its
share of the node's loading L(D)/D whether it needs it or not, so a job whose GPU binds
wastes the CPU its idle workers hold.

``kernel`` (what a Linux node does, the default truth for the no-daemon baselines and the
policies alike): a worker whose prefetch queue is full sleeps and yields; the CPU goes to
the workers that can run. With per-worker rate s, job i loads min(d_i·s, what its GPU
consumes) and keeps d_i·f_i workers runnable (f_i the busy fraction); the node's runnable
workers D' = Σ d_i·f_i then load L(D') in all, s = L(D')/D'. The fixed point is found by
bisection on s: a higher s leaves fewer workers runnable (D' falls), and L(D')/D' does not
fall as D' does, so one s balances it.

With a truth that measured its loading side by side (``adloader.device.loading_surface``), each
job's workers load at s·c_i, c_i the job's contention factor at the jobs' workers: with every
worker runnable that is the measured rate of each job; the kernel's redistribution acts on top.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

MODES = ("kernel", "static")
ROUNDS = 48  # bisection steps: s to 2^-48 of its range


def kernel_rates(workers: Mapping[str, float], node_loading: Callable[[float], float],
                 iteration_rates: Callable[[Callable[[str], float]], dict[str, float]],
                 batch: Mapping[str, int],
                 factor: Mapping[str, float] | None = None) -> dict[str, float]:
    """Iterations/s of each job when sleeping workers yield their CPU (see the module).

    ``iteration_rates(loading)`` gives iterations/s for a per-job loading rate (GPU sharing
    included); ``node_loading(D)`` is L(D); ``factor`` each job's contention factor c_i (1 when
    not given)."""
    total = sum(workers.values())
    if total <= 0:
        return iteration_rates(lambda name: 0.0)

    c = {n: (factor or {}).get(n, 1.0) for n in workers}

    def runnable(s: float) -> tuple[float, dict[str, float]]:
        rates = iteration_rates(lambda name: workers[name] * s * c[name])
        d = sum(min(1.0, rates[n] * batch[n] / (workers[n] * s * c[n])) * workers[n]
                for n in workers if workers[n] > 0 and c[n] > 0)
        return d, rates

    lo = node_loading(total) / total  # every worker runnable: the least s can be
    hi = max(node_loading(1.0), lo)  # one worker alone: the most
    rates = runnable(lo)[1]
    for _ in range(ROUNDS):
        mid = 0.5 * (lo + hi)
        d, rates_mid = runnable(mid)
        target = node_loading(d) / d if d > 1e-12 else hi
        if target >= mid:  # the CPU left by sleeping workers lifts s further
            lo, rates = mid, rates_mid
        else:
            hi = mid
    return rates
