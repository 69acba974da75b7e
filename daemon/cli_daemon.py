"""`adloader daemon` (the node daemon) and `adloader run -- COMMAND` (a job started by hand)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import socket
import uuid
from pathlib import Path

from adloader.cli import env_default
from adloader.config import DaemonConfig, validate
from adloader.daemon.settings import load_config
from adloader.errors import InputError


def ensure_token(path: Path) -> tuple[str, bool]:
    """The bearer token, created 0600 if missing; (token, whether it existed before)."""
    if path.exists():
        token = path.read_text().strip()
        if not token:
            raise InputError(f"{path}: the token file is empty")
        if path.stat().st_mode & 0o077:
            raise InputError(f"{path}: the token file must not be readable by others (chmod 600)")
        return token, True
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token, False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _daemon(args) -> int:
    import uvicorn

    from adloader.daemon.api import create_app
    from adloader.daemon.node import Node

    config = load_config(args.config)
    overrides = {k: v for k, v in vars(args).items()
                 if k in DaemonConfig.__dataclass_fields__ and v is not None}
    config = validate(DaemonConfig(**{**config.__dict__, **overrides}))
    if not is_loopback(config.host) and not config.token_path.exists():
        raise InputError(f"refusing to listen on {config.host} (not loopback) without a token "
                         f"provisioned beforehand in {config.token_path}")
    token, _ = ensure_token(config.token_path)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    node = Node(config)
    node.start()
    print(f"adloader daemon: REST http://{config.host}:{config.port} (token in "
          f"{config.token_path}), control {config.control_endpoint}, {node.capacity} workers, "
          f"{node.gpus} GPUs, policy {config.policy}", flush=True)
    server = uvicorn.Server(uvicorn.Config(create_app(node, token), host=config.host,
                                           port=config.port, log_level="warning"))
    try:
        server.run()
    finally:
        node.stop()
    return 0


def _run(args) -> int:
    """Start COMMAND as a job of the running daemon: it registers itself through attach()."""
    import subprocess

    if not args.command:
        raise InputError("adloader run: give the command after --")
    config = load_config(args.config)
    env = dict(os.environ)
    env.setdefault("ADLOADER_ENDPOINT", config.control_endpoint)
    env.setdefault("ADLOADER_JOB", f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    env.setdefault("ADLOADER_TOKEN", secrets.token_hex(16))
    command = args.command[1:] if args.command[0] == "--" else args.command
    try:
        return subprocess.call(command, env=env)
    except OSError as exc:
        raise InputError(f"adloader run: cannot start {command[0]!r}: {exc.strerror}") from None


def register(sub) -> None:
    p = sub.add_parser("daemon", help="run the node daemon (REST + ZeroMQ control channel)")
    p.add_argument("--config", default=env_default("config"), help="TOML file of settings")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--state-dir", dest="state_dir", default=None)
    p.add_argument("--policy", default=None)
    p.add_argument("--capacity", type=int, default=None, help="loading workers of the node")
    p.add_argument("--gpus", type=int, default=None)
    p.add_argument("--jobs-per-gpu", dest="jobs_per_gpu", type=int, default=None,
                   help="jobs that may time-share one GPU (default 2)")
    p.add_argument("--arrival-window", dest="arrival_window_s", type=float, default=None)
    p.add_argument("--completion-window", dest="completion_window_s", type=float, default=None)
    p.add_argument("--heartbeat", dest="heartbeat_s", type=float, default=None)
    p.add_argument("--profile", default=None, help="device profile for the prior TPM")
    p.set_defaults(func=_daemon)
    p = sub.add_parser("run", help="run a training command as a job of the daemon")
    p.add_argument("--config", default=env_default("config"))
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)

