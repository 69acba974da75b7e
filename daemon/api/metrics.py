"""``GET /metrics``: the node's gauges and counters in Prometheus' text format.

Emitted with ``prometheus_client`` (a collector read at scrape time), so label values — job
ids a tenant chose — are escaped as the exposition format says and cannot inject lines.
A job is labelled ``job_id`` (``job`` is Prometheus' own target label: a scraped ``job``
becomes ``exported_job``). What grows is a counter (``_total``: a job's samples and CPU
seconds; take ``rate()`` of them), what is set now a gauge. The daemon's own process
(``process_*``: CPU seconds, memory, open files), its collections (``python_gc_*`` by
generation, ``adloader_gc_frozen_objects``) and ``adloader_build_info`` (version, commit,
Python) come with them.
A node of a thousand jobs takes ~10 ms of CPU to render: ``MetricsCache`` serves the last
rendering and renders anew in the background when it is over ``max_age_s`` old (stale
while revalidating), so a scrape never waits for it after the first.
"""

from __future__ import annotations

import collections
import gc
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

COUNTERS = ("dropped_frames", "refused_messages", "undelivered", "loop_errors",
            "storage_errors", "launch_failures",
            "unknown_fields")  # a newer peer's fields, ignored (adloader.protocol)  # fmt: skip
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NodeCollector:
    """Reads ``snapshot()`` — {capacity, jobs: [(id, state, workers, samples so far, CPU
    seconds so far or None)], states: {state: n}, counters: {name: n}} — at each scrape."""

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
        workers = GaugeMetricFamily("adloader_job_workers", "a job's workers",
                                    labels=["job_id"])
        samples = CounterMetricFamily("adloader_job_samples", "samples a job has trained on "
                                      "(iterations x global batch)", labels=["job_id"])
        cpu = CounterMetricFamily("adloader_job_cpu_seconds", "CPU seconds of a launched "
                                  "job's processes, its workers included", labels=["job_id"])
        for job_id, _, d, samples_so_far, cpu_seconds in active:
            workers.add_metric([job_id], d)
            samples.add_metric([job_id], samples_so_far)
            if cpu_seconds is not None:  # a job the daemon launched: its processes are known
                cpu.add_metric([job_id], cpu_seconds)
        yield from (workers, samples, cpu)
        for name in COUNTERS:
            counter = CounterMetricFamily(f"adloader_{name}", name.replace("_", " "))
            counter.add_metric([], snap["counters"].get(name, 0))
            yield counter


class BuildCollector:
    """``adloader_build_info{version, commit, python} 1``."""

    def collect(self) -> Iterator:
        from adloader.host.build_info import build_info

        info = build_info()
        build = GaugeMetricFamily("adloader_build_info", "the daemon's version, commit (empty "
                                  "when unknown) and Python", labels=list(info))
        build.add_metric(list(info.values()), 1)
        yield build


class FrozenCollector:
    """``adloader_gc_frozen_objects``: the objects the daemon moved out of the interpreter's
    collections once it served (``adloader.cli.daemon``); 0 before, or where it did not."""

    def collect(self) -> Iterator:
        yield GaugeMetricFamily("adloader_gc_frozen_objects", "objects alive when the daemon "
                                "began serving, which no collection walks again",
                                value=gc.get_freeze_count())


def exposition(snapshot: Callable[[], dict]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(snapshot))
    registry.register(BuildCollector())
    registry.register(FrozenCollector())
    ProcessCollector(registry=registry)  # process_*: the daemon's own CPU, memory, files
    GCCollector(registry=registry)  # python_gc_*: the collections, by generation
    return generate_latest(registry).decode()


class MetricsCache:
    """The exposition of ``snapshot``, at most ``max_age_s`` (plus one rendering) old."""

    def __init__(self, snapshot: Callable[[], dict], max_age_s: float = 0.5):
        self._snapshot, self.max_age_s = snapshot, max_age_s
        self._text: str | None = None
        self._at = 0.0
        self._rendering = threading.Lock()

    def _render(self) -> str:
        self._text, self._at = exposition(self._snapshot), time.monotonic()
        return self._text

    def _render_and_release(self) -> None:
        try:
            self._render()
        finally:
            self._rendering.release()

    def text(self) -> str:
        text = self._text
        if text is None:  # the first scrape renders in place
            with self._rendering:
                return self._text or self._render()
        if time.monotonic() - self._at > self.max_age_s and self._rendering.acquire(False):
            threading.Thread(target=self._render_and_release, name="adloader-metrics",
                             daemon=True).start()
        return text
