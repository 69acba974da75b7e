"""``GET /metrics``: the node's gauges and counters in Prometheus' text format.

Emitted with ``prometheus_client`` (a collector read at scrape time), so label values — job
ids a tenant chose — are escaped as the exposition format says and cannot inject lines.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

COUNTERS = ("dropped_frames", "refused_messages", "undelivered", "loop_errors",
            "storage_errors", "launch_failures")  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NodeCollector:
    """Reads ``snapshot()`` — {capacity, jobs: [(id, state, workers, samples/s, cpu %)],
    states: {state: n}, counters: {name: n}} — at each scrape."""

    def __init__(self, snapshot: Callable[[], dict]):
        self._snapshot = snapshot

    def collect(self) -> Iterator:
        snap = self._snapshot()
        yield GaugeMetricFamily("adloader_capacity_workers", "loading workers of the node",
                                value=snap["capacity"])
        active = [j for j in snap["jobs"] if j[1] in ("running", "paused")]
        yield GaugeMetricFamily("adloader_node_workers", "workers allocated to jobs",
                                value=sum(j[2] for j in active))
        states = GaugeMetricFamily("adloader_jobs", "jobs by state", labels=["state"])
        for state, n in sorted(collections.Counter(snap["states"]).items()):
            states.add_metric([state], n)
        yield states
        workers = GaugeMetricFamily("adloader_job_workers", "a job's workers", labels=["job"])
        rate = GaugeMetricFamily("adloader_job_samples_per_second", "a job's measured rate",
                                 labels=["job"])
        cpu = GaugeMetricFamily("adloader_job_cpu_percent", "CPU of a launched job's processes",
                                labels=["job"])
        for job_id, _, d, samples_per_s, cpu_percent in active:
            workers.add_metric([job_id], d)
            rate.add_metric([job_id], samples_per_s)
            cpu.add_metric([job_id], cpu_percent)
        yield from (workers, rate, cpu)
        for name in COUNTERS:
            counter = CounterMetricFamily(f"adloader_{name}", name.replace("_", " "))
            counter.add_metric([], snap["counters"].get(name, 0))
            yield counter


def exposition(snapshot: Callable[[], dict]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(snapshot))
    return generate_latest(registry).decode()
