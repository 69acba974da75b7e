"""``attach(loader, model=...)``: the two-line change that puts a training script under the
node daemon (A-Dloader §III-C's application master, ``client.master.master.JobMaster``).

It reads the job contract from the environment (``adloader.env``: endpoint, job id, the
job's token, initial workers, supervisor), works out the job's features for the TPM (from
``model=`` via the features table, or ``features=``), builds and starts the master, hooks it
onto the loader's batch boundaries, and chains ``sys.excepthook`` so that an uncaught error
or Ctrl-C reaches the daemon as the job's exit status.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from adloader import env as names
from adloader import limits
from adloader.errors import InputError

from . import exit_watchdog
from .node_ranks import _rank_world, topology

if TYPE_CHECKING:  # imported where used: the master's messages (pydantic) and its ZeroMQ
    from adloader.protocol import JobFeatures  # channel load when a job attaches, not when

    from .master import JobMaster  # a script imports ``adloader.client`` for its loader


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 1024:
        raise InputError(f"{name} must be a whole number 0..1024, got {raw!r}")
    return value


_WATCHED: list[JobMaster] = []  # masters whose process ending the except hook reports


def _watch_exit(master: JobMaster) -> None:
    """Chain ``sys.excepthook`` once, so an uncaught exception or Ctrl-C reaches Finish."""
    if not _WATCHED:
        previous = sys.excepthook

        def hook(kind, value, tb):
            for watched in _WATCHED:
                watched.note_exception(kind, value)
            exit_watchdog.arm(kind)  # whatever blocks the interpreter's end, the job ends
            previous(kind, value, tb)

        sys.excepthook = hook
    _WATCHED.append(master)


def stated_iterations(iterations: int | None, epochs: int | None, loader) -> int | None:
    """The iterations the job states: given, or ``epochs`` × the loader's batches an epoch
    (None when neither is known: an iterable dataset has no length)."""
    if iterations is not None or not epochs:
        return iterations
    try:
        total = int(epochs) * len(loader)
    except TypeError:
        return None
    return min(total, limits.MAX_ITERATIONS) if total > 0 else None


def _features(model, features, batch_size, gpus, iterations, loader, world_size,
              sample_shape=None):
    """The job's features for the TPM: given, or from a zoo name (the features table), or
    counted on the user's own ``torch.nn.Module`` (one sample's shape from ``sample_shape``
    or the loader's first sample)."""
    if features is not None:
        return features
    model = model if model is not None else (os.environ.get(names.MODEL) or None)
    if model is None:
        return None
    if isinstance(model, str):
        from adloader.models import features as model_features

        found = model_features(model)
    else:
        from adloader.models.features import count

        shape = tuple(sample_shape) if sample_shape else _first_sample_shape(loader)
        found = count(model, shape, type(model).__name__)
    batch = batch_size or getattr(loader, "batch_size", None)
    if not batch:
        raise InputError(f"attach: model {found.name!r}: give batch_size= (the loader has none)")
    from adloader.protocol import JobFeatures

    return JobFeatures(model=found.name[:64], batch_size=int(batch), gpus=gpus or world_size,
                       flops_g=max(found.flops_g, 1e-9), params_m=max(found.params_m, 1e-9),
                       iterations=iterations)


def _first_sample_shape(loader) -> tuple[int, ...]:
    """The shape of one input sample: the first tensor of the loader's first sample."""
    dataset = getattr(loader, "dataset", None)
    try:
        sample = dataset[0]
    except Exception:
        sample = None
    while isinstance(sample, tuple | list) and sample:
        sample = sample[0]
    shape = getattr(sample, "shape", None)
    if shape is None:
        raise InputError("attach: cannot tell the model's input shape from the loader's "
                         "first sample; pass sample_shape=(C, H, W)")
    return tuple(int(x) for x in shape)


def _stop_on_slurm_sigterm(master: JobMaster) -> None:
    """Under Slurm, SIGTERM is ``scancel`` (or the time limit): the job ends at its next batch
    boundary and the daemon records it cancelled (Slurm sends SIGKILL ``KillWait`` seconds
    later, 30 by default, if it has not). Only where SIGTERM still has its default action
    and only from the main thread (where Python runs handlers); elsewhere SIGTERM ends the
    process as it always did, recorded as killed by SIGTERM."""
    if (not os.environ.get("SLURM_JOB_ID")
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return
    signal.signal(signal.SIGTERM, lambda _sig, _frame: master.stop_requested("slurm"))


def check_drivable(loader) -> None:
    """InputError, in one line, unless ``loader`` has what the master drives: ``resize``,
    ``release`` and an ``on_batch`` hook (an ``ElasticDataLoader`` has them; torch's own
    ``DataLoader`` fixes its workers when an epoch starts, so a daemon could never move them)."""
    if loader is None:
        return
    missing = [name for name in ("resize", "release") if not callable(getattr(loader, name, None))]
    if not hasattr(loader, "on_batch"):
        missing.append("on_batch")
    if missing:
        kind = f"{type(loader).__module__}.{type(loader).__qualname__}"
        raise InputError(f"attach: cannot drive a {kind} (it has no {', '.join(missing)}): build "
                         "the loader as adloader.ElasticDataLoader(...), which takes the same "
                         "arguments as torch.utils.data.DataLoader")


def attach(loader=None, *, model=None, features: JobFeatures | None = None,
           sample_shape: tuple[int, ...] | None = None,
           batch_size: int | None = None, gpus: int | None = None,
           iterations: int | None = None, requested: int | None = None,
           endpoint: str | None = None, job: str | None = None, token: str | None = None,
           checkpoint_dir: str | os.PathLike | None = None,
           state: Callable[[], dict] | None = None, log: Callable[[str], None] = _stderr,
           connect_timeout_s: float = 2.0,
           miss_load: Callable[[], float] | None = None,
           share_cache: str | None = None, epochs: int | None = None) -> JobMaster:
    """Put ``loader`` under the node daemon; returns the job's master (already started).

    endpoint/job/token default to ADLOADER_ENDPOINT/ADLOADER_JOB/ADLOADER_JOB_TOKEN (set by
    the daemon's launcher or `adloader run`), ADLOADER_WORKERS is the initial worker count,
    ADLOADER_SUPERVISOR who reports the process's exit status, ADLOADER_MODEL a
    fallback for ``model`` and ADLOADER_CHECKPOINT_DIR for ``checkpoint_dir``. ``model`` —
    a zoo name, or your own ``torch.nn.Module`` (its FLOPs counted with
    ``torch.utils.flop_counter`` on one sample of ``sample_shape``, default: the loader's
    first sample) — gives the FLOPs and parameters of ``features``; ``gpus`` defaults to the
    world size. ``state()`` returns the state dicts to checkpoint on Pause. In a multi-rank
    job the daemon's workers are the job's; each rank runs its share, in proportion to
    ``miss_load()`` (its predicted cache misses; default: its data wait per batch).
    ``share_cache``: a name for the dataset (a ``CachedDataset`` under a seeded loader);
    jobs on the node naming the same dataset read through one node cache, sized by the
    daemon (``--node-cache-mb``); ``epochs`` (or ``iterations``) says how far it reads — and
    how long the job runs, which the daemon's default policy plans on (a job stating neither
    puts its node on ``fair`` while it runs).
    """
    check_drivable(loader)
    endpoint = endpoint or os.environ.get(names.ENDPOINT) or None
    job = job or os.environ.get(names.JOB) or f"{socket.gethostname()}-{os.getpid()}-" \
        f"{secrets.token_hex(3)}"  # not guessable from `ps`: nobody can register it first
    token = token if token is not None else os.environ.get(names.JOB_TOKEN, "")
    if endpoint and not token:  # started by hand with no token: make one (trust on first use)
        token = secrets.token_urlsafe(24)
    checkpoint_dir = checkpoint_dir or os.environ.get(names.CHECKPOINT_DIR) or None
    built = getattr(loader, "num_workers", 0) or 0
    workers = _int_env(names.WORKERS)
    if workers is not None and loader is not None and workers != built:
        loader.resize(workers)
    workers = built if workers is None else workers
    rank, world_size = _rank_world()
    local_rank, local_world, _, _ = topology(rank, world_size)  # a node's part: its GPUs
    feats = _features(model, features, batch_size, gpus,
                      stated_iterations(iterations, epochs, loader), loader, local_world,
                      sample_shape)
    if endpoint and feats is None and local_rank == 0:
        raise InputError(f"attach: job {job!r}: give model= (your torch model, or a zoo name "
                         "such as 'Resnet18') or features=JobFeatures(...) so the daemon can "
                         "predict its throughput")
    data = on_cache = None
    if share_cache and endpoint and rank == 0:
        from adloader.client.data.node_cache import data_spec, grant_handler

        data = data_spec(loader, share_cache, epochs, iterations)
        on_cache = grant_handler(loader, data.epochs, log)
    from .master import JobMaster

    master = JobMaster(loader, job=job, token=token, endpoint=endpoint, features=feats,
                       workers=workers, requested=built if requested is None else requested,
                       checkpoint_dir=checkpoint_dir, state=state, log=log,
                       connect_timeout_s=connect_timeout_s, miss_load=miss_load,
                       supervisor=os.environ.get(names.SUPERVISOR) or None,
                       data=data, on_cache=on_cache)
    _watch_exit(master)
    _stop_on_slurm_sigterm(master)
    if data is not None and world_size == 1 and master.wait_connected(connect_timeout_s):
        master.apply_pending()  # the Allocation now, so the first workers see the cache
    if loader is not None:
        previous = getattr(loader, "on_batch", None)
        if previous is None:
            loader.on_batch = master.on_batch
        else:
            def chained(stats, _previous=previous, _master=master):
                _previous(stats)
                _master.on_batch(stats)

            loader.on_batch = chained
    return master
