"""The daemon's REST API (FastAPI; OpenAPI at ``/docs``) over a NodeService.

Every route but ``/healthz`` (and the docs, and ``/ui``'s page and login: ``daemon.ui``)
needs ``Authorization: Bearer TOKEN``; a GET may show ``/ui``'s session cookie instead. Errors are
``{"detail": "one line"}``: 400/422 for a bad request (naming the field), 401 without the
token, 404 for an unknown job, 413 for a body over ``limits.MAX_BODY_BYTES``, 503 when the
node fails to serve (its store cannot be written, say) — never a 500. A submit that must
count an unknown model's FLOPs waits for that off the event loop and off the worker threads
the other requests use.
"""

# No ``from __future__ import annotations``: FastAPI must see the closures' Depends objects.
import hmac
import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

import adloader
from adloader import limits
from adloader.errors import InputError, StorageError
from adloader.rest import JobSpec, JobView, describe_error

from . import ui
from .service import NodeService

log = logging.getLogger("adloader.daemon.api")
T = TypeVar("T")

DEFAULT_TAIL = 64 * 1024
MAX_TAIL = 16 * 1024 * 1024
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
MAX_EVENT_ID = 2**63 - 1
FOLLOW_POLL_S = 0.25  # how often a followed log is looked at for more
ENDED_STATES = ("finished", "failed", "cancelled", "lost")
SUBMITS_AT_ONCE = 4  # submits in flight (each may count a model's FLOPs in a child)
JobId = Annotated[str, Path(max_length=limits.MAX_JOB_ID)]


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413 before the
    app reads it (by its Content-Length), or as soon as that much has arrived (chunked); the
    app then sees a client that went away, and whatever it answers is dropped."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(scope, send)
        seen, refused = 0, False

        async def limited():
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if not refused:
                        refused = True
                        await self._refuse(scope, send)
                    return {"type": "http.disconnect"}
            return message

        async def answer(message):
            if not refused:
                await send(message)

        await self.app(scope, limited, answer)

    async def _refuse(self, scope, send) -> None:
        async def nothing():
            return {"type": "http.disconnect"}

        await JSONResponse({"detail": f"request body over {self.limit} bytes"},
                           status_code=413)(scope, nothing, send)


async def _follow(service: NodeService, job_id: str, path: str, tail: int):
    """A log's last ``tail`` bytes, then whatever is appended, until the job has ended and
    everything written is sent (or the client goes away: the generator is cancelled)."""
    import asyncio

    offset = None
    while True:
        ended = (service.job(job_id) or _Gone).state in ENDED_STATES
        path = path or service.log_path(job_id) or ""  # none until the job is launched
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                if offset is None or offset > size:  # first read, or the file was replaced
                    offset = max(0, size - tail)
                fh.seek(offset)
                chunk = fh.read(1 << 20)
        except OSError:
            chunk = b""
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if ended:
            return
        await asyncio.sleep(FOLLOW_POLL_S)


class _Gone:
    state = "lost"


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def request_error_message(error: dict) -> str:
    """One line for a request validation error: which field or parameter, and what is wrong."""
    loc = tuple(error.get("loc", ()))
    where = loc[0] if loc else "body"
    if error.get("type") == "json_invalid":
        return "body is not valid JSON"
    if where in ("query", "path", "header"):
        name = ".".join(str(x) for x in loc[1:])
        return f"{where} parameter '{name}': {describe_error(error, skip=len(loc))}"
    text = describe_error(error, skip=1)
    if len(loc) <= 1 and error.get("type") == "missing":
        return "request body is required"
    if len(loc) <= 1 and error.get("type") not in ("value_error", "assertion_error"):
        return f"body: {text}"
    return text


def create_app(service: NodeService, token: str, metrics_token: str | None = None,
               metrics_on_loopback: bool = False) -> FastAPI:
    """The API app serving ``service``, protected by the bearer ``token``; ``/metrics`` also
    takes the read-only ``metrics_token``, or no token from loopback with
    ``metrics_on_loopback`` (as Prometheus scrapes a node exporter)."""
    if not token:
        raise ValueError("the API needs a non-empty bearer token")
    expected = token.encode()
    app = FastAPI(title="adloader", version=adloader.__version__,
                  description="Share a node's data-loading workers among its training jobs.",
                  docs_url=None, redoc_url=None)  # /docs from local files: daemon.ui
    bearer = HTTPBearer(auto_error=False, description="the daemon's token file")

    def authorize(request: Request,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        given = creds.credentials.encode() if creds else b""
        # /ui's session cookie stands in for the token on reads (GET) only: daemon.ui
        if not (hmac.compare_digest(given, expected) or ui.cookie_authorizes(request, expected)):
            raise HTTPException(401, "missing or wrong bearer token",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip

    def call(what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except HTTPException:
            raise
        except InputError as exc:
            raise HTTPException(400, str(exc)) from None
        except StorageError as exc:
            log.error("%s: %s", what, exc)
            raise HTTPException(503, f"{what} failed: {exc}") from None
        except Exception:
            log.exception("%s failed", what)
            raise HTTPException(503, f"{what} failed inside the daemon (see its log)") from None

    def found(job_id: str, view: T | None) -> T:
        if view is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return view

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])
    submits = anyio.CapacityLimiter(SUBMITS_AT_ONCE)

    @v1.post("/jobs", status_code=201, response_model=JobView, tags=["jobs"])
    async def submit(spec: JobSpec) -> JobView:
        """Submit a job: it waits in the arrival buffer, then runs with its allocation."""
        return await anyio.to_thread.run_sync(call, "submit", service.submit, spec,
                                              limiter=submits)

    @v1.get("/jobs", response_model=list[JobView], tags=["jobs"])
    def jobs() -> Response:
        """Every job the daemon knows, in submit order."""
        return Response(call("listing jobs", service.jobs_json), media_type="application/json")

    @v1.get("/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    def job(job_id: JobId) -> JobView:
        return found(job_id, call("reading the job", service.job, job_id))

    @v1.delete("/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    def cancel(job_id: JobId) -> JobView:
        """Cancel a job: a queued one never starts, a running one is terminated."""
        return found(job_id, call("cancel", service.cancel, job_id))

    @v1.post("/jobs/{job_id}/pause", response_model=JobView, tags=["jobs"])
    def pause(job_id: JobId, checkpoint: bool = False) -> JobView:
        """Suspend a running job at its next batch boundary (§III-C): its workers go to the
        others; with ``checkpoint`` it saves model, optimizer and loader state first."""
        return found(job_id, call("pause", service.pause, job_id, checkpoint))

    @v1.post("/jobs/{job_id}/resume", response_model=JobView, tags=["jobs"])
    def resume(job_id: JobId) -> JobView:
        """Resume a paused job; the next decision gives it its share of the workers."""
        return found(job_id, call("resume", service.resume, job_id))

    @v1.get("/jobs/{job_id}/log", response_class=PlainTextResponse, tags=["jobs"])
    def job_log(job_id: JobId, tail: Annotated[int, Query(ge=0, le=MAX_TAIL)] = DEFAULT_TAIL,
                follow: bool = False) -> Response:
        """The last ``tail`` bytes of the job's standard output and error; with ``follow``,
        then what it writes, as it writes it, until it has ended."""
        if not follow:
            return PlainTextResponse(found(job_id, call("reading the log", service.log, job_id,
                                                        tail)))
        path = found(job_id, call("reading the log", service.log_path, job_id))
        return StreamingResponse(_follow(service, job_id, path, tail),
                                 media_type="text/plain; charset=utf-8")

    @v1.get("/allocations", tags=["node"])
    def allocations() -> dict:
        """The policy, the node's loading capacity and each job's workers."""
        return call("allocations", service.allocations)

    @v1.get("/node", tags=["node"])
    def node() -> dict:
        """What this node offers a cluster scheduler: free and idle loading workers, the
        predicted gain of one more worker, what a new job could load now, cache room."""
        return call("the node summary", service.node_summary)

    @v1.get("/events", response_model=list[dict], tags=["node"])
    def events(since: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
               limit: Annotated[int, Query(ge=1, le=5000)] = 500) -> Response:
        """Events with an id above ``since``, oldest first."""
        return Response(call("events", service.events_json, since, limit),
                        media_type="application/json")

    @v1.get("/model", tags=["model"])
    def model() -> dict:
        """The throughput prediction model (TPM) in use."""
        return call("reading the model", service.model)

    @v1.post("/model/fit", tags=["model"])
    def fit_model() -> dict:
        """Refit the TPM from the samples stored so far."""
        return call("fitting the model", service.fit_model)

    app.include_router(v1)
    app.include_router(ui.router(expected, app.openapi_url, app.title))  # /ui and /docs
    app.add_middleware(BodyLimit, limit=limits.MAX_BODY_BYTES)

    scraper = metrics_token.encode() if metrics_token else None

    def authorize_metrics(request: Request, creds: Annotated[
            HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        given = creds.credentials.encode() if creds else b""
        if scraper is not None and hmac.compare_digest(given, scraper):
            return
        if metrics_on_loopback and request.client and _loopback(request.client.host):
            return
        authorize(request, creds)

    @app.get("/metrics", response_class=PlainTextResponse,
             dependencies=[Depends(authorize_metrics)], tags=["node"])  # fmt: skip
    def metrics() -> PlainTextResponse:
        """Prometheus text exposition."""
        return PlainTextResponse(call("metrics", service.metrics), media_type=PROMETHEUS_TEXT)

    @app.get("/healthz", tags=["node"])
    def healthz() -> dict:
        """Liveness; needs no token."""
        return call("health", service.health)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = request_error_message(errors[0]) if errors else "invalid request"
        status = 400 if errors and errors[0].get("type") == "json_invalid" else 422
        return JSONResponse({"detail": detail}, status_code=status)

    @app.exception_handler(ResponseValidationError)
    async def _bad_answer(request: Request, exc: ResponseValidationError) -> JSONResponse:
        log.error("%s %s: the service gave an invalid answer: %s", request.method,
                  request.url.path, exc.errors()[:1])  # fmt: skip
        return JSONResponse({"detail": "the daemon gave an invalid answer (see its log)"},
                            status_code=503)  # fmt: skip

    return app
