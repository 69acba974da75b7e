"""The REST routes of the node and its model: allocations, the node summary, events, the
TPM and its refit (under ``rest.V1``), and the unversioned ``/metrics`` and ``/healthz``."""

# No ``from __future__ import annotations``: FastAPI must see the route functions' types.
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.params import Depends
from fastapi.responses import PlainTextResponse

from adloader import rest
from adloader import rest_answers as answers

from .routes import call, page, paged, problems
from .service import NodeService

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def router(service: NodeService) -> APIRouter:
    """The node and model routes over ``service`` (its caller adds the token check)."""
    node_api = APIRouter()

    @node_api.get(rest.ALLOCATIONS, tags=["node"], operation_id="get_allocations",
                  response_model=answers.Allocations)
    def allocations() -> dict:
        """The policy, the node's loading capacity and each job's workers."""
        return call("allocations", service.allocations)

    @node_api.get(rest.NODE, tags=["node"], operation_id="get_node",
                  response_model=answers.NodeSummary)
    def node() -> dict:
        """What this node offers a cluster scheduler: free and idle loading workers, the
        predicted gain of one more worker, what a new job could load now, cache room."""
        return call("the node summary", service.node_summary)

    @node_api.get(rest.EVENTS, response_model=list[answers.Event], tags=["node"],
                  operation_id="list_events", responses=paged("events"))
    def events(query: Annotated[rest.EventQuery, Query()]) -> Response:
        """Events, oldest first, a page at a time: ``limit`` of them (default 500) after
        ``cursor`` (``e.`` and an event id) or after the event id ``since``; the cursor to
        poll with next in the ``X-Next-Cursor`` header. Only those of ``job`` (an id), of the
        ``kind``s given (at most 32 values of at most 64 characters, each one kind or several
        comma-separated), of jobs named ``name``, at a time in [``t_since``,
        ``t_until``) (seconds since the epoch)."""
        body, cursor = call("events", service.events_page, query)
        return page(body, cursor)

    @node_api.get(rest.MODEL, tags=["model"], operation_id="get_model",
                  response_model=answers.ModelView)
    def model() -> dict:
        """The throughput prediction model (TPM) in use."""
        return call("reading the model", service.model)

    @node_api.post(rest.MODEL_FIT, tags=["model"], operation_id="fit_model",
                   response_model=answers.ModelView, responses=problems(409))
    def fit_model() -> dict:
        """Refit the TPM from the samples stored so far (409 while there are too few)."""
        return call("fitting the model", service.fit_model)

    return node_api


def open_router(service: NodeService, metrics_auth: Depends) -> APIRouter:
    """``/metrics`` (behind ``metrics_auth``) and ``/healthz`` (no token), outside ``/v1``."""
    open_api = APIRouter()

    @open_api.get(rest.METRICS, response_class=PlainTextResponse, dependencies=[metrics_auth],
                  tags=["node"], operation_id="get_metrics",
                  responses=problems(401))  # fmt: skip
    def metrics() -> PlainTextResponse:
        """Prometheus text exposition."""
        return PlainTextResponse(call("metrics", service.metrics), media_type=PROMETHEUS_TEXT)

    @open_api.get(rest.HEALTH, tags=["node"], operation_id="get_health",
                  response_model=answers.Health)
    def healthz() -> dict:
        """Liveness; needs no token."""
        return call("health", service.health)

    return open_api
