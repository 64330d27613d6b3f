"""`GET /metrics`: the server's figures in Prometheus' text format, kept by prometheus-client.

    podium_requests_total{route, method, status}   requests answered (route: the route's
                                                   pattern, e.g. /v1/traces/{id}; "other"
                                                   for paths no route serves)
    podium_request_duration_seconds{route}          time to the end of the response
    podium_errors_total{code}                       error bodies sent, by their `code`
    podium_runs_in_flight                           team runs holding a slot
    podium_tokens_total{kind}                       tokens the runs used (prompt, completion:
                                                   every call's, the Conductor's and the
                                                   workers')
    podium_model_calls_total                        model calls the runs made

Each request is counted once, by the access log (`podium.serve.access`), when its response is
done; a run's usage and an error's code reach it through the request's ASGI scope. With
`podium serve --processes N` the processes share a folder (prometheus-client's multiprocess
mode, `PROMETHEUS_MULTIPROC_DIR`, set by the command), so a scrape answered by any of them
counts every process's requests.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

USAGE = "podium.usage"  # scope key: (prompt tokens, completion tokens, calls) of the run
ERROR = "podium.error"  # scope key: the code of the error body sent
ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/models", "/health", "/metrics",
          "/traces")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def route_of(path: str) -> str:
    """The route pattern a path belongs to, so that ids never become labels."""
    if path in ROUTES:
        return path
    for prefix, pattern in (("/v1/traces/", "/v1/traces/{id}"), ("/traces/", "/traces/{id}"),
                            ("/v1/models/", "/v1/models/{model}")):
        if path.startswith(prefix) and "/" not in path[len(prefix):].rstrip("/"):
            return pattern
    return "other"


class ServeMetrics:
    """The server's metrics, in a registry of their own (an app per registry, so several
    apps in one process, as in the tests, do not share counts)."""

    def __init__(self) -> None:
        self.shared = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("podium_requests", "HTTP requests answered, by route pattern, "
                                "method and status.", ["route", "method", "status"], registry=r)
        self.duration = Histogram("podium_request_duration_seconds", "Time from a request to "
                                  "the end of its response.", ["route"], buckets=BUCKETS,
                                  registry=r)
        self.errors = Counter("podium_errors", "Error bodies sent, by their code.", ["code"],
                              registry=r)
        self.in_flight = Gauge("podium_runs_in_flight", "Team runs holding a run slot.",
                               registry=r, multiprocess_mode="livesum")
        self.tokens = Counter("podium_tokens", "Tokens the runs used, every model call's.",
                              ["kind"], registry=r)
        self.calls = Counter("podium_model_calls", "Model calls the runs made.", registry=r)

    def answered(self, scope: dict, status: int, seconds: float) -> None:
        """Count one finished request (the access log calls this)."""
        route = route_of(scope["path"])
        self.requests.labels(route, scope["method"], str(status)).inc()
        self.duration.labels(route).observe(seconds)
        if (code := scope.get(ERROR)) is not None:
            self.errors.labels(code).inc()
        if (usage := scope.get(USAGE)) is not None:
            prompt, completion, calls = usage
            self.tokens.labels("prompt").inc(prompt)
            self.tokens.labels("completion").inc(completion)
            self.calls.inc(calls)

    def page(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type."""
        if self.shared:
            from prometheus_client import multiprocess

            registry: Any = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
