"""The metrics listener (``metrics_listen = "HOST:PORT"``): a second address that serves
``GET /metrics`` alone, for an in-cluster Prometheus to scrape on the pod's IP.

It takes the read-only metrics token (``metrics_token_file``) and nothing else: not the REST
token, which grants everything and so never has to travel over the pod network. Without
that token it answers 401, any other path 404, another method 405 (problems, as REST's
errors). REST stays where ``host``/``port`` put it, unchanged.

It never opens a non-loopback address on a pod that uses its node's network (host
networking): that address is the node's, reachable by whatever reaches the node. A daemon
tells from the downward API: ``ADLOADER_POD_IP`` (``status.podIP``) equal to
``ADLOADER_HOST_IP`` (``status.hostIP``) means host networking (comma-separated lists, as
``status.podIPs``/``status.hostIPs`` give, are compared by any address in common). In a
Kubernetes pod (``KUBERNETES_SERVICE_HOST``, which the kubelet puts in every container)
without both it cannot tell, and refuses as well. Loopback (the pod's own, or the node's)
is always allowed. A non-loopback address also needs the metrics token provisioned
beforehand (a Kubernetes Secret), as REST needs its token off loopback.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping

from adloader import env
from adloader.config import DaemonConfig, listen_address
from adloader.errors import InputError
from adloader.rest import METRICS
from adloader.rest_answers import PROBLEM_JSON, problem

from ..ops.settings import is_loopback
from .metrics import CONTENT_TYPE

log = logging.getLogger("adloader.daemon.metrics_listener")

KUBERNETES = "KUBERNETES_SERVICE_HOST"  # set by the kubelet in every container of a pod
WRONG_TOKEN = ("missing or wrong bearer token: this listener takes the read-only metrics "
               "token (metrics_token_file) and no other")


def _ips(value: str) -> set[str]:
    return {part.strip() for part in value.split(",") if part.strip()}


def refusal(config: DaemonConfig, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why the metrics listener of ``config`` must not open here (one line), or None."""
    if not config.metrics_listen:
        return None
    host, _ = listen_address(config.metrics_listen)
    if is_loopback(host):
        return None
    pod_ip, host_ip = environ.get(env.POD_IP, ""), environ.get(env.HOST_IP, "")
    where = f"refusing to serve metrics on {config.metrics_listen}"
    if pod_ip and host_ip:
        if _ips(pod_ip) & _ips(host_ip):
            return (f"{where}: this pod uses its node's network ({env.POD_IP} {pod_ip} is "
                    f"{env.HOST_IP}); give it its own network (no hostNetwork) or listen on "
                    "127.0.0.1")
    elif pod_ip or host_ip or environ.get(KUBERNETES):
        return (f"{where}: cannot tell whether this pod uses its node's network: set both "
                f"{env.POD_IP} and {env.HOST_IP} (the downward API's status.podIP and "
                "status.hostIP)")
    if not config.metrics_token_path.exists():
        return (f"{where} (not loopback) without a metrics token provisioned beforehand in "
                f"{config.metrics_token_path}")
    return None


def check(config: DaemonConfig, environ: Mapping[str, str] = os.environ) -> None:
    """InputError (one line) where ``refusal`` gives a reason."""
    reason = refusal(config, environ)
    if reason:
        raise InputError(reason)


class MetricsApp:
    """The listener's ASGI app: ``GET /metrics`` with the metrics token, nothing else."""

    def __init__(self, text: Callable[[], str], token: str):
        if not token:
            raise ValueError("the metrics listener needs a non-empty token")
        self._text, self._token = text, token.encode()

    def _authorized(self, headers) -> bool:
        given = b""
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = credentials.strip()
        return hmac.compare_digest(given, self._token)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan is off (see MetricsListener)
            return
        path = scope["path"]
        if path != METRICS:
            return await _problem(send, 404, f"only GET {METRICS} is served here", path)
        if scope["method"] != "GET":
            return await _problem(send, 405, f"{METRICS} takes GET only", path,
                                  [(b"allow", b"GET")])
        if not self._authorized(scope.get("headers") or ()):
            return await _problem(send, 401, WRONG_TOKEN, path,
                                  [(b"www-authenticate", b"Bearer")])
        try:
            body = self._text().encode()
        except Exception:
            log.exception("rendering the metrics failed")
            return await _problem(send, 500, "the daemon failed (a bug: see its log)", path)
        await _answer(send, 200, body, CONTENT_TYPE)


async def _answer(send, status: int, body: bytes, content_type: str, headers=()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


async def _problem(send, status: int, detail: str, path: str, headers=()) -> None:
    body = json.dumps(problem(status, detail, path)).encode()
    await _answer(send, status, body, PROBLEM_JSON, headers)


class MetricsListener:
    """``app`` served on the bound ``sock`` by a uvicorn of its own, in a thread of its own
    (signals stay the main server's); ``stop`` closes it."""

    def __init__(self, sock: socket.socket, app: MetricsApp):
        import uvicorn

        from .http_server import server_class

        self.server = server_class()(uvicorn.Config(app, log_level="warning", log_config=None,
                                                    lifespan="off"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                        name="adloader-metrics-listener", daemon=True)

    def start(self) -> MetricsListener:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self.server.stop()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
