"""What the REST routes share (``daemon.api.routes_jobs``, ``daemon.api.routes_node``): a service
call whose failure becomes one HTTP error line, a job's 404, and a page's answer."""

# No ``from __future__ import annotations``: FastAPI must see the route functions' types.
import logging
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import HTTPException, Path, Response

from adloader import limits, rest
from adloader.errors import ConflictError, InputError, StorageError
from adloader.rest_answers import PROBLEMS

log = logging.getLogger("adloader.daemon.api")  # the API's logger (daemon.api.app)
T = TypeVar("T")

JobId = Annotated[str, Path(max_length=limits.MAX_JOB_ID)]


def call(what: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; a bad input is 400, one the node's state refuses 409, a node that cannot
    serve now (its store) 503 and a bug 500, both logged: a client retries only the 503."""
    try:
        return fn(*args)
    except HTTPException:
        raise
    except ConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    except InputError as exc:
        raise HTTPException(400, str(exc)) from None
    except StorageError as exc:
        log.error("%s: %s", what, exc)
        raise HTTPException(503, f"{what} failed: {exc}") from None
    except Exception:
        log.exception("%s failed", what)
        raise HTTPException(500, f"{what} failed inside the daemon (see its log)") from None


def found(job_id: str, view: T | None) -> T:
    """``view``, or 404 when there is no such job."""
    if view is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return view


def page(body: bytes, cursor: str | None) -> Response:
    """A page's JSON array, its next cursor in the ``rest.NEXT_CURSOR`` header."""
    headers = {rest.NEXT_CURSOR: cursor} if cursor else None
    return Response(body, media_type="application/json", headers=headers)


def paged(what: str) -> dict:
    """The OpenAPI note of a paged answer's header."""
    return {200: {"headers": {rest.NEXT_CURSOR: {
        "description": f"the cursor of the next page of {what} (pass it as ``cursor``)",
        "schema": {"type": "string"}}}}}


def problems(*statuses: int) -> dict:
    """The OpenAPI note of the error answers an operation gives besides those every one may
    give; ``daemon.api.app`` makes each a ``rest_answers.Problem``."""
    return {status: {"description": PROBLEMS[status][1]} for status in statuses}
