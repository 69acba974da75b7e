"""The operator's window (``/ui``) and the offline API docs (``/docs``) on a real daemon with
real jobs: what is shown without the token (nothing), what the session cookie may do (read,
never change), and what a real headless Chromium renders with no internet."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from daemon_harness import Daemon, wait_for

from adloader.daemon.api import ui

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no `chromium` on PATH: `apt-get install -y chromium` (Debian) "
                             "runs the browser tests")  # fmt: skip
SCREENSHOT_COPY = Path("/tmp/adloader-ui.png")
ENDED = {"finished", "failed", "cancelled", "lost"}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A real daemon with two real training jobs: the first runs alone, then the second
    arrives and the first is resized (so the timeline has a resize to mark)."""
    root = tmp_path_factory.mktemp("dashboard")
    daemon = Daemon(root / "state", capacity=4, gpus=2).start()
    jobs: list[str] = []
    try:
        jobs.append(daemon.submit("alpha", iterations=100000, step_scale=3.0))
        wait_for(lambda: daemon.state(jobs[0]) == "running", 60, "the first job to run")
        jobs.append(daemon.submit("beta", iterations=100000, step_scale=3.0))
        wait_for(lambda: all(daemon.state(j) == "running" for j in jobs), 60,
                 "both jobs to run")
        wait_for(lambda: all((daemon.job(j)["iteration"] or 0) > 0 for j in jobs), 90,
                 "both jobs to train")
        yield daemon, jobs
    finally:
        pids = [daemon.job(j).get("pid") for j in jobs] if daemon.proc.poll() is None else []
        for j in jobs:
            daemon.http.post(f"/v1/jobs/{j}/cancel")
        try:
            wait_for(lambda: all(daemon.state(j) in ENDED for j in jobs), 30,
                     "the jobs to end after cancel")
        finally:
            daemon.stop()
            for pid in pids:  # the jobs this test started, should a cancel not have ended one
                if pid and _alive(pid):
                    os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def anonymous(daemon: Daemon) -> httpx.Client:
    return httpx.Client(base_url=daemon.url, timeout=30)


@contextlib.contextmanager
def session(daemon: Daemon):
    """A client holding only the /ui session cookie (no Authorization header)."""
    with anonymous(daemon) as client:
        r = client.post("/ui/login", json={"token": daemon.token})
        assert r.status_code == 204, r.text
        assert client.cookies.get(ui.COOKIE)
        yield client


# -- without the token --------------------------------------------------------------------
def test_the_page_without_the_token_is_a_login_form_with_no_job_data(node):
    daemon, jobs = node
    with anonymous(daemon) as c:
        r = c.get("/ui")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert 'action="/ui/login"' in r.text and 'name="token"' in r.text
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        served = r.text + "".join(c.get(f"/ui/assets/{name}").text for name in ui.UI_FILES)
        for secret in [*jobs, "alpha", "beta", daemon.token]:
            assert secret not in served
        assert c.get("/v1/jobs").status_code == 401
        assert c.get("/v1/events").status_code == 401
        assert c.get("/metrics").status_code == 401
        assert c.get("/ui/assets/../token").status_code == 404
        assert c.get("/ui/assets/index.html").status_code == 404  # only the listed assets


def test_a_wrong_token_gets_401_and_no_cookie(node):
    daemon, _ = node
    with anonymous(daemon) as c:
        for attempt in ({"json": {"token": daemon.token + "x"}}, {"json": {"token": ""}},
                        {"json": {"token": 12}}, {"json": ["x"]},
                        {"content": b'{"token": "\\ud800"}',  # a lone surrogate
                         "headers": {"Content-Type": "application/json"}},
                        {"data": {"token": daemon.token[:-1]}}):
            r = c.post("/ui/login", **attempt)
            assert r.status_code == 401, (attempt, r.text)
            assert "set-cookie" not in r.headers
        assert not c.cookies
        r = c.post("/ui/login", content=daemon.token, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "set-cookie" not in r.headers
        for content, kind in [(b"[" * 100_000, "application/json"), (b"{", "application/json"),
                              (b"\xff\xfe", "application/json"),
                              ("&".join(f"f{i}=x" for i in range(50)),
                               "application/x-www-form-urlencoded")]:
            r = c.post("/ui/login", content=content, headers={"Content-Type": kind})
            assert r.status_code == 400 and "set-cookie" not in r.headers, (kind, r.text)
        c.cookies.set(ui.COOKIE, daemon.token)  # the token itself is not a session
        assert c.get("/v1/jobs").status_code == 401
        c.cookies.set(ui.COOKIE, "0" * 64)
        assert c.get("/v1/jobs").status_code == 401


def test_the_cookie_is_a_session_not_the_token(node):
    daemon, jobs = node
    with anonymous(daemon) as c:
        r = c.post("/ui/login", json={"token": daemon.token})
        assert r.status_code == 204
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{ui.COOKIE}=")
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        value = c.cookies[ui.COOKIE]
        assert daemon.token not in cookie and value != daemon.token
        # a plain HTML form (no script) signs in too, and comes back to the page
        form = anonymous(daemon)
        r = form.post("/ui/login", data={"token": daemon.token})
        assert r.status_code == 303 and r.headers["location"] == "/ui"
        assert form.cookies[ui.COOKIE] == value
        form.close()

        listed = c.get("/v1/jobs")
        assert listed.status_code == 200
        assert {j["id"] for j in listed.json()} >= set(jobs)
        assert c.get("/v1/allocations").status_code == 200
        assert c.get(f"/v1/jobs/{jobs[0]}").status_code == 200
        assert c.get("/metrics").status_code == 200

        r = c.post("/ui/logout")
        assert r.status_code == 204 and ui.COOKIE in r.headers["set-cookie"]
        assert not c.cookies.get(ui.COOKIE)
        assert c.get("/v1/jobs").status_code == 401


def test_the_cookie_cannot_change_anything(node):
    daemon, jobs = node
    with session(daemon) as c:
        body = {"name": "forged", "command": ["true"], "model": "smResnet20", "batch_size": 8,
                "iterations": 10}
        for method, path, kwargs in [
            ("POST", "/v1/jobs", {"json": body}),
            ("POST", f"/v1/jobs/{jobs[0]}/cancel", {}),
            ("POST", f"/v1/jobs/{jobs[0]}/pause", {}),
            ("POST", f"/v1/jobs/{jobs[1]}/resume", {}),
            ("POST", "/v1/model/fit", {}),
        ]:
            r = c.request(method, path, **kwargs)
            assert r.status_code == 401, (method, path, r.text)
        # the same requests from a page of another site carry the cookie no better: and the
        # Bearer header, which such a page cannot send, is what works
        assert c.get("/v1/jobs").status_code == 200
    listed = daemon.http.get("/v1/jobs").json()
    assert "forged" not in {j["name"] for j in listed}
    assert all(daemon.state(j) == "running" for j in jobs)


def test_docs_are_local_and_redoc_is_gone(node):
    daemon, _ = node
    with anonymous(daemon) as c:
        r = c.get("/docs")
        assert r.status_code == 200
        urls = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert urls and all(u.startswith("/") for u in urls), urls
        assert "cdn" not in r.text.lower()
        for u in urls:
            assert c.get(u).status_code == 200, u
        assert c.get("/static/swagger/LICENSE").status_code == 404  # only what /docs needs
        assert c.get("/redoc").status_code == 404
        assert c.get("/openapi.json").status_code == 200


def test_the_static_files_are_package_data():
    """An installed wheel ships them: pyproject lists them as package data."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    data = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["adloader.daemon.api"]
    static = Path(ui.__file__).parent
    shipped = {p.relative_to(static).as_posix() for pattern in patterns
               for p in static.glob(pattern) if p.is_file()}
    needed = {f"static/ui/{n}" for n in [*ui.UI_FILES, "index.html"]} | {
        f"static/swagger/{n}" for n in ui.SWAGGER_FILES}
    assert needed <= shipped, needed - shipped


# -- in a real browser --------------------------------------------------------------------
def chromium(tmp_path: Path, url: str, *args: str, budget_ms: int = 6000,
             timeout_s: float = 60) -> str:
    """Run headless Chromium on ``url`` offline (every host but 127.0.0.1 unresolvable);
    its stdout. Every process it starts is in a group of its own, killed at the end."""
    profile = Path(tmp_path) / f"chromium-profile-{time.monotonic_ns()}"
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--hide-scrollbars", f"--user-data-dir={profile}",
           "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
           "--window-size=1280,900", f"--virtual-time-budget={budget_ms}", *args, url]
    if os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out, err = b"", b"(timed out)"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the browser's group: renderers, zygote
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = out.decode(errors="replace")
    assert proc.returncode == 0 or text, f"chromium failed: {err.decode(errors='replace')[-2000:]}"
    return text


class Page(HTMLParser):
    """What the dumped DOM shows: the jobs table's rows and the timeline's paths."""

    def __init__(self, html: str):
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.paths: dict[str, str] = {}
        self.resize_marks: list[str] = []
        self.legend: list[str] = []
        self.timeline = False
        self._stack: list[str] = []
        self._row: str | None = None
        self._cells: list[str] = []
        self._in_svg = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("id") == "timeline":
            self.timeline = self._in_svg = True
        elif self._in_svg and tag == "path" and a.get("class") == "series":
            self.paths[a["data-job"]] = a.get("d", "")
        elif self._in_svg and tag == "g" and a.get("class") == "resize":
            self.resize_marks.append(a["data-job"])
        elif tag == "tr" and "data-job" in a:
            self._row, self._cells = a["data-job"], []
        elif tag == "td" and self._row:
            self._cells.append("")
        elif tag == "li" and "data-job" in a:
            self.legend.append(a["data-job"])

    def handle_endtag(self, tag):
        if tag == "svg":
            self._in_svg = False
        elif tag == "tr" and self._row:
            self.rows[self._row] = [c.strip() for c in self._cells]
            self._row = None

    def handle_data(self, data):
        if self._row and self._cells:
            self._cells[-1] += data


@pytest.mark.chromium
@needs_chromium
def test_the_page_in_a_browser_shows_jobs_and_their_timeline(node, tmp_path):
    daemon, jobs = node
    api = {j["id"]: j for j in daemon.http.get("/v1/jobs").json()}
    link = f"{daemon.url}/ui#token={daemon.token}"
    started = time.monotonic()
    dom = chromium(tmp_path, link, "--dump-dom")
    page = Page(dom)
    assert daemon.token not in dom, "the token must leave the page (and its address)"
    for job in jobs:
        assert job in page.rows, f"{job} not in the jobs table: {sorted(page.rows)}"
        cells = page.rows[job]
        assert cells[0] == job and cells[1] == api[job]["name"]
        assert cells[2] == "running", cells
        assert int(cells[3]) >= 1, cells  # workers
        assert re.fullmatch(r"[\d,.]+", cells[4]), f"measured samples/s: {cells}"
        assert re.fullmatch(r"[\d,.]+", cells[5]), f"predicted samples/s: {cells}"
    assert page.timeline, "no timeline SVG"
    for job in jobs:
        assert job in page.paths and len(page.paths[job]) > 10, page.paths
        assert job in page.legend
    if daemon.events("resize"):
        assert page.resize_marks, "a resize happened but is not marked"

    shot = tmp_path / "adloader-ui.png"
    chromium(tmp_path, link, f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shutil.copyfile(shot, SCREENSHOT_COPY)

    # the same page without the token in its link: the sign-in form, and no job data
    dom = chromium(tmp_path, f"{daemon.url}/ui", "--dump-dom", budget_ms=3000)
    anonymous_page = Page(dom)
    assert not anonymous_page.rows and not anonymous_page.paths
    assert all(job not in dom for job in jobs)
    assert re.search(r'<section id="login" class="login"\s*>', dom), "the sign-in form is shown"
    assert time.monotonic() - started < 60


@pytest.mark.chromium
@needs_chromium
def test_docs_render_offline(node, tmp_path):
    daemon, _ = node
    dom = chromium(tmp_path, f"{daemon.url}/docs", "--dump-dom", budget_ms=8000)
    paths = re.findall(r'class="opblock-summary-path"[^>]*>.*?<span>([^<]+)</span>', dom)
    paths += re.findall(r'data-path="([^"]+)"', dom)
    assert "/v1/jobs" in paths, f"Swagger UI did not render the operations: {dom[:1500]}"
