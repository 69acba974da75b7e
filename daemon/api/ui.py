"""The operator's window (``/ui``) and the API docs (``/docs``), both from files shipped in
the package (``static/``): nothing is loaded from the internet.

``/ui`` is a static page: it holds no job data, and reads everything through the REST API
with the daemon's token. ``POST /ui/login`` takes the token (a form field or JSON
``{"token": ...}``) and answers with a session cookie — HttpOnly, SameSite=Strict, Path=/ —
whose value is an HMAC of a fixed label keyed with the token, never the token itself. That
cookie authorizes only reads (GET on ``/v1/*`` and ``/metrics``, see ``daemon.api.app``):
whatever changes state still needs the ``Authorization: Bearer`` header, which a page of
another site cannot send, so the cookie opens no door to cross-site request forgery. The
cookie stays valid until the token changes; ``POST /ui/logout`` removes it from the browser.
A link ``/ui#token=TOKEN`` logs in too: the fragment never reaches the server, the page's
script posts it to ``/ui/login`` and clears it from the address bar.
"""

import hashlib
import hmac
import json
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse

STATIC = Path(__file__).parent / "static"
COOKIE = "adloader_ui"
LABEL = b"adloader /ui session v1"
READS = frozenset({"GET"})
MAX_TOKEN = 4096

UI_FILES = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
            "favicon.svg": "image/svg+xml"}
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
                 "swagger-ui.css": "text/css; charset=utf-8"}
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def session_value(token: bytes) -> str:
    """The cookie's value for ``token``: HMAC-SHA256 of a fixed label, keyed with the token."""
    return hmac.new(token, LABEL, hashlib.sha256).hexdigest()


def cookie_authorizes(request: Request, token: bytes) -> bool:
    """Is ``request`` a read (GET) carrying the session cookie that ``token`` gives?"""
    if request.method not in READS:
        return False
    given = request.cookies.get(COOKIE)
    return given is not None and hmac.compare_digest(given.encode(),
                                                     session_value(token).encode())


def _asset(folder: str, files: dict[str, str], name: str, cache: str) -> FileResponse:
    if name not in files:
        raise HTTPException(404, f"no file {name!r}")
    return FileResponse(STATIC / folder / name, media_type=files[name],
                        headers={"Cache-Control": cache, "X-Content-Type-Options": "nosniff"})


async def _given_token(request: Request) -> tuple[str, bool]:
    """The token a login request carries, and whether it came from a plain HTML form."""
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise HTTPException(400, "body is not valid JSON") from None
        token = data.get("token") if isinstance(data, dict) else None
        return (token if isinstance(token, str) else ""), False
    if kind == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
        except ValueError:
            raise HTTPException(400, "too many form fields") from None
        return (fields.get("token") or [""])[0], True
    raise HTTPException(415, "send the token as JSON {\"token\": ...} or as a form field")


def router(token: bytes, openapi_url: str | None, title: str) -> APIRouter:
    """``/ui`` (page, assets, login, logout) and ``/docs`` for an app whose token is ``token``."""
    routes = APIRouter(include_in_schema=False)
    cookie = session_value(token)

    @routes.get("/ui")
    def page() -> FileResponse:
        return FileResponse(STATIC / "ui" / "index.html", media_type="text/html; charset=utf-8",
                            headers=PAGE_HEADERS)

    @routes.get("/ui/assets/{name}")
    def ui_asset(name: str) -> FileResponse:
        return _asset("ui", UI_FILES, name, "no-cache")

    @routes.post("/ui/login")
    async def login(request: Request) -> Response:
        given, form = await _given_token(request)
        given_bytes = given.encode(errors="surrogatepass")  # JSON may hold a lone surrogate
        if len(given) > MAX_TOKEN or not hmac.compare_digest(given_bytes, token):
            if form:
                return HTMLResponse(
                    '<!doctype html><title>adloader</title><p>Wrong token. '
                    '<a href="/ui">Try again</a>.</p>', status_code=401, headers=PAGE_HEADERS)
            return JSONResponse({"detail": "wrong token"}, status_code=401)
        answer: Response = RedirectResponse("/ui", status_code=303) if form \
            else Response(status_code=204)
        answer.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/",
                          secure=request.url.scheme == "https")
        answer.headers["Cache-Control"] = "no-store"
        return answer

    @routes.post("/ui/logout")
    async def logout(request: Request) -> Response:
        form = request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded")
        answer: Response = RedirectResponse("/ui", status_code=303) if form \
            else Response(status_code=204)
        answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                             secure=request.url.scheme == "https")
        return answer

    @routes.get("/docs")
    def docs() -> HTMLResponse:
        if openapi_url is None:
            raise HTTPException(404, "this daemon serves no OpenAPI description")
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{title} — API",
            swagger_js_url="/static/swagger/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger/swagger-ui.css",
            swagger_favicon_url="/ui/assets/favicon.svg",
            swagger_ui_parameters={"validatorUrl": None})  # no badge from validator.swagger.io

    @routes.get("/static/swagger/{name}")
    def swagger_asset(name: str) -> FileResponse:
        return _asset("swagger", SWAGGER_FILES, name, "public, max-age=86400")

    return routes
