"""create_app(): the inference server as a FastAPI app (topics S3-S11), with an LLM service beside it (issue 28).

One process, one event loop for HTTP, one worker thread per loaded model (inside its
DynamicBatcher), which also loads and warms the model (server/model_thread.py says why). The handler
stays cheap - read bytes, json.loads, submit, write bytes - because every millisecond spent on the
event loop is a millisecond the GIL is not free for tokenizing.

    POST /v1/predict  {"inputs": "text" | [...], "model": optional}  -> outputs, model, model_sha256, request_id
    POST /v1/completions, /v1/chat/completions   OpenAI's API over the generation engine (openai_api.py)
    GET  /healthz     liveness (200 while the process lives); the details only for callers with the key, if set
    GET  /readyz      200 only once the models are loaded and warmed, else 503; also 503 (with the
                      reason) while a loaded model's batcher or the generation engine's core is dead; the model's
                      name and the reason only for callers with the key, if set
    GET  /metrics     Prometheus text format
    GET  /v1/models   OpenAI's model list, with what is registered and loaded
    POST /admin/models/{name}/swap   hot swap: reload a model beside the old one, switch, drain the old
                      (409 when old + new would exceed the memory budget)

Every request first passes the serving edge (edge.py): its request id, the API key (every route but the
probes; /admin loopback-only without a key), one table from exception to answer, one error body, request
metrics and the log. Then the in-flight limit (limits.py), then the routes (routes.py, openai_api.py).
Headers are checked in headers.py, malformed HTTP below the app in protocol.py: every refusal is a 4xx
(or 503) with a JSON message.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Callable

from fastapi import FastAPI
from starlette.exceptions import HTTPException

import ailab.server.openai_api as openai_routes
import ailab.server.routes as routes
from ailab.server.config import ServerConfig
from ailab.server.edge import OPENAI_ROUTES, ServingEdge, error_response, flat_routes, request_id
from ailab.server.llm_metrics import GenerationMetrics
from ailab.server.limits import ConcurrencyLimit
from ailab.server.metrics import ServerMetrics
from ailab.server.registry import ModelRegistry
from ailab.server.state import ServerState


def default_models(engine: str = "torch_eager", too_long: str = "truncate") -> tuple[dict[str, Callable], str]:
    from ailab.server.predictors import sentiment_predictor

    return {"sentiment": lambda: sentiment_predictor(engine, too_long=too_long)}, "sentiment"


def create_app(
    models: dict[str, Callable[[], object]] | None = None,
    default_model: str | None = None,
    config: ServerConfig | None = None,
    generation=None,
    **overrides,
) -> FastAPI:
    """The server. `models`: name -> loader() returning a predictor (a batch function with .name,
    .sha256, optional .warmup/.verify/.n_bytes); default: the MiniLM sentiment classifier, or none at all when
    a `generation` engine (server.async_llm.AsyncLLM) is given, which the OpenAI routes serve.
    Keyword overrides set ServerConfig fields: create_app(models, max_batch_size=1)."""
    config = (config or ServerConfig()).replace(**overrides)
    if models is None:
        models, default_model = ({}, None) if generation is not None else default_models(too_long=config.too_long)
    default_model = default_model or next(iter(models), None)
    # The gauges read the registry and the state made just below (a closure sees them once they exist).
    metrics = ServerMetrics(
        queue_depth=lambda: sum(e.batcher.queue_depth for e in registry.loaded.values()),
        queue_capacity=lambda: config.max_queue * max(1, len(registry.loaded)),
        in_flight=lambda: state.in_flight,
        models_loaded=lambda: len(registry.loaded),
    )
    registry = ModelRegistry(
        models,
        default_model,
        config.max_models,
        config.max_model_bytes,
        {
            "max_batch_size": config.max_batch_size,
            "max_wait_ms": config.max_wait_ms,
            "max_queue": config.max_queue,
            "length_bucket_tokens": config.length_bucket_tokens,
        },
        config.torch_threads,
        metrics.on_batch,
        metrics.on_model_loaded,
        config.warmup,
        freeze_gc=config.freeze_gc,
    )
    state = ServerState(config, registry, metrics)
    if generation is not None:
        state.generation = generation
        generation.metrics = GenerationMetrics(metrics.registry, generation)

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
    # The last one added is the outermost: the edge, then the in-flight limit, then predict's fast path.
    app.add_middleware(routes.PredictFastPath)
    app.add_middleware(ConcurrencyLimit, limit=config.max_concurrency, retry_after_s=config.retry_after_s)
    app.add_middleware(ServingEdge, state=state, routes=lambda: app.routes)

    async def no_such_route(request, exc: HTTPException):  # FastAPI's own 404/405, in the one error body
        response = error_response(
            exc.status_code,
            f"{exc.detail}: {request.method} {request.url.path}",
            request_id(request),
            request.url.path in OPENAI_ROUTES,
        )
        response.headers.update(exc.headers or {})
        return response

    app.add_exception_handler(HTTPException, no_such_route)
    app.include_router(routes.router)  # the handlers, each reading this state from request.app.state.ailab
    app.include_router(openai_routes.router)  # the OpenAI routes (404 with words unless a generation engine is given)
    metrics.expect_routes(route.path for route in flat_routes(app.routes))
    return app
