"""Daemon settings: embedded defaults, then a TOML file's table, then ``ADLOADER_*`` variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

from adloader import env
from adloader.errors import InputError


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return os.path.join(base, "adloader")


# how each job's CPU weight follows the plan (adloader.host.cpu_share): by its workers, in turn,
# or in a ranking (the one a fluid model of strict priority ends best: fluid_order)
CPU_SHARE_RULES = ("workers", "turn", "order")
# how soon an arrival that could start now is decided (the daemon's and the simulator's): long
# enough that a client's burst of submissions (a few ms each) shares one decision, short beside
# a job's own start-up (~2 s here); a later arrival of a longer burst is decided again before
# the earlier ones have registered, so their GPUs (placed in arrival order) and the workers
# they register to are the same (docs/design.md, "The loop")
ARRIVAL_SETTLE_S = 0.05


@dataclass(frozen=True)
class DaemonConfig:
    host: str = "127.0.0.1"  # REST; loopback unless a token protects it
    port: int = 7070
    state_dir: str = ""  # SQLite file, token file, job logs ("" = ~/.local/state/adloader)
    endpoint: str = ""  # ZeroMQ ROUTER ("" = ipc://STATE_DIR/control.sock)
    socket_group: str = ""  # group whose members' jobs may connect ("" = the daemon's user)
    policy: str = "ftf"  # allocation.DEFAULT_POLICY; allocation.POLICIES, fair:α, jct:α, ftf:α
    capacity: int = 0  # loading workers of the node (0 = logical cores)
    gpus: int = 0  # GPUs of the node (0 = CUDA devices, at least 1)
    jobs_per_gpu: int = 2  # jobs that may time-share one GPU
    arrival_window_s: float = 30.0  # arrival buffer (paper: 30 s): arrivals that cannot start
    arrival_settle_s: float = ARRIVAL_SETTLE_S  # an arrival that could start is decided then
    hold_arrivals: bool = False  # every arrival waits the whole window (the paper's buffer)
    completion_window_s: float = 30.0  # completion buffer (paper: 30 s)
    open_loop: bool = False  # apply each plan at once, unmeasured (ablation; default: the
    # closed loop, adloader.scheduling.closed_loop: even split first, then measured moves)
    loop_most: float = 1.5  # the loop's capacity probes: workers in all at most × capacity
    heartbeat_s: float = 1.0  # what masters are told
    lost_after_s: float = 0.0  # no heartbeat for this long: lost (0 = 2 × heartbeat_s + 1)
    cancel_grace_s: float = 10.0  # a cancelled job's time to stop before it is signalled
    profile: str = ""  # device profile for emulated GPU steps ("" = none)
    token_file: str = ""  # bearer token file ("" = STATE_DIR/token)
    metrics_token_file: str = ""  # read-only token for GET /metrics ("" = STATE_DIR/metrics.token)
    metrics_on_loopback: bool = False  # serve /metrics without a token to 127.0.0.1 / ::1
    metrics_listen: str = ""  # HOST:PORT of a listener serving GET /metrics alone ("" = none)
    node_cache_mb: int = 0  # node cache shared by the jobs that read one dataset (0 = none)
    cpu_shares: str = ""  # cgroup parent of the jobs' CPU groups ("" = no groups)
    cpu_share_rule: str = "workers"  # CPU_SHARE_RULES: weights by workers, or in turn
    retain_days: float = 7.0  # ended jobs, their events and logs are kept this long ...
    retain_jobs: int = 10000  # ... and at most this many ended jobs (the oldest go first)
    retain_events: int = 200000  # events kept at most, the node's own included

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir or _default_state_dir())

    @property
    def control_endpoint(self) -> str:
        return self.endpoint or f"ipc://{self.state_path / 'control.sock'}"

    @property
    def token_path(self) -> Path:
        return Path(self.token_file) if self.token_file else self.state_path / "token"

    @property
    def metrics_token_path(self) -> Path:
        return (Path(self.metrics_token_file) if self.metrics_token_file
                else self.state_path / "metrics.token")

    @property
    def lost_timeout_s(self) -> float:
        return self.lost_after_s or 2 * self.heartbeat_s + 1.0


def _coerce(name: str, kind, raw, origin: str):
    try:
        if kind in (bool, "bool"):
            if isinstance(raw, bool):
                return raw
            if str(raw).strip().lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).strip().lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind in (int, "int"):
            return int(raw)
        if kind in (float, "float"):
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        raise InputError(f"{origin}: setting {name!r} must be {kind}, got {raw!r}") from None


def config_from(data: dict | None = None, environ=None, origin: str = "config") -> DaemonConfig:
    """Defaults, overridden by ``data`` (a parsed TOML table), overridden by
    ADLOADER_<SETTING> variables. Reading the file is the caller's (``daemon.ops.settings``)."""
    environ = os.environ if environ is None else environ
    types = {f.name: f.type for f in fields(DaemonConfig)}
    values: dict = {}
    data = (data or {}).get("daemon", data or {})
    for key, raw in data.items():
        if key not in types:
            raise InputError(f"{origin}: unknown setting {key!r}")
        values[key] = _coerce(key, types[key], raw, origin)
    for key, kind in types.items():
        raw = environ.get(env.setting(key))
        if raw is not None and raw != "":
            values[key] = _coerce(key, kind, raw, env.setting(key))
    return validate(replace(DaemonConfig(), **values))


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets: ``[::]:9464``) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InputError(f"setting 'metrics_listen' must be HOST:PORT (e.g. 0.0.0.0:9464, "
                         f"[::]:9464), got {text!r}")
    return host, int(port)


def validate(cfg: DaemonConfig) -> DaemonConfig:
    """The settings' ranges, whatever set them (file, environment or command line)."""
    if cfg.port < 0 or cfg.port > 65535:
        raise InputError(f"setting 'port' must be 0..65535, got {cfg.port}")
    if cfg.metrics_listen:
        listen_address(cfg.metrics_listen)
    from adloader.scheduling.policies.registry import get_policy

    get_policy(cfg.policy)  # an unknown name stops here, not in the scheduling loop
    if cfg.cpu_share_rule not in CPU_SHARE_RULES:
        raise InputError(f"setting 'cpu_share_rule' must be one of "
                         f"{', '.join(CPU_SHARE_RULES)}, "
                         f"got {cfg.cpu_share_rule!r}")
    if cfg.node_cache_mb < 0:
        raise InputError(f"setting 'node_cache_mb' must be 0 or more, got {cfg.node_cache_mb}")
    if not cfg.retain_days > 0:
        raise InputError(f"setting 'retain_days' must be positive, got {cfg.retain_days}")
    for key, least in (("retain_jobs", 1), ("retain_events", 1000), ("loop_most", 1)):
        if getattr(cfg, key) < least:
            raise InputError(f"setting {key!r} must be at least {least}, "
                             f"got {getattr(cfg, key)}")
    if cfg.jobs_per_gpu < 1:
        raise InputError(f"setting 'jobs_per_gpu' must be at least 1, got {cfg.jobs_per_gpu}")
    for key in ("arrival_window_s", "arrival_settle_s", "completion_window_s", "heartbeat_s",
                "cancel_grace_s"):
        if getattr(cfg, key) < 0 or (key == "heartbeat_s" and cfg.heartbeat_s == 0):
            raise InputError(f"setting {key!r} must be positive")
    return cfg
