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
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from adloader import limits
from adloader.rest import describe_error
from adloader.version import __version__

from . import routes_jobs, routes_node, ui
from .service import NodeService

log = logging.getLogger("adloader.daemon.api")


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
    app = FastAPI(title="adloader", version=__version__,
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

    v1 = APIRouter(dependencies=[Depends(authorize)])  # every path under rest.V1
    v1.include_router(routes_jobs.router(service))
    v1.include_router(routes_node.router(service))
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

    app.include_router(routes_node.open_router(service, Depends(authorize_metrics)))

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
