"""The server's HTTP routes. Each handler reads what it needs from the app's ServerState
(request.app.state.ailab, set by create_app): its settings, the model registry and the metrics.

    POST /v1/predict, GET /healthz /readyz /metrics /v1/models, POST /admin/models/{name}/swap
    (the OpenAI completion routes are in server/openai_api.py)

Who may call a route, the request id, the error answers, the request metrics and the log are not here: the
serving edge (server/edge.py) does them for every route. A handler raises; the edge answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ailab.batching import BatcherClosedError, DeadlineExceededError, QueueFullError
import ailab.server.headers as hdr
from ailab.server.edge import ServerBusy, SwapLoadFailed, authorised, note, request_id
from ailab.server.limits import read_body
from ailab.server.metrics import text_fields
from ailab.server.predictors import InputTooLongError
from ailab.server.registry import ModelLoadError, ModelRegistry, SwapRefusedError, UnknownModelError
from ailab.server.state import ServerState
from ailab.server.validation import InvalidRequest, parse_predict

router = APIRouter()


def _json(payload: dict, status: int = 200, headers: dict | None = None) -> Response:
    return Response(
        json.dumps(payload, ensure_ascii=False).encode(),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


async def loaded_by(registry: ModelRegistry, name: str | None, deadline: float):
    """The model, once loaded; 504 if the request's deadline passes first. A server that answers before its
    model is ready (load_before_serving off, or a model loaded on demand) would otherwise hold a request for
    the whole load, past the deadline the client was promised. The load goes on for the requests after it."""
    if (name or registry.default) in registry.loaded:  # the usual case: no task, no timer
        return await registry.get(name)
    load = asyncio.ensure_future(registry.get(name))
    try:
        return await asyncio.wait_for(asyncio.shield(load), max(deadline - time.monotonic(), 0))
    except TimeoutError:
        load.add_done_callback(lambda t: t.cancelled() or t.exception())  # a failed load is the next one's to say
        raise DeadlineExceededError("the request's deadline passed while the model was still loading") from None


async def infer(registry: ModelRegistry, req, deadline: float, priority: int):
    """Submit each text; retry once on a batcher closed by a hot swap or an eviction."""
    for attempt in range(2):
        entry = await loaded_by(registry, req.model, deadline)
        b = entry.batcher
        try:
            if len(req.texts) == 1:
                return entry, [await b.submit(req.texts[0], priority=priority, deadline=deadline)]
            if b.room(priority) < len(req.texts):  # all or nothing (total and per-level bounds): no half answers
                b.stats.rejected += 1
                raise QueueFullError(f"{len(req.texts)} texts do not fit in the queue")
            tasks = [asyncio.ensure_future(b.submit(t, priority=priority, deadline=deadline)) for t in req.texts]
            try:
                return entry, await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:  # one text failed: stop paying for its siblings
                    t.cancel()
                raise
        except BatcherClosedError:
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


# What a request may fail with and still be the client's doing or the server's load, not a broken model:
# these go to the serving edge's table as they are, never to the fallback answer.
_NOT_A_BROKEN_MODEL = (InvalidRequest, UnknownModelError, QueueFullError, DeadlineExceededError, InputTooLongError)


@router.post("/v1/predict")
async def predict(request: Request) -> Response:
    """Errors are raised; the serving edge (server/edge.py) answers them, counts and logs the request."""
    state: ServerState = request.app.state.ailab
    config, registry, metrics = state.config, state.registry, state.metrics
    state.in_flight += 1
    try:
        hdr.check_content_type(request)
        deadline, priority = hdr.deadline(request, config.request_timeout_s), hdr.priority(request)
        body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
        req = parse_predict(body, config.max_items, config.max_chars)
        note(request, **text_fields(req.texts))
        if config.max_rss_bytes and state.rss() > config.max_rss_bytes:
            raise ServerBusy("server memory is over its watermark; retry later")
        try:
            entry, outputs = await infer(registry, req, deadline, priority)
        except _NOT_A_BROKEN_MODEL:
            raise
        except Exception as e:  # the model cannot serve: degrade if configured
            if config.fallback is None:
                raise
            note(request, model="fallback", error=f"{type(e).__name__}: {e}")
            metrics.degraded.inc()
            return _json(
                {
                    "outputs": [dict(config.fallback) for _ in req.texts],
                    "model": "fallback",
                    "model_sha256": None,
                    "request_id": request_id(request),
                    "degraded": True,
                }
            )
        n_trunc = sum(1 for o in outputs if isinstance(o, dict) and o.get("truncated"))
        metrics.inputs.inc(len(outputs))
        if n_trunc:
            metrics.truncated.inc(n_trunc)
        note(request, model=entry.name)
        return _json(
            {"outputs": outputs, "model": entry.name, "model_sha256": entry.sha256, "request_id": request_id(request)}
        )
    finally:
        state.in_flight -= 1


class PredictFastPath:
    """ASGI middleware: POST /v1/predict goes straight to `predict`, past FastAPI's router and the layers
    around it (its exception middleware, the exit stack for dependencies, route matching, dependency
    solving); every other request goes on through FastAPI as before.

    Why: at 32 clients and batches of 32, the clients move in lock-step, and every request's time on the
    event loop sits between two forward passes, while the model waits. With an instant model under hey at
    32 clients, JSON access log on, those layers were about a third of the event loop's time per request
    (4,600-4,900 req/s through them, 7,000-7,200 with this middleware, on a 2-core Intel Xeon). Nothing
    they do is lost here: what `predict` raises reaches the serving edge outside (server/edge.py), which answers
    it from its table, and the in-flight limit still wraps it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/v1/predict" and scope["method"] == "POST":
            response = await predict(Request(scope, receive))
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


@router.get("/healthz")
async def healthz(request: Request) -> Response:
    """Liveness. With an API key set, a caller without it learns only that the process lives and whether it is
    ready: the model, its hash, memory and load errors are for those who hold the key."""
    state: ServerState = request.app.state.ailab
    if not authorised(request):
        return _json({"status": "ok", "ready": state.ready})
    registry = state.registry
    entry = registry.loaded.get(registry.default) if registry.default else None
    generation = state.generation
    return _json(
        {
            "status": "ok",
            "ready": state.ready,
            "model": entry.predictor.name if entry else None,
            "model_sha256": entry.sha256 if entry else None,
            "engine": entry.predictor.engine if entry else None,
            "engine_choice": entry.predictor.engine_choice if entry else None,
            "models_loaded": sorted(registry.loaded),
            "generation_model": generation.name if generation else None,
            "generation_engine": generation.settings if generation else None,
            "rss_bytes": state.rss(),
            "recent_qps": round(state.metrics.recent_qps(), 2),
            "in_flight": state.in_flight,
            "uptime_s": round(time.time() - state.started, 1),
            "load_error": state.load_error,
            "pid": os.getpid(),
        }
    )


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Readiness: 200 when every model can serve, else 503 and why. With an API key set, a caller without it
    learns only that (the status and {"ready": ...}), as from /healthz: which model is served, and why it
    cannot serve, are for those who hold the key. Without a key set, every caller reads the whole answer."""
    state: ServerState = request.app.state.ailab
    # A loaded model whose batcher's collector died answers nothing: take this replica out of
    # rotation (503) and say why, instead of passing probes while every request fails.
    dead = [
        f"model {name!r}: {e.batcher.dead_reason}" for name, e in state.registry.loaded.items() if not e.batcher.healthy
    ]
    if state.generation is not None and not state.generation.healthy:
        dead.append(f"generation: {state.generation.dead_reason}")
    if state.ready and not dead:
        if not authorised(request):
            return _json({"ready": True})
        return _json(
            {"ready": True, "model": state.registry.default or (state.generation.name if state.generation else None)}
        )
    reason = (
        "; ".join(dead) + " (restart the server or swap the model)"
        if dead
        else state.load_error or "the model is still loading and warming up"
    )
    if not authorised(request):
        reason = "not ready (the reason is given to callers with the API key)"
    return _json({"ready": False, "reason": reason}, 503, {"Retry-After": str(state.config.retry_after_s)})


@router.get("/metrics")
async def prometheus(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    """OpenAI's model list (what `openai.OpenAI().models.list()` reads: the generation model first, then the
    classifiers, each with its task), and ailab's registry beside it (what is loaded, the default, evictions)."""
    state: ServerState = request.app.state.ailab
    registry, created = state.registry, int(state.started)
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "ailab", "task": "classify"}
        for name in registry.names()
    ]
    if state.generation is not None:
        data.insert(
            0,
            {
                "id": state.generation.name,
                "object": "model",
                "created": created,
                "owned_by": "ailab",
                "task": "generate",
                "max_model_len": state.generation.max_model_len,
            },
        )
    return _json(
        {
            "object": "list",
            "data": data,
            "registered": registry.names(),
            "default": registry.default,
            "loaded": [e.describe() for e in registry.loaded.values()],
            "evictions": registry.evictions,
        }
    )


@router.post("/admin/models/{name}/swap")
async def swap(name: str, request: Request) -> Response:
    """Hot swap: reload `name` from its registered loader (e.g. new weights on disk) without dropping requests.
    Who may ask is the serving edge's to decide (the key, or a loopback client without one)."""
    state: ServerState = request.app.state.ailab
    try:
        entry = await state.registry.swap(name)
    except SwapRefusedError as e:
        raise SwapRefusedError(f"swap refused, the old version keeps serving: {e}") from e
    except ModelLoadError as e:
        raise SwapLoadFailed(f"swap refused, the old version keeps serving: {e}") from e
    return _json({"swapped": name, **entry.describe()})
