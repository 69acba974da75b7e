"""The daemon's REST API (FastAPI; OpenAPI at ``/openapi.json``, its page at ``/docs``) over a
NodeService.

Every route but ``/healthz`` (and the docs, and ``/ui``'s page and login: ``daemon.api.ui``)
needs ``Authorization: Bearer TOKEN``; a GET may show ``/ui``'s session cookie instead. Every
error is a problem (RFC 9457, ``application/problem+json``: ``rest_answers.Problem``, its
``type`` one of ``rest_answers.PROBLEMS``) with ``detail`` in one line: 400 for a malformed
request, 422 for an invalid field or parameter (naming it), 401 without the token, 404 for
an unknown job, 405 with ``Allow`` for a method the path does not take, 409 for a request the
node's state refuses, 413 for a body over ``limits.MAX_BODY_BYTES``, 503 when the node cannot
serve now (its store cannot be written, say: retry later) and 500 for a bug (do not retry).
Each operation declares every one it can give (the OpenAPI document is post-processed here:
``_declare_problems``). A submit that must count an unknown model's FLOPs waits for that off
the event loop and off the worker threads the other requests use.
"""

# No ``from __future__ import annotations``: FastAPI must see the closures' Depends objects.
import hmac
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from adloader import limits, rest
from adloader.rest import SPEC_TOO_LARGE, describe_error
from adloader.rest_answers import PROBLEM_JSON, PROBLEMS, Problem, problem
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

        await problem_response(413, f"request body over {self.limit} bytes",
                               scope.get("path"))(scope, nothing, send)


def problem_response(status: int, detail: str, instance: str | None = None,
                     headers: dict | None = None) -> JSONResponse:
    """An error answer: ``rest_answers.problem`` as ``application/problem+json``."""
    return JSONResponse(problem(status, detail, instance), status_code=status, headers=headers,
                        media_type=PROBLEM_JSON)


def allowed_methods(routes, scope) -> list[str]:
    """Every method some route of ``routes`` takes at the request's path (``Allow`` of a 405:
    Starlette names only the first route's). Included routers are searched (no prefixes)."""
    methods: set[str] = set()
    probe = {**scope, "method": "GET"}
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included router
        if inner is not None:
            methods.update(allowed_methods(inner.routes, scope))
        elif getattr(route, "methods", None) and route.matches(probe)[0] != Match.NONE:
            methods |= set(route.methods)
    return sorted(methods)


# the errors every operation may answer (``_declare_problems``): 401 where a token is needed
COMMON_PROBLEMS = (413, 500, 503)
VALIDATION = 422  # an operation with parameters or a body


def _declare_problems(schema: dict, open_paths: tuple[str, ...]) -> dict:
    """Each operation's error answers as ``Problem`` in ``application/problem+json``: those it
    declared (``routes.problems``), the common ones, 401 unless its path is open, 400 and
    422 where it takes a body, 422 where it takes parameters."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422, not ours
        schemas.pop(name, None)
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    ref = {"$ref": "#/components/schemas/Problem"}
    for path, item in schema.get("paths", {}).items():
        for op in item.values():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            wanted = {int(k) for k in responses if str(k).isdigit() and int(k) >= 400}
            wanted |= set(COMMON_PROBLEMS)
            if path not in open_paths:
                wanted.add(401)
            if op.get("parameters") or op.get("requestBody"):
                wanted.add(VALIDATION)
            if op.get("requestBody"):
                wanted.add(400)  # not JSON at all
            for status in sorted(wanted):
                responses[str(status)] = {"description": PROBLEMS[status][1],
                                          "content": {PROBLEM_JSON: {"schema": ref}}}
    return schema


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
                  docs_url=None, redoc_url=None)  # /docs from local files: daemon.api.ui
    bearer = HTTPBearer(auto_error=False, description="the daemon's token file")

    def authorize(request: Request,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        given = creds.credentials.encode() if creds else b""
        # /ui's session cookie stands in for the token on reads (GET) only: daemon.api.ui
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

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(app.router.routes, request.scope))
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return problem_response(exc.status_code, detail, request.url.path, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = request_error_message(errors[0]) if errors else "invalid request"
        kind = errors[0].get("type") if errors else None
        status = 400 if kind == "json_invalid" else 413 if kind == SPEC_TOO_LARGE else 422
        return problem_response(status, detail, request.url.path)

    @app.exception_handler(ResponseValidationError)
    async def _bad_answer(request: Request, exc: ResponseValidationError) -> JSONResponse:
        log.error("%s %s: the service gave an invalid answer: %s", request.method,
                  request.url.path, exc.errors()[:1])  # fmt: skip
        return problem_response(500, "the daemon gave an invalid answer (a bug: see its log)",
                                request.url.path)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem_response(500, "the daemon failed (a bug: see its log)", request.url.path)

    open_paths = (rest.HEALTH,)

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = _declare_problems(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes), open_paths)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
