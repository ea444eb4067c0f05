"""What the server reports about itself: Prometheus metrics, JSON-lines logs, recent QPS (S8-S10).

Metric names follow Prometheus conventions (unit suffixes, _total for counters). Each app gets
its own CollectorRegistry, so several servers in one process (tests, notebooks) do not collide.
Logs carry a request id, the input length and a SHA-256 prefix - never the text itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import deque

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128)

# The alert rules over these metrics live in monitoring/alerts.yml (the course's one rules file).


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


class ServerMetrics:
    def __init__(self, queue_depth=lambda: 0, queue_capacity=lambda: 0, in_flight=lambda: 0, models_loaded=lambda: 0):
        self.registry = r = CollectorRegistry()
        # Every route, the probes included, under its own label (the route's template, or "unmatched"): the SLO
        # alerts in monitoring/alerts.yml pick the routes they are about.
        self.requests = Counter(
            "ailab_requests", "Requests answered, by route and HTTP status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "ailab_request_latency_seconds",
            "Time from request read to answer, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "ailab_queue_wait_seconds", "Time a text waited in the batcher queue", buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_compute = Histogram(
            "ailab_batch_compute_seconds",
            "Time to compute one batch on the worker",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "ailab_batch_stage_seconds",
            "Time one batch spent in each stage of the model (tokenize, forward, postprocess)",
            ["model", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram("ailab_batch_size", "Texts per batch", buckets=BATCH_BUCKETS, registry=r)
        self.inputs = Counter("ailab_inputs", "Texts received", registry=r)
        self.truncated = Counter("ailab_inputs_truncated", "Texts cut to the model's maximum length", registry=r)
        self.degraded = Counter("ailab_degraded", "Requests answered with the fallback", registry=r)
        self.model_load = Gauge(
            "ailab_model_load_seconds", "Seconds to load (not warm) each model", ["model"], registry=r
        )
        self.model_warmup = Gauge("ailab_model_warmup_seconds", "Seconds to warm up each model", ["model"], registry=r)
        self.engine = Gauge(
            "ailab_model_engine_info",
            "The engine each loaded model runs on (1); with engine auto, the variant measured fastest here at start-up",
            ["model", "engine", "asked"],
            registry=r,
        )
        Gauge("ailab_in_flight", "Requests being handled now", registry=r).set_function(in_flight)
        Gauge("ailab_queue_depth", "Texts waiting in the batcher queues", registry=r).set_function(queue_depth)
        Gauge("ailab_queue_capacity", "Most texts the queues accept", registry=r).set_function(queue_capacity)
        Gauge("ailab_models_loaded", "Models in memory", registry=r).set_function(models_loaded)
        Gauge("ailab_process_resident_memory_bytes", "Resident memory of the server process", registry=r).set_function(
            rss_bytes
        )
        self._done = deque()  # completion times, for recent QPS
        self._children: dict = {}  # (route, status) -> (counter child, histogram child): labels() costs a lock

    def on_model_loaded(self, entry) -> None:
        """The registry calls this once a model is loaded and warmed: its load and warm-up seconds, its engine,
        and from now on (not during warm-up: those batches are not traffic) its per-stage times."""
        self.model_load.labels(entry.name).set(entry.load_seconds)
        self.model_warmup.labels(entry.name).set(entry.warmup_seconds)
        engine = entry.predictor.engine
        self.engine.labels(entry.name, engine, "auto" if entry.predictor.engine_choice else engine).set(1)
        entry.predictor.on_stages = self.stage_observer(entry.name)

    def on_batch(self, size: int, waits_ms: list, compute_s: float) -> None:
        self.batch_size.observe(size)
        self.batch_compute.observe(compute_s)
        for w in waits_ms:
            self.queue_wait.observe(w / 1e3)

    def stage_observer(self, model: str):
        """A predictor's on_stages hook: one observation per stage per batch, labelled with the model."""
        children = {k: self.stage.labels(model, k) for k in ("tokenize", "forward", "postprocess")}

        def observe(t) -> None:
            children["tokenize"].observe(t.tokenize_ms / 1e3)
            children["forward"].observe(t.forward_ms / 1e3)
            children["postprocess"].observe(t.postprocess_ms / 1e3)

        return observe

    def expect_routes(self, routes) -> None:
        """Every route's latency histogram, at zero before its first request: a scrape (a Recorder, Prometheus) that
        comes before any traffic reads "no requests yet", not "no such metric", and rate() starts from zero."""
        for route in routes:
            self.latency.labels(route)

    def on_request(self, status: int, seconds: float, route: str) -> None:
        children = self._children.get((route, status))
        if children is None:
            children = self._children[(route, status)] = (
                self.requests.labels(route, str(status)),
                self.latency.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)
        now = time.monotonic()
        self._done.append(now)
        while self._done and self._done[0] < now - 10.0:
            self._done.popleft()

    def recent_qps(self, window_s: float = 10.0) -> float:
        now = time.monotonic()
        return sum(1 for t in self._done if t >= now - window_s) / window_s

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": round(record.created, 3), "level": record.levelname.lower(), "msg": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        return json.dumps(entry, ensure_ascii=False)


ACCESS_LOG = logging.getLogger("ailab.server.access")


def input_fingerprint(texts: list[str]) -> str:
    """First 12 hex digits of SHA-256 over the texts: enough to spot repeats, useless to read them."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "replace"))
        h.update(b"\x00")
    return h.hexdigest()[:12]


def text_fields(texts: list[str]) -> dict:
    """What a log line may say about texts: how many, how long, a fingerprint. Never the texts."""
    return {
        "n_inputs": len(texts),
        "input_chars": sum(len(t) for t in texts),
        "input_sha256_prefix": input_fingerprint(texts),
    }


def log_request(request_id: str, status: int, seconds: float, route: str, method: str, fields: dict) -> None:
    """One JSON line per request, written by the serving edge (server/edge.py) with what the handler noted."""
    if not ACCESS_LOG.isEnabledFor(logging.INFO):
        return
    entry = {
        "request_id": request_id,
        "route": route,
        "method": method,
        "status": status,
        "latency_ms": round(seconds * 1e3, 2),
        **fields,
    }
    if isinstance(entry.get("error"), str):
        entry["error"] = entry["error"][:200]
    ACCESS_LOG.info("request", extra={"fields": entry})


def configure_json_logging(stream=None, level: int = logging.INFO) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter())
    ACCESS_LOG.addHandler(handler)
    ACCESS_LOG.setLevel(level)
    ACCESS_LOG.propagate = False
    return handler
