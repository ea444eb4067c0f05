"""The server's HTTP routes. Each handler reads what it needs from the app's ServerState
(request.app.state.ailab, set by create_app): its settings, the model registry and the metrics.

    POST /v1/predict, GET /healthz /readyz /metrics /v1/models, POST /admin/models/{name}/swap
    (POST /v1/generate is in server/generate.py)
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ailab.batching import BatcherClosedError, DeadlineExceededError, QueueFullError
import ailab.server.headers as hdr
from ailab.server.limits import CLOSE, read_body
from ailab.server.metrics import log_request
from ailab.server.predictors import InputTooLongError
from ailab.server.registry import ModelLoadError, ModelRegistry, SwapRefusedError, UnknownModelError
from ailab.server.state import ServerState
from ailab.server.validation import InvalidRequest, parse_predict

router = APIRouter()

_EXTRA_HEADERS = {401: {"WWW-Authenticate": "Bearer"}, 408: CLOSE}


def _json(payload: dict, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json.dumps(payload, ensure_ascii=False).encode(), status_code=status,
                    media_type="application/json", headers=headers)


def access_denied(request: Request, api_key: str | None, admin: bool = False) -> tuple[int, str] | None:
    """None when the request may go on, else (status, message). With a key set every route but the probes
    needs it (401 without or with a wrong one); without a key, /admin/* answers loopback clients only (403):
    a hot swap must never be one HTTP call away for anyone on the network."""
    if not api_key:
        if admin and not _loopback_peer(request):
            return 403, "admin routes answer only loopback clients when the server has no API key (--api-key)"
        return None
    try:
        got = hdr.api_key(request)
    except InvalidRequest as e:
        return e.status, e.message
    if not hmac.compare_digest(got.encode(), api_key.encode()):
        return 401, "missing or wrong API key (send Authorization: Bearer <key>)"
    return None


def _loopback_peer(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def infer(registry: ModelRegistry, req, deadline: float, priority: int):
    """Submit each text; retry once on a batcher closed by a hot swap or an eviction."""
    for attempt in range(2):
        entry = await registry.get(req.model)
        b = entry.batcher
        try:
            if len(req.texts) == 1:
                return entry, [await b.submit(req.texts[0], priority=priority, deadline=deadline)]
            if b.room(priority) < len(req.texts):   # all or nothing (total and per-level bounds): no half answers
                b.stats.rejected += 1
                raise QueueFullError(f"{len(req.texts)} texts do not fit in the queue")
            tasks = [asyncio.ensure_future(b.submit(t, priority=priority, deadline=deadline)) for t in req.texts]
            try:
                return entry, await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:                   # one text failed: stop paying for its siblings
                    t.cancel()
                raise
        except BatcherClosedError:
            if attempt == 1:
                raise
    raise AssertionError("unreachable")



def error(status: int, message: str, rid: str, headers: dict | None = None) -> Response:
    headers = {**(headers or {}), **_EXTRA_HEADERS.get(status, {})}
    return _json({"error": message, "status": status, "request_id": rid}, status, headers)


@router.post("/v1/predict")
async def predict(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    config, registry, metrics = state.config, state.registry, state.metrics
    t0 = time.perf_counter()
    rid, bad_rid = hdr.request_id(request)
    state.in_flight += 1
    req, status, model_name, err = None, 500, None, None
    try:
        if denied := access_denied(request, config.api_key):
            raise InvalidRequest(*denied)
        if bad_rid:
            raise InvalidRequest(400, bad_rid)
        hdr.check_content_type(request)
        deadline, priority = hdr.deadline(request, config.request_timeout_s), hdr.priority(request)
        body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
        req = parse_predict(body, config.max_items, config.max_chars)
        if config.max_rss_bytes and state.rss() > config.max_rss_bytes:
            status, err = 503, "server memory is over its watermark; retry later"
            return error(status, err, rid, {"Retry-After": str(config.retry_after_s)})
        try:
            entry, outputs = await infer(registry, req, deadline, priority)
        except (InvalidRequest, UnknownModelError, QueueFullError, DeadlineExceededError, InputTooLongError):
            raise
        except Exception as e:  # noqa: BLE001 - the model cannot serve: degrade if configured
            if config.fallback is None:
                raise
            status, model_name, err = 200, "fallback", f"{type(e).__name__}: {e}"
            metrics.degraded.inc()
            return _json({"outputs": [dict(config.fallback) for _ in req.texts], "model": "fallback",
                          "model_sha256": None, "request_id": rid, "degraded": True})
        n_trunc = sum(1 for o in outputs if isinstance(o, dict) and o.get("truncated"))
        metrics.inputs.inc(len(outputs))
        if n_trunc:
            metrics.truncated.inc(n_trunc)
        status, model_name = 200, entry.name
        return _json({"outputs": outputs, "model": entry.name, "model_sha256": entry.sha256,
                      "request_id": rid})
    except InvalidRequest as e:
        status, err = e.status, e.message
        return error(status, err, rid)
    except UnknownModelError as e:
        status, err = 404, str(e)
        return error(status, err, rid)
    except InputTooLongError as e:
        status, err = 413, str(e)
        return error(status, err, rid)
    except QueueFullError:
        status, err = 503, "server is at capacity (queue full); retry after the Retry-After seconds"
        return error(status, err, rid, {"Retry-After": str(config.retry_after_s)})
    except DeadlineExceededError:
        status, err = 504, "the request's deadline passed before the model got to it"
        return error(status, err, rid)
    except ModelLoadError as e:
        status, err = 503, str(e)
        return error(status, err, rid, {"Retry-After": str(config.retry_after_s)})
    except Exception as e:  # noqa: BLE001 - one bad request must not take the server down
        status, err = 500, f"inference failed: {type(e).__name__}"
        return error(status, err, rid)
    finally:
        state.in_flight -= 1
        seconds = time.perf_counter() - t0
        metrics.on_request(status, seconds)
        log_request(rid, status, seconds, req.texts if req else None, model_name, err)


class PredictFastPath:
    """ASGI middleware: POST /v1/predict goes straight to `predict`, past FastAPI's router and the layers
    around it (its exception middleware, the exit stack for dependencies, route matching, dependency
    solving); every other request goes on through FastAPI as before.

    Why: at 32 clients and batches of 32, the clients move in lock-step, and every request's time on the
    event loop sits between two forward passes, while the model waits. With an instant model under hey at
    32 clients, JSON access log on, those layers were about a third of the event loop's time per request
    (4,600-4,900 req/s through them, 7,000-7,200 with this middleware, on a 2-core Intel Xeon). Nothing
    they do is lost here: `predict` answers every error itself (JSON 4xx/5xx, never a bare 500), and the
    outer middlewares (the in-flight limit, Starlette's last-resort error handler) still wrap it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/v1/predict" and scope["method"] == "POST":
            response = await predict(Request(scope, receive))
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


@router.get("/healthz")
async def healthz(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    registry = state.registry
    entry = registry.loaded.get(registry.default)
    return _json({"status": "ok", "ready": state.ready, "model": entry.predictor.name if entry else None,
                  "model_sha256": entry.sha256 if entry else None, "engine": getattr(
                      entry.predictor, "engine", None) if entry else None,
                  "engine_choice": getattr(entry.predictor, "engine_choice", None) if entry else None,
                  "models_loaded": sorted(registry.loaded), "rss_bytes": state.rss(),
                  "recent_qps": round(state.metrics.recent_qps(), 2), "in_flight": state.in_flight,
                  "uptime_s": round(time.time() - state.started, 1), "load_error": state.load_error,
                  "pid": os.getpid()})


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    # A loaded model whose batcher's collector died answers nothing: take this replica out of
    # rotation (503) and say why, instead of passing probes while every request fails.
    dead = [f"model {name!r}: {e.batcher.dead_reason}" for name, e in state.registry.loaded.items()
            if not e.batcher.healthy]
    if state.ready and not dead:
        return _json({"ready": True, "model": state.registry.default})
    reason = ("; ".join(dead) + " (restart the server or swap the model)" if dead
              else state.load_error or "the model is still loading and warming up")
    return _json({"ready": False, "reason": reason}, 503, {"Retry-After": str(state.config.retry_after_s)})


@router.get("/metrics")
async def prometheus(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    if denied := access_denied(request, state.config.api_key):
        return error(*denied, "-")
    return Response(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    state: ServerState = request.app.state.ailab
    if denied := access_denied(request, state.config.api_key):
        return error(*denied, "-")
    registry = state.registry
    return _json({"registered": registry.names(), "default": registry.default,
                  "loaded": [e.describe() for e in registry.loaded.values()], "evictions": registry.evictions})


@router.post("/admin/models/{name}/swap")
async def swap(name: str, request: Request) -> Response:
    """Hot swap: reload `name` from its registered loader (e.g. new weights on disk) without dropping requests."""
    state: ServerState = request.app.state.ailab
    if denied := access_denied(request, state.config.api_key, admin=True):
        return error(*denied, "-")
    try:
        entry = await state.registry.swap(name)
    except UnknownModelError as e:
        return error(404, str(e), "-")
    except SwapRefusedError as e:
        return error(409, f"swap refused, the old version keeps serving: {e}", "-")
    except ModelLoadError as e:
        return error(500, f"swap refused, the old version keeps serving: {e}", "-")
    return _json({"swapped": name, **entry.describe()})
