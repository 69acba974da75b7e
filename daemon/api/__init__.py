"""The REST API: the FastAPI app (``app``), its routers (``routes``, ``routes_jobs``,
``routes_node``), the ``NodeService`` protocol it speaks to (``service``) and the node as it
sees it (``service_impl``: ``NodeApi``, which wraps the node), the operator's page and offline
docs (``ui``, ``static/``), ``/metrics`` (``metrics``) and its own listener
(``metrics_listener``), and the daemon's uvicorn (``http_server``)."""
