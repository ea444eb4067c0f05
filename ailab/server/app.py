"""create_app(): the inference server as a FastAPI app (topics S3-S11).

One process, one event loop for HTTP, one worker thread per loaded model (inside its
DynamicBatcher), which also loads and warms the model (server/model_thread.py says why). The handler
stays cheap - read bytes, json.loads, submit, write bytes - because every millisecond spent on the
event loop is a millisecond the GIL is not free for tokenizing.

    POST /v1/predict  {"inputs": "text" | [...], "model": optional}  -> outputs, model, model_sha256, request_id
    GET  /healthz     liveness: model, weights SHA-256, memory, recent QPS (200 while the process lives)
    GET  /readyz      200 only once the default model is loaded and warmed, else 503; also 503 (with the
                      reason) while a loaded model's batcher is dead
    GET  /metrics     Prometheus text format
    GET  /v1/models   what is registered and loaded
    POST /admin/models/{name}/swap   hot swap: reload a model beside the old one, switch, drain the old
                      (409 when old + new would exceed the memory budget; needs the API key, or without
                      one a loopback client)

The routes live in routes.py, the state they share in state.py. Headers are checked in headers.py, the
body's size and time and the requests in flight in limits.py, malformed HTTP below the app in protocol.py:
every refusal is a 4xx (or 503) with a JSON message.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Callable

from fastapi import FastAPI

import ailab.server.generate as generate_routes
import ailab.server.routes as routes
from ailab.server.config import ServerConfig
from ailab.server.limits import ConcurrencyLimit
from ailab.server.metrics import ServerMetrics
from ailab.server.registry import ModelRegistry
from ailab.server.state import ServerState


def default_models(engine: str = "torch", too_long: str = "truncate") -> tuple[dict[str, Callable], str]:
    from ailab.server.predictors import sentiment_predictor

    return {"sentiment": lambda: sentiment_predictor(engine, too_long=too_long)}, "sentiment"


def create_app(models: dict[str, Callable[[], object]] | None = None, default_model: str | None = None,
               config: ServerConfig | None = None, generation=None, **overrides) -> FastAPI:
    """The server. `models`: name -> loader() returning a predictor (a batch function with .name,
    .sha256, optional .warmup/.verify/.n_bytes); default: the MiniLM sentiment classifier.
    `generation`: a server.generate.GenerationEngine, to serve POST /v1/generate as well.
    Keyword overrides set ServerConfig fields: create_app(models, max_batch_size=1)."""
    config = (config or ServerConfig()).replace(**overrides)
    if models is None:
        models, default_model = default_models(too_long=config.too_long)
    default_model = default_model or next(iter(models))
    # The gauges read the registry and the state made just below (a closure sees them once they exist).
    metrics = ServerMetrics(
        queue_depth=lambda: sum(e.batcher.queue_depth for e in registry.loaded.values()),
        queue_capacity=lambda: config.max_queue * max(1, len(registry.loaded)),
        in_flight=lambda: state.in_flight,
        models_loaded=lambda: len(registry.loaded))
    registry = ModelRegistry(models, default_model, config.max_models, config.max_model_bytes,
                             {"max_batch_size": config.max_batch_size, "max_wait_ms": config.max_wait_ms,
                              "max_queue": config.max_queue, "length_bucket_tokens": config.length_bucket_tokens},
                             config.torch_threads, metrics.on_batch, metrics.on_model_loaded,
                             config.warmup, freeze_gc=config.freeze_gc)
    state = ServerState(config, registry, metrics)
    if generation is not None:
        state.generation = generation
        generation.metrics = generate_routes.GenerationMetrics(metrics.registry, generation)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.loop = asyncio.get_running_loop()
        task = asyncio.create_task(state.load_default())  # answer /healthz and /readyz (503) while loading
        if config.load_before_serving:
            await asyncio.shield(task)  # start-up ends once the model is ready, or failed (/readyz says why)
        yield
        task.cancel()
        state.ready = False
        await registry.close()
        if generation is not None:
            generation.close()

    app = FastAPI(title="ailab inference server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.ailab = state
    app.add_middleware(routes.PredictFastPath)   # inside the limit below: the last one added is the outermost
    app.add_middleware(ConcurrencyLimit, limit=config.max_concurrency, retry_after_s=config.retry_after_s,
                       on_reject=lambda: metrics.requests.labels("503").inc())

    app.include_router(routes.router)  # the handlers, each reading this state from request.app.state.ailab
    app.include_router(generate_routes.router)   # POST /v1/generate (404 unless a generation engine was given)
    return app
