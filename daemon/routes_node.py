"""The REST routes of the node and its model: allocations, the node summary, events, the
TPM and its refit (under ``rest.V1``), and the unversioned ``/metrics`` and ``/healthz``."""

# No ``from __future__ import annotations``: FastAPI must see the route functions' types.
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.params import Depends
from fastapi.responses import PlainTextResponse

from adloader import rest

from .routes import call
from .service import NodeService

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
MAX_EVENT_ID = 2**63 - 1


def router(service: NodeService) -> APIRouter:
    """The node and model routes over ``service`` (its caller adds the token check)."""
    node_api = APIRouter()

    @node_api.get(rest.ALLOCATIONS, tags=["node"])
    def allocations() -> dict:
        """The policy, the node's loading capacity and each job's workers."""
        return call("allocations", service.allocations)

    @node_api.get(rest.NODE, tags=["node"])
    def node() -> dict:
        """What this node offers a cluster scheduler: free and idle loading workers, the
        predicted gain of one more worker, what a new job could load now, cache room."""
        return call("the node summary", service.node_summary)

    @node_api.get(rest.EVENTS, response_model=list[dict], tags=["node"])
    def events(since: Annotated[int, Query(ge=0, le=MAX_EVENT_ID)] = 0,
               limit: Annotated[int, Query(ge=1, le=5000)] = 500) -> Response:
        """Events with an id above ``since``, oldest first."""
        return Response(call("events", service.events_json, since, limit),
                        media_type="application/json")

    @node_api.get(rest.MODEL, tags=["model"])
    def model() -> dict:
        """The throughput prediction model (TPM) in use."""
        return call("reading the model", service.model)

    @node_api.post(rest.MODEL_FIT, tags=["model"])
    def fit_model() -> dict:
        """Refit the TPM from the samples stored so far."""
        return call("fitting the model", service.fit_model)

    return node_api


def open_router(service: NodeService, metrics_auth: Depends) -> APIRouter:
    """``/metrics`` (behind ``metrics_auth``) and ``/healthz`` (no token), outside ``/v1``."""
    open_api = APIRouter()

    @open_api.get(rest.METRICS, response_class=PlainTextResponse, dependencies=[metrics_auth],
                  tags=["node"])  # fmt: skip
    def metrics() -> PlainTextResponse:
        """Prometheus text exposition."""
        return PlainTextResponse(call("metrics", service.metrics), media_type=PROMETHEUS_TEXT)

    @open_api.get(rest.HEALTH, tags=["node"])
    def healthz() -> dict:
        """Liveness; needs no token."""
        return call("health", service.health)

    return open_api
