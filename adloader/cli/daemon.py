"""`adloader daemon` (the node daemon) and `adloader run -- COMMAND` (a job started by hand)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import threading

from adloader.config import DaemonConfig, validate
from adloader.daemon.settings import ensure_token, is_loopback, load_config
from adloader.errors import DaemonBusy, InputError

from . import _options


def _serve_socket(host: str, port: int) -> socket.socket:
    """The REST socket, bound before anything else is touched (DaemonBusy if taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: without it a keep-alive client waits out the peer's
    # delayed ACK (40 ms) on every response (asyncio sets it only on sockets it makes itself)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise DaemonBusy(f"cannot listen on {host}:{port}: {exc.strerror} (another daemon "
                         "there? give --port)") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _daemon(args) -> int:
    """The daemon: claim the state dir, bind REST, recover, serve until SIGTERM or SIGINT,
    then stop accepting, flush the store, remove the control socket and exit 0. Running
    jobs keep training and re-attach to the next daemon."""
    import uvicorn

    from adloader.daemon.api import create_app
    from adloader.daemon.node import Node
    from adloader.daemon.state_lock import StateLock

    config = load_config(args.config)
    overrides = {k: v for k, v in vars(args).items()
                 if k in DaemonConfig.__dataclass_fields__ and v is not None}
    config = validate(DaemonConfig(**{**config.__dict__, **overrides}))
    if not is_loopback(config.host) and not config.token_path.exists():
        raise InputError(f"refusing to listen on {config.host} (not loopback) without a token "
                         f"provisioned beforehand in {config.token_path}")
    os.umask(0o077)  # the state dir's files: the daemon's user's alone
    lock = StateLock(config.state_path)
    lock.acquire(f"http://{config.host}:{config.port}", config.control_endpoint)
    try:
        rest = _serve_socket(config.host, config.port)
        token, _ = ensure_token(config.token_path)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        node = Node(config)
        try:
            node.start()
            port = rest.getsockname()[1]
            print(f"adloader daemon: REST http://{config.host}:{port} (token in "
                  f"{config.token_path}), control {config.control_endpoint}, "
                  f"{node.capacity} workers, {node.gpus} GPUs, policy {config.policy}",
                  flush=True)
            server = _Server(uvicorn.Config(create_app(node, token), log_level="warning"))
            server.run(sockets=[rest])
        finally:
            node.stop()
    finally:
        lock.release()
    print("adloader daemon: stopped; running jobs keep training", flush=True)
    return 0


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn, whose SIGTERM/SIGINT end a graceful shutdown and exit 0 (uvicorn itself
        re-raises the signal afterwards, which ends the process with signal status)."""

        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


def _Server(config):  # noqa: N802 (a class made on demand: uvicorn is imported lazily)
    return _server_class()(config)


def _run(args) -> int:
    """Start COMMAND as a job of the running daemon (``client.run``): it registers itself
    through attach(), and ``run`` reports its exit status and exits with it."""
    from adloader.client.run import run

    config = load_config(args.config)
    command = args.command[1:] if args.command and args.command[0] == "--" else args.command
    return run(command, config.control_endpoint)


def register(sub) -> None:
    p = sub.add_parser("daemon", help="run the node daemon (REST + ZeroMQ control channel)")
    _options.config_option(p)
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
    p.add_argument("--socket-group", dest="socket_group", default=None,
                   help="group whose members' jobs may use the control socket")
    p.add_argument("--cancel-grace", dest="cancel_grace_s", type=float, default=None,
                   help="seconds a cancelled job has to stop before it is signalled")
    p.set_defaults(func=_daemon)
    p = sub.add_parser("run", help="run a training command as a job of the daemon")
    _options.config_option(p)
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)

