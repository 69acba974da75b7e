"""``DaemonClient``: the one typed client of the daemon's REST API (``adloader.rest``).

Used by the ``adloader`` commands, trace replay, the benchmarks and the tests. A 4xx is an
InputError carrying the daemon's one-line detail (the request was wrong); no daemon, a
time-out or a 5xx is DaemonUnavailable (not the user's fault). The bearer token comes from
ADLOADER_TOKEN, else a token file (given, or the daemon config's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from adloader import env, rest
from adloader.errors import DaemonUnavailable, InputError
from adloader.rest import JobView

DEFAULT_URL = "http://127.0.0.1:7070"
TIMEOUT_S = 10.0


def find_token(token_file: str | os.PathLike | None = None) -> tuple[str | None, str]:
    """The REST token and where it came from: ADLOADER_TOKEN, else ``token_file``, else the
    daemon config's token path (ADLOADER_STATE_DIR / ADLOADER_TOKEN_FILE / the default)."""
    if os.environ.get(env.API_TOKEN):
        return os.environ[env.API_TOKEN].strip(), env.API_TOKEN
    if token_file:
        path = Path(token_file)
    else:
        from adloader.daemon.settings import load_config

        path = load_config(os.environ.get(env.CONFIG) or None).token_path
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, str(path)


class DaemonClient:
    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *,
                 token_source: str = "the token", timeout_s: float = TIMEOUT_S):
        self.url = url.rstrip("/")
        self.token, self.token_source = token, token_source
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError):
            raise InputError(f"--url {url!r} is not an http:// or https:// address") from None
        self.timeout_s = timeout_s

    @classmethod
    def from_environment(cls, url: str | None = None,
                         token_file: str | None = None) -> DaemonClient:
        token, source = find_token(token_file)
        return cls(url or os.environ.get(env.URL) or DEFAULT_URL, token, token_source=source)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; the response when it is 2xx/3xx (see the module for the errors)."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise DaemonUnavailable(f"no daemon at {self.url} (start one with "
                                    "`adloader daemon`)") from None
        except httpx.TimeoutException:
            raise DaemonUnavailable(f"the daemon at {self.url} did not answer within "
                                    f"{self.timeout_s:g} s") from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol):
            raise InputError(f"--url {self.url!r} is not an http:// or https:// address") \
                from None
        except httpx.HTTPError as exc:
            raise DaemonUnavailable(f"the daemon at {self.url}: {exc}") from None
        return self._checked(response)

    def _checked(self, response: httpx.Response) -> httpx.Response:
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
    def submit(self, body: dict) -> JobView:
        return JobView.model_validate(self.request("POST", rest.JOBS, json=body).json())

    def jobs(self) -> list[JobView]:
        return [JobView.model_validate(j) for j in self.request("GET", rest.JOBS).json()]

    def job(self, job_id: str) -> JobView:
        return JobView.model_validate(self.request("GET", rest.job_path(job_id)).json())

    def cancel(self, job_id: str) -> JobView:
        return JobView.model_validate(self.request("DELETE", rest.job_path(job_id)).json())

    def pause(self, job_id: str, checkpoint: bool = False) -> JobView:
        return JobView.model_validate(self.request(
            "POST", rest.job_path(job_id, "pause"), params={"checkpoint": checkpoint}).json())

    def resume(self, job_id: str) -> JobView:
        return JobView.model_validate(self.request(
            "POST", rest.job_path(job_id, "resume")).json())

    def log(self, job_id: str, tail: int = 64 * 1024) -> str:
        return self.request("GET", rest.job_path(job_id, "log"), params={"tail": tail}).text

    def follow_log(self, job_id: str, tail: int = 64 * 1024) -> Iterator[str]:
        """The job's output as it is written, until the job has ended and all is read."""
        path = rest.job_path(job_id, "log")
        try:
            with self._http.stream("GET", path, params={"tail": tail, "follow": True},
                                   timeout=httpx.Timeout(self.timeout_s, read=None)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    self._checked(resp)
                yield from resp.iter_text()
        except httpx.ConnectError:
            raise DaemonUnavailable(f"no daemon at {self.url} (start one with "
                                    "`adloader daemon`)") from None
        except httpx.HTTPError as exc:
            raise DaemonUnavailable(f"the daemon at {self.url}: {exc}") from None

    def events(self, since: int = 0, limit: int = 500) -> list[dict]:
        return self.request("GET", rest.EVENTS, params={"since": since, "limit": limit}).json()

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


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()
