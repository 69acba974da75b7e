"""``DaemonClient``: the one typed client of the daemon's REST API (``adloader.rest``).

Used by the ``adloader`` commands, trace replay, the benchmarks and the tests. A 4xx is an
InputError carrying the daemon's one-line detail (the request was wrong); no daemon, a
time-out or a 5xx is DaemonUnavailable (not the user's fault). The bearer token comes from
ADLOADER_TOKEN, else a token file (given, or the daemon config's).

It speaks HTTP/1.1 with the standard library's ``http.client`` over one kept-alive
connection: a command that makes one call starts in a fraction of what an async-capable
client costs to import.
"""

from __future__ import annotations

import http.client
import json
import os
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from adloader import env, rest
from adloader.errors import DaemonUnavailable, InputError

DEFAULT_URL = "http://127.0.0.1:7070"
TIMEOUT_S = 10.0
LOG_WINDOW_MAX = 16 * 1024 * 1024  # the most of a log one request tails (the API's own cap)


def find_token(token_file: str | os.PathLike | None = None) -> tuple[str | None, str]:
    """The REST token and where it came from: ADLOADER_TOKEN, else ``token_file``, else the
    daemon config's token path (ADLOADER_STATE_DIR / ADLOADER_TOKEN_FILE / the default)."""
    if os.environ.get(env.API_TOKEN):
        return os.environ[env.API_TOKEN].strip(), env.API_TOKEN
    if token_file:
        path = Path(token_file)
    else:
        from adloader.daemon.ops.settings import load_config

        path = load_config(os.environ.get(env.CONFIG) or None).token_path
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, str(path)


class Response:
    """A finished response: status, headers, body."""

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes):
        self.status_code, self.reason_phrase, self.headers = status, reason, headers
        self.content = body

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def header(self, name: str) -> str | None:
        """A header's value, its name in any case."""
        name = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == name), None)


class DaemonClient:
    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *,
                 token_source: str = "the token", timeout_s: float = TIMEOUT_S):
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--url {url!r} is not an http:// or https:// address")
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self.token, self.token_source = token, token_source
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    @classmethod
    def from_environment(cls, url: str | None = None,
                         token_file: str | None = None) -> DaemonClient:
        token, source = find_token(token_file)
        return cls(url or os.environ.get(env.URL) or DEFAULT_URL, token, token_source=source)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------
    def _connection(self, timeout_s: float | None) -> http.client.HTTPConnection:
        kind = (http.client.HTTPSConnection if self._scheme == "https"
                else http.client.HTTPConnection)
        return kind(self._host, self._port, timeout=timeout_s)

    def _send(self, conn, method: str, path: str, params: dict | None, json_body: Any):
        if params:
            path = f"{path}?{urlencode({k: _param(v) for k, v in params.items()})}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse()

    def request(self, method: str, path: str, *, params: dict | None = None,
                json: Any = None) -> Response:  # noqa: A002 (httpx's name for it)
        """One call; the response when it is 2xx/3xx (see the module for the errors)."""
        for attempt in (0, 1):  # a kept-alive connection the server closed: once more
            if self._conn is None:
                self._conn = self._connection(self.timeout_s)
            try:
                raw = self._send(self._conn, method, path, params, json)
                response = Response(raw.status, raw.reason, dict(raw.getheaders()), raw.read())
                break
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                self.close()
                if attempt:
                    raise DaemonUnavailable(f"the daemon at {self.url}: {exc}") from None
            except ConnectionRefusedError:
                self.close()
                raise DaemonUnavailable(f"no daemon at {self.url} (start one with "
                                        "`adloader daemon`)") from None
            except TimeoutError:
                self.close()
                raise DaemonUnavailable(f"the daemon at {self.url} did not answer within "
                                        f"{self.timeout_s:g} s") from None
            except OSError as exc:
                self.close()
                raise DaemonUnavailable(f"the daemon at {self.url}: {exc}") from None
        return self._checked(response)

    def _checked(self, response: Response) -> Response:
        if response.status_code < 400:
            return response
        detail = _detail(response)
        if response.status_code == 401:
            why = (f"no token ({env.API_TOKEN} unset, {self.token_source} unreadable)"
                   if not self.token else f"it refused the token from {self.token_source}")
            raise InputError(f"the daemon at {self.url}: {why}")
        if response.status_code < 500:
            raise InputError(detail)
        raise DaemonUnavailable(f"the daemon at {self.url} failed: {detail}")

    # -- the API -------------------------------------------------------------------------
    def submit(self, body: dict) -> rest.JobView:
        return rest.JobView.model_validate(self.request("POST", rest.JOBS, json=body).json())

    def jobs(self, states: Iterable[str] = (), name: str | None = None) -> list[rest.JobView]:
        """Every job the daemon keeps (only those in ``states``, named ``name``), in submit
        order, page after page."""
        params: dict[str, Any] = {"limit": rest.PAGE_MAX}
        if states:
            params["state"] = ",".join(states)
        if name is not None:
            params["name"] = name
        out = []
        while True:
            page = self.request("GET", rest.JOBS, params=params)
            out += [rest.JobView.model_validate(j) for j in page.json()]
            cursor = page.header(rest.NEXT_CURSOR)
            if not cursor:  # the last page (or a daemon that answers with every job)
                return out
            params["cursor"] = cursor

    def job(self, job_id: str) -> rest.JobView:
        return rest.JobView.model_validate(self.request("GET", rest.job_path(job_id)).json())

    def cancel(self, job_id: str, signal: str | None = None) -> rest.JobView:
        # its number: the one spelling every release's API takes (a bad name fails here)
        params = {"signal": str(rest.signal_number(signal))} if signal else None
        return rest.JobView.model_validate(
            self.request("POST", rest.job_path(job_id, rest.CANCEL), params=params).json())

    def pause(self, job_id: str, checkpoint: bool = False) -> rest.JobView:
        return rest.JobView.model_validate(self.request(
            "POST", rest.job_path(job_id, rest.PAUSE), params={"checkpoint": checkpoint}).json())

    def resume(self, job_id: str) -> rest.JobView:
        return rest.JobView.model_validate(self.request(
            "POST", rest.job_path(job_id, rest.RESUME)).json())

    def log(self, job_id: str, tail: int = 64 * 1024) -> str:
        return self.request("GET", rest.job_path(job_id, rest.LOG), params={"tail": tail}).text

    def log_lines(self, job_id: str, lines: int) -> str:
        """The last ``lines`` lines of the job's output (the API tails bytes: the window
        doubles, 4 KiB to 16 MiB, until it holds them or the whole log)."""
        if lines <= 0:
            return ""
        window = 4096
        while True:
            text = self.log(job_id, window)
            whole = len(text.encode("utf-8", "replace")) < window or window >= LOG_WINDOW_MAX
            kept = text.splitlines(keepends=True)
            if not whole:
                kept = kept[1:]  # the window's first line may have begun before it
            if len(kept) >= lines or whole:
                return "".join(kept[-lines:])
            window *= 2

    def follow_log(self, job_id: str, tail: int = 64 * 1024) -> Iterator[str]:
        """The job's output as it is written, until the job has ended and all is read."""
        conn = self._connection(None)  # no time-out: a quiet job is not a dead daemon
        try:
            try:
                raw = self._send(conn, "GET", rest.job_path(job_id, rest.LOG),
                                 {"tail": tail, "follow": True}, None)
            except ConnectionRefusedError:
                raise DaemonUnavailable(f"no daemon at {self.url} (start one with "
                                        "`adloader daemon`)") from None
            if raw.status >= 400:
                self._checked(Response(raw.status, raw.reason, dict(raw.getheaders()),
                                       raw.read()))
            while chunk := raw.read1(65536):
                yield chunk.decode("utf-8", "replace")
        except OSError as exc:
            raise DaemonUnavailable(f"the daemon at {self.url}: {exc}") from None
        finally:
            conn.close()

    def events(self, since: int = 0, limit: int = 500) -> list[dict]:
        return self.request("GET", rest.EVENTS, params={"since": since, "limit": limit}).json()

    def job_events(self, job_id: str, last: int) -> tuple[list[dict], int]:
        """(the job's last ``last`` events, how many it has), page after page."""
        params: dict[str, Any] = {"job": job_id, "limit": rest.PAGE_MAX}
        kept: deque[dict] = deque(maxlen=max(last, 0))
        count = 0
        while True:
            page = self.request("GET", rest.EVENTS, params=params)
            items = page.json()
            kept.extend(items)
            count += len(items)
            cursor = page.header(rest.NEXT_CURSOR)
            if not cursor or not items:
                return list(kept), count
            params["cursor"] = cursor

    def allocations(self) -> dict:
        return self.request("GET", rest.ALLOCATIONS).json()

    def model(self) -> dict:
        return self.request("GET", rest.MODEL).json()

    def fit_model(self) -> dict:
        return self.request("POST", rest.MODEL_FIT).json()

    def metrics(self) -> str:
        return self.request("GET", rest.METRICS).text

    def health(self) -> dict:
        return self.request("GET", rest.HEALTH).json()


def _param(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _detail(response: Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()
