"""`adloader daemon` (the node daemon) and `adloader run -- COMMAND` (a job started by hand)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import socket
import sys
import threading

from adloader.config import DaemonConfig, listen_address, validate
from adloader.daemon.ops.settings import ensure_token, is_loopback, load_config
from adloader.errors import DaemonBusy, InputError
from adloader.host import heap

from . import _options

# How long a thread runs before the interpreter hands the GIL to another that waits (Python's
# default 5 ms): a REST read waits for it at each hand-over between the event loop, its worker
# thread and a busy control loop. At 1 ms, under `adloader bench soak --jobs 20000` (4 runs
# each way, interleaved), the median read's p99 went 33-46 -> 27-31 ms and the reads over
# 50 ms 3-5 -> 1-3 of 13; the burst the daemon takes did not move (docs/benchmarks.md).
GIL_SWITCH_S = 0.001

def _freeze_startup_objects() -> int:
    """Move every object alive once the daemon serves (its modules, the app, the node) out of
    the interpreter's collections for good; how many. A full (generation-2) collection walks
    every tracked object while it holds the GIL: under `adloader bench soak --jobs 20000`,
    with the ~75,000 the daemon's start leaves alive, each took 51-68 ms (wall time, timed in
    the daemon), about every 6 s of the burst, and a read arriving meanwhile waited for it;
    frozen, 2-6 ms (docs/benchmarks.md, "The collections a read waited for"). Garbage is
    collected first, so none is kept.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _serve_socket(host: str, port: int, flag: str = "--port") -> socket.socket:
    """A listening socket (REST's, the metrics listener's), bound before anything else is
    touched (DaemonBusy if taken: ``flag`` says which setting to change)."""
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
                         f"there? give {flag})") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _daemon(args) -> int:
    """The daemon: claim the state dir, bind REST, recover, serve until SIGTERM or SIGINT,
    then stop accepting, flush the store, remove the control socket and exit 0. Running
    jobs keep training and re-attach to the next daemon."""
    if args.stop:
        return _stop(args)
    if args.detach:
        return _detach(args)
    heap.cap_arenas()  # glibc's knobs before any thread: the control loop's, ZeroMQ's,
    heap.fix_mmap_threshold()  # the requests'
    import uvicorn

    from adloader.daemon.api import metrics_listener
    from adloader.daemon.api.app import create_app
    from adloader.daemon.api.service_impl import NodeApi
    from adloader.daemon.node import Node
    from adloader.daemon.ops import logs
    from adloader.daemon.ops.state_lock import StateLock
    from adloader.daemon.ops.systemd import Notifier

    notifier = Notifier.from_environment()  # taken out of the environment the jobs inherit
    config = _settings(args)
    if not is_loopback(config.host) and not config.token_path.exists():
        raise InputError(f"refusing to listen on {config.host} (not loopback) without a token "
                         f"provisioned beforehand in {config.token_path}")
    metrics_listener.check(config)  # not on a host-network pod; off loopback, a token given
    os.umask(0o077)  # the state dir's files: the daemon's user's alone
    lock = StateLock(config.state_path)
    lock.acquire(f"http://{config.host}:{config.port}", config.control_endpoint)
    try:
        rest = _serve_socket(config.host, config.port)
        scrape = (_serve_socket(*listen_address(config.metrics_listen), "--metrics-listen")
                  if config.metrics_listen else None)
        token, _ = ensure_token(config.token_path)
        metrics_token, _ = ensure_token(config.metrics_token_path, group_may_read=True)
        logs.configure(args.log_level, args.log_format)
        sys.setswitchinterval(GIL_SWITCH_S)  # before the control loop's thread starts
        node = Node(config)
        api = NodeApi(node)
        listener = None
        try:
            node.start()
            port = rest.getsockname()[1]
            gpus = f"{node.gpus} GPUs" + (" (none found: emulated)" if node.gpus_emulated
                                          else "")
            logs.say(f"adloader daemon: REST http://{config.host}:{port} (token in "
                     f"{config.token_path}), control {config.control_endpoint}, "
                     f"{node.capacity} workers, {gpus}, policy {config.policy}",
                     args.log_format)
            if scrape is not None:  # GET /metrics alone, the read-only token alone
                listener = metrics_listener.MetricsListener(
                    scrape, metrics_listener.MetricsApp(api.metrics, metrics_token)).start()
                at_host, at_port = scrape.getsockname()[:2]
                logs.say(f"adloader daemon: metrics http://{_url_host(at_host)}:{at_port}/metrics "
                         f"(the read-only token in {config.metrics_token_path})",
                         args.log_format)
            app = create_app(api, token, metrics_token, config.metrics_on_loopback)
            server = _Server(uvicorn.Config(app, log_level="warning", log_config=None))

            def ready() -> None:  # serving: systemd may start what comes after the daemon
                _freeze_startup_objects()
                notifier.ready(f"serving on {config.host}:{port}")
                notifier.watchdog(node.alive)

            server.on_started = ready
            server.run(sockets=[rest])
            notifier.stopping()
        finally:
            if listener is not None:
                listener.stop()
            node.stop()
    finally:
        lock.release()
    logs.say("adloader daemon: stopped; running jobs keep training", args.log_format)
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _settings(args):
    config = load_config(args.config)
    overrides = {k: v for k, v in vars(args).items()
                 if k in DaemonConfig.__dataclass_fields__ and v is not None}
    return validate(DaemonConfig(**{**config.__dict__, **overrides}))


def _detach(args) -> int:
    """Start the daemon in the background (a session of its own, its output in
    STATE_DIR/daemon.log) and return once it answers, or say why it did not."""
    import subprocess
    import sys
    import time

    import httpx

    config = _settings(args)
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = config.state_path / "daemon.log"
    argv = ["daemon", "--log-level", args.log_level, "--log-format", args.log_format]
    for flag, dest in FLAGS.items():  # the same settings, in the foreground of its own session
        value = getattr(args, dest, None)
        if value is True:  # a switch
            argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "adloader", *argv], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    url = f"http://{config.host}:{config.port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            raise InputError(f"the daemon exited with {proc.returncode}: "
                             f"{tail[0] if tail else 'see ' + str(log_path)}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                print(f"adloader daemon: running (pid {proc.pid}), REST {url}, "
                      f"log {log_path}; `adloader daemon --stop` stops it")
                return 0
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise InputError(f"the daemon did not answer within 120 s; see {log_path}")


def _stop(args) -> int:
    """Stop the daemon of the state dir gracefully (SIGTERM); its jobs keep training."""
    import json
    import time

    from adloader.daemon.ops.state_lock import StateLock

    config = _settings(args)
    lock = StateLock(config.state_path)
    try:
        holder = json.loads(lock.path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    pid = holder.get("pid")
    if not pid or lock.free():
        raise InputError(f"no daemon is running on {config.state_path}")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not lock.free():
        time.sleep(0.1)
    if not lock.free():
        raise InputError(f"the daemon (pid {pid}) did not stop within 30 s")
    print(f"adloader daemon: stopped (pid {pid}); running jobs keep training")
    return 0


def _ui(args) -> int:
    """The operator's page, with a link that signs in (the token stays in the fragment,
    which browsers never send)."""
    from adloader.remote.rest_client import DaemonClient

    client = DaemonClient.from_environment(args.url, args.token_file)
    if not client.token:
        raise InputError(f"no token to sign in with ({client.token_source} unreadable)")
    link = f"{client.url}/ui#token={client.token}"
    print(link)
    if args.open:
        import webbrowser

        webbrowser.open(link)
    return 0


def _server_class():
    from adloader.daemon.api.http_server import server_class

    class Server(server_class()):
        """The daemon's uvicorn (a one-second tick), whose SIGTERM/SIGINT end a graceful
        shutdown and exit 0 (uvicorn itself re-raises the signal afterwards, which ends the
        process with signal status)."""

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
    """Start COMMAND as a job of the running daemon (``client.master.run``): it registers itself
    through attach(), and ``run`` reports its exit status and exits with it."""
    from adloader.client.master.run import run

    config = load_config(args.config)
    command = args.command[1:] if args.command and args.command[0] == "--" else args.command
    return run(command, config.control_endpoint)


# the daemon's flags: flag -> (setting, type, help); each overrides the settings file and
# the ADLOADER_<SETTING> variables (adloader.config)
SETTINGS = {
    "--host": ("host", str, "REST address (loopback unless a token was provisioned)"),
    "--port": ("port", int, "REST port (default 7070)"),
    "--state-dir": ("state_dir", str, "state folder (default ~/.local/state/adloader)"),
    "--policy": ("policy", str, "allocation policy: ftf (default), fair, jct, optimal, waa, …"),
    "--capacity": ("capacity", int, "loading workers of the node (default: the cores)"),
    "--gpus": ("gpus", int, "GPUs of the node (default: CUDA's, else 4 emulated)"),
    "--jobs-per-gpu": ("jobs_per_gpu", int, "jobs that may time-share one GPU (default 2)"),
    "--arrival-window": ("arrival_window_s", float, "arrival buffer, seconds (default 30): "
                         "how long a job that cannot start now waits for its decision"),
    "--arrival-settle": ("arrival_settle_s", float, "seconds a job that could start now waits "
                         "for its decision, so jobs submitted together share one (default "
                         "0.05)"),
    "--hold-arrivals": ("hold_arrivals", bool, "every job waits the whole arrival window, as "
                        "in the paper (ablation)"),
    "--completion-window": ("completion_window_s", float, "completion buffer (default 30)"),
    "--open-loop": ("open_loop", bool, "apply each plan at once, without measuring it "
                    "(ablation; by default a new set of jobs starts from the even split and "
                    "the plan is walked toward in moves the node's measurements keep or "
                    "undo)"),
    "--loop-most": ("loop_most", float, "the most workers in all the closed loop's capacity "
                    "probes run, × the capacity (default 1.5; 1: never past the capacity); a "
                    "probe's workers stay only if the node's measured rate rose"),
    "--heartbeat": ("heartbeat_s", float, "heartbeat interval of the jobs (default 1)"),
    "--profile": ("profile", str, "device profile for the prior TPM (default paper)"),
    "--socket-group": ("socket_group", str, "group whose members' jobs may connect"),
    "--cancel-grace": ("cancel_grace_s", float, "seconds a cancelled job has to stop"),
    "--node-cache-mb": ("node_cache_mb", int, "MiB of node cache shared by the jobs that read "
                        "one dataset, split among datasets by predicted hits (0 = none)"),
    "--cpu-shares": ("cpu_shares", str, "put each job in a cgroup of its own under this parent "
                     "(e.g. adloader), its CPU weight following its workers (needs root)"),
    "--cpu-share-rule": ("cpu_share_rule", str, "how the groups' weights follow the plan: "
                         "workers (by each job's workers, the default), turn (a job held at "
                         "one worker while others hold more gets the least weight) or order "
                         "(8× the next job's weight in a ranking: the one a fluid model of "
                         "strict priority ends best, the least mean JCT within 2 %% of the "
                         "least makespan)"),
    "--retain-days": ("retain_days", float, "days ended jobs, their events and logs are kept "
                      "(default 7)"),
    "--retain-jobs": ("retain_jobs", int, "ended jobs kept at most, the oldest pruned first "
                      "(default 10000)"),
    "--retain-events": ("retain_events", int, "events kept at most (default 200000)"),
    "--metrics-listen": ("metrics_listen", str, "HOST:PORT serving GET /metrics alone, with the "
                         "read-only metrics token alone (e.g. 0.0.0.0:9464 on a pod's own "
                         "network; refused on a host-network pod)"),
}
FLAGS = {"--config": "config", **{flag: dest for flag, (dest, *_) in SETTINGS.items()}}


def register(sub) -> None:
    p = sub.add_parser("daemon", help="run the node daemon (REST + ZeroMQ control channel)")
    _options.config_option(p)
    for flag, (dest, kind, text) in SETTINGS.items():
        if kind is bool:  # a switch: on when given, else the settings file's
            p.add_argument(flag, dest=dest, action="store_const", const=True, default=None,
                           help=text)
        else:
            p.add_argument(flag, dest=dest, type=kind, default=None, help=text)
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   default="info", help="the daemon's log: least severe level shown "
                                        "(default info)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="the daemon's log: text lines, or one JSON object a line "
                        "(time, level, logger, message)")
    p.add_argument("-d", "--detach", action="store_true",
                   help="run in the background; return once it answers")
    p.add_argument("--stop", action="store_true",
                   help="stop the state dir's daemon gracefully (jobs keep training)")
    p.set_defaults(func=_daemon)
    p = sub.add_parser("ui", parents=[_options.daemon_options()],
                       help="the operator's page: a link that signs in")
    p.add_argument("--open", action="store_true", help="open it in a browser")
    p.set_defaults(func=_ui)
    p = sub.add_parser("run", help="run a training command as a job of the daemon")
    _options.config_option(p)
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)

