"""The metrics listener (``--metrics-listen HOST:PORT``): a real daemon serves ``GET /metrics``
there to the read-only metrics token alone (not the REST token), 401 without it, 404 for any
other path; REST is unchanged beside it. A token provisioned as a Kubernetes Secret mounts it
(0440 with ``fsGroup``) is taken. A non-loopback address on a host-network pod (the downward
API's pod IP equal to its host IP), or in a pod that cannot tell, is refused at start in one
line, before anything is bound or written."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from daemon_harness import Daemon, free_port

from adloader import env
from adloader.config import DaemonConfig
from adloader.daemon.api.metrics_listener import KUBERNETES, WRONG_TOKEN, refusal

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture(scope="module")
def listening(tmp_path_factory):
    """A daemon with REST on its port and the metrics listener on 127.0.0.1:another (one for
    the module's tests: they only read)."""
    port = free_port()
    d = Daemon(tmp_path_factory.mktemp("listening") / "state", capacity=3,
               extra=("--metrics-listen", f"127.0.0.1:{port}")).start()
    d.metrics_url = f"http://127.0.0.1:{port}"
    yield d
    assert d.stop() == 0


def _get(url: str, token: str | None = None, method: str = "GET") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.request(method, url, headers=headers, timeout=30)


def test_the_read_only_token_scrapes_prometheus_text(listening):
    scraper = listening.path("metrics.token").read_text().strip()
    r = _get(listening.metrics_url + "/metrics", scraper)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == PROMETHEUS_TEXT
    assert "# TYPE adloader_capacity_workers gauge" in r.text
    assert "adloader_capacity_workers 3.0" in r.text.splitlines()
    assert "adloader_build_info{" in r.text
    assert f"metrics {listening.metrics_url}/metrics" in listening.log


@pytest.mark.parametrize("who", ["nobody", "a wrong token", "the REST token"])
def test_without_the_metrics_token_it_is_401_in_one_clear_line(listening, who):
    token = {"nobody": None, "a wrong token": "not-the-token",
             "the REST token": listening.token}[who]  # read-only: REST's grants too much
    r = _get(listening.metrics_url + "/metrics", token)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"] == WRONG_TOKEN and "\n" not in WRONG_TOKEN


def test_any_other_path_is_404_and_another_method_405(listening):
    scraper = listening.path("metrics.token").read_text().strip()
    for path in ("/", "/healthz", "/v1/jobs", "/metrics/", "/metricsx", "/ui"):
        for token in (scraper, listening.token, None):
            r = _get(listening.metrics_url + path, token)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["detail"] == "only GET /metrics is served here"
    r = _get(listening.metrics_url + "/metrics", scraper, method="POST")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_rest_is_unchanged_beside_it(listening):
    scraper = listening.path("metrics.token").read_text().strip()
    assert listening.http.get("/v1/jobs").status_code == 200
    assert listening.http.get("/metrics").status_code == 200  # REST's token there, as before
    assert _get(listening.url + "/metrics", scraper).status_code == 200
    assert _get(listening.url + "/v1/jobs", scraper).status_code == 401


def test_a_token_mounted_from_a_secret_is_taken(tmp_path):
    """A Secret volume with ``defaultMode: 0440`` and the pod's ``fsGroup``: group-readable,
    owned by root; the daemon reads it and makes none of its own."""
    secret = tmp_path / "secret" / "token"
    secret.parent.mkdir()
    secret.write_text("scrape-me-0123456789\n")
    secret.chmod(0o440)
    port = free_port()
    extra = ("--metrics-listen", f"127.0.0.1:{port}")
    d = Daemon(tmp_path / "state", extra=extra)
    d.env = dict(d.env, **{env.setting("metrics_token_file"): str(secret)})
    with d:
        url = f"http://127.0.0.1:{port}/metrics"
        assert _get(url, "scrape-me-0123456789").status_code == 200
        assert _get(url, d.token).status_code == 401
        assert not d.path("metrics.token").exists()


def _start(tmp_path, listen: str, **environ) -> subprocess.CompletedProcess:
    state = tmp_path / "state"
    child = {k: v for k, v in os.environ.items()
             if k not in (env.POD_IP, env.HOST_IP, KUBERNETES)}
    return subprocess.run([sys.executable, "-m", "adloader", "daemon", "--state-dir", str(state),
                           "--port", str(free_port()), "--metrics-listen", listen],
                          env={**child, **environ}, capture_output=True, text=True, timeout=60)


def test_on_a_host_network_pod_it_refuses_to_start_in_one_line(tmp_path):
    port = free_port()
    done = _start(tmp_path, f"0.0.0.0:{port}",
                  **{env.POD_IP: "10.0.0.7", env.HOST_IP: "10.0.0.7"})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"refusing to serve metrics on 0.0.0.0:{port}" in line
    assert "uses its node's network" in line and "10.0.0.7" in line
    assert not (tmp_path / "state").exists()  # nothing claimed, no token made
    with pytest.raises(httpx.ConnectError):  # and nothing listens there
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_in_a_pod_that_cannot_tell_it_refuses_too(tmp_path):
    done = _start(tmp_path, f"0.0.0.0:{free_port()}", **{KUBERNETES: "10.96.0.1"})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert env.POD_IP in line and env.HOST_IP in line and "status.podIP" in line


def _config(tmp_path, listen: str, token: bool = True) -> DaemonConfig:
    path = tmp_path / "metrics.token"
    if token:
        path.write_text("t\n")
    return DaemonConfig(state_dir=str(tmp_path), metrics_listen=listen,
                        metrics_token_file=str(path))


@pytest.mark.parametrize(("listen", "environ", "refused"), [
    ("", {env.POD_IP: "10.0.0.7", env.HOST_IP: "10.0.0.7"}, None),  # no listener
    ("127.0.0.1:9464", {env.POD_IP: "10.0.0.7", env.HOST_IP: "10.0.0.7"}, None),  # loopback
    ("[::1]:9464", {KUBERNETES: "10.96.0.1"}, None),
    ("0.0.0.0:9464", {env.POD_IP: "10.244.1.5", env.HOST_IP: "10.0.0.7",
                      KUBERNETES: "10.96.0.1"}, None),  # its own network
    ("0.0.0.0:9464", {}, None),  # no pod at all (a host's own daemon): the operator's choice
    ("0.0.0.0:9464", {env.POD_IP: "10.0.0.7", env.HOST_IP: "10.0.0.7"}, "node's network"),
    ("[::]:9464", {env.POD_IP: "10.0.0.7,fd00::7", env.HOST_IP: "fd00::7"}, "node's network"),
    ("10.0.0.7:9464", {env.POD_IP: "10.0.0.7", env.HOST_IP: "10.0.0.7"}, "node's network"),
    ("0.0.0.0:9464", {KUBERNETES: "10.96.0.1"}, "cannot tell"),
    ("0.0.0.0:9464", {env.POD_IP: "10.244.1.5"}, "cannot tell"),
])
def test_where_a_listener_may_open(tmp_path, listen, environ, refused):
    reason = refusal(_config(tmp_path, listen), environ)
    assert (reason is None) if refused is None else (refused in reason), reason


def test_off_loopback_the_metrics_token_must_be_provisioned_first(tmp_path):
    config = _config(tmp_path, "0.0.0.0:9464", token=False)
    reason = refusal(config, {env.POD_IP: "10.244.1.5", env.HOST_IP: "10.0.0.7"})
    assert "without a metrics token provisioned beforehand" in reason
    assert refusal(_config(tmp_path, "127.0.0.1:9464", token=False), {}) is None


def test_a_metrics_token_readable_by_others_is_refused_a_group_readable_one_taken(tmp_path):
    from adloader.daemon.ops.settings import ensure_token
    from adloader.errors import InputError

    path = tmp_path / "metrics.token"
    path.write_text("t\n")
    path.chmod(0o440)
    assert ensure_token(path, group_may_read=True) == ("t", True)
    with pytest.raises(InputError, match="chmod 600"):  # the REST token stays 0600
        ensure_token(path)
    path.chmod(0o444)
    with pytest.raises(InputError, match="chmod 640"):
        ensure_token(path, group_may_read=True)


@pytest.mark.parametrize("bad", ["9464", "host:", ":9464", "0.0.0.0:99999", "0.0.0.0:http"])
def test_a_malformed_address_is_refused_naming_the_setting(bad):
    from adloader.config import config_from
    from adloader.errors import InputError

    with pytest.raises(InputError, match="'metrics_listen' must be HOST:PORT"):
        config_from({"metrics_listen": bad}, environ={})

