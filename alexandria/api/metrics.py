"""What an operator watches: ``GET /healthz`` and ``GET /metrics`` (Prometheus text format).

Metrics are kept by ``prometheus-client`` under names prefixed ``alexandria_``:

- ``alexandria_admissions_total{outcome}``: ``POST /api/entries`` (and each line of
  ``POST /api/entries/batch``) by outcome — ``created``,
  ``retry`` (an exact retry, 200), ``dry_run``, or the refusal's typed error code
  (``BAD_SIGNATURE``, ``STALE_PREVIOUS``…: a fixed set, the codes of ``errors.py`` users);
- ``alexandria_request_duration_seconds{route,method}``: a latency histogram per route
  template (``/api/entries/{revision}``, never the raw path, so the label set stays bounded);
- ``alexandria_mcp_verifications_total{step}``: the checks ``/mcp`` tools actually ran
  (``signature_chain``, ``inclusion``; remembered verdicts are not counted), and
  ``alexandria_mcp_calls_refused_total{code}``: tool calls refused beyond the concurrency
  bounds (``CLIENT_BUSY``, ``SERVER_BUSY``);
- ``alexandria_writer_queue_depth``: admissions handed to the writer and not yet answered;
- ``alexandria_writer_{transactions,items,busy_seconds,cpu_seconds}_total{process}``: what the
  group-commit writers did, counted on their threads in every HTTP process (the app watches
  its library's storage) and in the writer process (``service/writer_metrics.py``);
- ``alexandria_log_size``, ``alexandria_checkpoint_size``, ``alexandria_checkpoint_age_seconds``
  and, on a mirror, ``alexandria_mirror_lag_entries`` / ``alexandria_origin_log_size``: read
  from the database (or the mirror's follower) when scraped, so every process reports the same
  library-wide values.

Several HTTP worker processes (``serve --workers N``) each count their own requests; a scrape
reaches one of them.  ``serve`` then runs prometheus-client's multiprocess mode: every worker
writes its counters and histograms to memory-mapped files in a private directory
(``PROMETHEUS_MULTIPROC_DIR``, set before the workers start) and whichever worker answers the
scrape sums them (the queue depth gauge: summed over the live workers).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from alexandria.api.http import json_response, library_of, query_params
from alexandria.errors import AlexandriaError
from alexandria.service.library import Library

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

ADMISSIONS = Counter(
    "alexandria_admissions", "POST /api/entries answers by outcome: created, retry, dry_run,"
    " or the typed error code", ["outcome"],
)
REQUEST_SECONDS = Histogram(
    "alexandria_request_duration_seconds", "HTTP request latency by route template",
    ["route", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
MCP_VERIFICATIONS = Counter(
    "alexandria_mcp_verifications", "checks the /mcp tools actually ran (signature_chain,"
    " inclusion); what was remembered is not counted", ["step"],
)
MCP_CALLS = Counter(
    "alexandria_mcp_calls_refused", "/mcp tool calls refused before any work: CLIENT_BUSY,"
    " SERVER_BUSY", ["code"],
)
WRITER_QUEUE = Gauge(
    "alexandria_writer_queue_depth", "admissions handed to the writer and not answered yet",
    multiprocess_mode="livesum",
)


@contextlib.contextmanager
def admission_outcome() -> Iterator[list[str]]:
    """Count one ``POST /api/entries``: the handler puts its outcome in the yielded list; a
    typed refusal is counted by its code, anything else as ``INTERNAL``."""
    outcome: list[str] = []
    try:
        yield outcome
    except AlexandriaError as exc:
        _admissions(exc.code).inc()
        raise
    except Exception:
        _admissions("INTERNAL").inc()
        raise
    _admissions(outcome[0] if outcome else "unknown").inc()


def count_admission(outcome: str) -> None:
    """Count one line of ``POST /api/entries/batch`` as ``admission_outcome`` counts one
    ``POST /api/entries``."""
    _admissions(outcome).inc()


@functools.cache
def _admissions(outcome: str) -> Any:
    """The counter's child of one outcome (a bounded set: the typed codes), looked up once."""
    return ADMISSIONS.labels(outcome)


#: a stranger chooses the method: any other is labelled OTHER, so the label set stays bounded
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@functools.cache
def _latency(route: str, method: str) -> Any:
    return REQUEST_SECONDS.labels(route, method)


class RequestTimer:
    """ASGI middleware: the latency of every HTTP request, labelled by the route template that
    matched (``unmatched`` otherwise)."""

    def __init__(self, app: ASGIApp, routes: list[Any]) -> None:
        self.app = app
        # the router records the matched route's endpoint in the request's scope: one dict
        # lookup per request, no second pass over the routes' patterns
        self.templates: dict[object, str] = {
            r.endpoint: r.path for r in routes if isinstance(r, Route)
        }

    def _template(self, scope: Scope) -> str:
        return self.templates.get(scope.get("endpoint"), "unmatched")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                method = scope["method"] if scope["method"] in _METHODS else "OTHER"
                _latency(self._template(scope), method).observe(
                    time.perf_counter() - started
                )

        await self.app(scope, receive, timed_send)


class _Values(Collector):
    """Gauges computed for one scrape."""

    def __init__(self, values: dict[str, tuple[str, float]]) -> None:
        self.values = values

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, (help_text, value) in self.values.items():
            yield GaugeMetricFamily(name, help_text, value=value)


async def library_values(library: Library) -> dict[str, tuple[str, float]]:
    status = await library.status()
    out: dict[str, tuple[str, float]] = {
        "alexandria_log_size": ("leaves in the log", status.log_size),
        "alexandria_checkpoint_size": ("size of the latest signed checkpoint",
                                       status.checkpoint_size),
        "alexandria_checkpoint_age_seconds": (
            "seconds since the latest checkpoint was signed (or received, on a mirror);"
            " -1 when there is none", status.checkpoint_age_s),
        "alexandria_ready": ("1 when /healthz says ready", 1.0 if status.ready else 0.0),
    }
    if status.origin_size is not None:
        out["alexandria_origin_log_size"] = ("the origin's log size, as last seen by this"
                                             " mirror", status.origin_size)
        out["alexandria_mirror_lag_entries"] = (
            "entries the origin holds (as last seen) that this mirror has not verified and"
            " stored yet", status.lag or 0)
    if status.origin_silent_s is not None:
        out["alexandria_origin_silent_seconds"] = (
            "seconds since the origin last answered this mirror", status.origin_silent_s)
    return out


def exposition(values: dict[str, tuple[str, float]]) -> bytes:
    """The text exposition: this process's metrics (or every worker's, in multiprocess mode)
    followed by the library-wide gauges."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        own = generate_latest(registry)
    else:
        own = generate_latest(REGISTRY)
    extra = CollectorRegistry(auto_describe=False)
    extra.register(_Values(values))
    return own + generate_latest(extra)


async def get_metrics(request: Request) -> Response:
    query_params(request, ())
    library = library_of(request)
    body = exposition(await library_values(library))
    return Response(body, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-cache"})


async def get_healthz(request: Request) -> Response:
    """Live: this process answers.  Ready: it can take writes and sign (or, on a mirror, is
    following its origin); 503 with the reasons otherwise."""
    query_params(request, ())
    library = library_of(request)
    status = await library.status()
    body = {"live": True, "ready": status.ready, "reasons": list(status.reasons),
            "log_size": status.log_size, "checkpoint_size": status.checkpoint_size}
    if status.origin is not None:
        body["origin"] = status.origin
        body["origin_size"] = status.origin_size
        body["lag"] = status.lag
        body["origin_silent_s"] = round(status.origin_silent_s or 0.0, 1)
    return json_response(body, 200 if status.ready else 503,
                         headers={"Cache-Control": "no-cache"})


def worker_exited() -> None:
    """Drop this process's live gauges from the multiprocess files once it stops."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


routes = [
    Route("/healthz", get_healthz, methods=["GET"]),
    Route("/metrics", get_metrics, methods=["GET"]),
]
