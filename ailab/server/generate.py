"""Token generation over HTTP: `POST /v1/generate`, JSON or streamed as Server-Sent Events (issue 10).

    GenerationEngine   one thread runs ailab.generation.Scheduler step after step; requests reach it through an
                       inbox, and each step's new tokens go back to the asyncio side through call_soon_threadsafe
    router             the route: parameters checked (400 with words), 503 + Retry-After when the queue is full,
                       a client that disconnects mid-stream cancels its request and frees its blocks

Text is bytes here (the course's model is byte-level): a prompt is its UTF-8 bytes, and the streamed pieces are
decoded incrementally, so a character split across two tokens reaches the client whole.
"""
from __future__ import annotations

import asyncio
import codecs
import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import Counter, Gauge, Histogram

from ailab.generation import PagedKVCache, Request as GenRequest, Scheduler
from ailab.server.limits import read_body
from ailab.server.validation import InvalidRequest

TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MAX_NEW_TOKENS = 512
MAX_STOPS, MAX_STOP_BYTES = 4, 32

router = APIRouter()


class EngineBusy(RuntimeError):
    """The waiting queue is full: the caller should come back later."""


class GenerationMetrics:
    def __init__(self, registry, engine: "GenerationEngine"):
        r = registry
        self.ttft = Histogram("ailab_generation_ttft_seconds", "Time from a generation request's arrival to its first "
                              "token", buckets=TOKEN_BUCKETS, registry=r)
        self.itl = Histogram("ailab_generation_inter_token_seconds", "Time between two tokens of one request",
                             buckets=TOKEN_BUCKETS, registry=r)
        self.tokens = Counter("ailab_generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter("ailab_generation_requests", "Generation requests ended, by finish reason",
                                ["reason"], registry=r)
        Gauge("ailab_generation_running", "Sequences running", registry=r).set_function(lambda: engine.running)
        Gauge("ailab_generation_waiting", "Sequences waiting for blocks or a seat",
              registry=r).set_function(lambda: engine.waiting)
        Gauge("ailab_kv_blocks_used", "KV blocks held by sequences", registry=r).set_function(
            lambda: engine.blocks_total - engine.blocks_free)
        Gauge("ailab_kv_blocks_free", "KV blocks free", registry=r).set_function(lambda: engine.blocks_free)


@dataclass
class _Sink:
    req: GenRequest
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    arrived: float
    sent: int = 0
    last_token_s: float | None = None
    text: list[str] = field(default_factory=list)


class GenerationEngine:
    def __init__(self, model, num_blocks: int = 256, block_size: int = 16, max_running: int = 8,
                 max_waiting: int = 64):
        self.model = model
        self.cache = PagedKVCache.for_model(model, num_blocks, block_size)
        self.scheduler = Scheduler(model, self.cache, max_running)
        self.max_waiting = max_waiting
        self.blocks_total = num_blocks
        self.max_request_tokens = num_blocks * block_size   # a request longer than the whole pool can never run
        # read from any thread (gauges, tests); written by the engine thread after each step
        self.running, self.waiting, self.blocks_free = 0, 0, num_blocks
        self.metrics: GenerationMetrics | None = None
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._sinks: dict[int, _Sink] = {}
        self._ids = itertools.count()
        self._pending = 0                  # submitted, not yet taken in by the engine thread
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ailab-generation", daemon=True)
        self._thread.start()

    def submit(self, prompt: list[int], max_new_tokens: int, temperature: float, top_p: float, seed: int | None,
               stops: list[bytes], loop: asyncio.AbstractEventLoop) -> tuple[int, asyncio.Queue]:
        with self._lock:
            if self.waiting + self._pending >= self.max_waiting:
                raise EngineBusy(f"{self.waiting + self._pending} requests are waiting (the limit is {self.max_waiting})")
            self._pending += 1
        rid = next(self._ids)
        stop = (lambda out, s=tuple(stops): any(bytes(out[-len(x):]) == x for x in s if len(out) >= len(x))) \
            if stops else None
        req = GenRequest(rid, list(prompt), max_new_tokens, temperature=temperature, top_p=top_p, seed=seed, stop=stop)
        events: asyncio.Queue = asyncio.Queue()
        self._inbox.put(("submit", _Sink(req, loop, events, time.perf_counter())))
        self._wake.set()
        return rid, events

    def cancel(self, rid: int) -> None:
        self._inbox.put(("cancel", rid))
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout_s)

    # ---- the engine thread

    def _run(self) -> None:
        s = self.scheduler
        while not self._closed:
            self._take_inbox()
            if s.idle:
                self._publish()
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                s.step()
            except Exception as e:  # noqa: BLE001 - a failed step ends its requests with the reason, never the thread
                for sink in list(self._sinks.values()):
                    s.cancel(sink.req.id)
                    self._emit(sink, ("error", f"generation failed: {type(e).__name__}: {e}"))
                    del self._sinks[sink.req.id]
            self._deliver()
            self._publish()

    def _take_inbox(self) -> None:
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                with self._lock:
                    self._pending -= 1
                try:
                    self.scheduler.submit(item.req)
                except ValueError as e:       # checked by the route already; never let it stop the thread
                    self._emit(item, ("error", str(e)))
                    continue
                self._sinks[item.req.id] = item
            elif kind == "cancel" and item in self._sinks:
                self.scheduler.cancel(item)
                sink = self._sinks.pop(item)
                self._emit(sink, ("done", sink.req))

    def _deliver(self) -> None:
        now = time.perf_counter()
        for rid, sink in list(self._sinks.items()):
            req = sink.req
            new = req.output[sink.sent:]
            if new and self.metrics is not None:
                if sink.sent == 0:
                    self.metrics.ttft.observe(now - sink.arrived)
                elif sink.last_token_s is not None:
                    self.metrics.itl.observe((now - sink.last_token_s) / len(new))
                self.metrics.tokens.inc(len(new))
            for tok in new:
                self._emit(sink, ("token", tok))
            if new:
                sink.sent, sink.last_token_s = len(req.output), now
            if req.state == "finished":
                self._emit(sink, ("done", req))
                del self._sinks[rid]

    def _publish(self) -> None:
        s = self.scheduler
        self.running, self.waiting = len(s.running), len(s.waiting)
        self.blocks_free = len(self.cache.allocator.free_blocks)

    def _emit(self, sink: _Sink, event) -> None:
        if event[0] == "done" and self.metrics is not None:
            self.metrics.requests.labels(event[1].finish_reason or "cancelled").inc()
        sink.loop.call_soon_threadsafe(sink.events.put_nowait, event)


# ----------------------------------------------------------------------------- the route


class BadGenerate(ValueError):
    pass


def parse_generate(body: object, max_positions: int) -> dict:
    """The request's parameters, or BadGenerate naming what is wrong."""
    if not isinstance(body, dict):
        raise BadGenerate("the body must be a JSON object, e.g. {\"prompt\": \"This movie\", \"max_new_tokens\": 40}")
    unknown = set(body) - {"prompt", "max_new_tokens", "temperature", "top_p", "seed", "stop", "stream"}
    if unknown:
        raise BadGenerate(f"unknown field(s) {sorted(unknown)}")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadGenerate("prompt must be a non-empty string")
    n = body.get("max_new_tokens", 64)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NEW_TOKENS:
        raise BadGenerate(f"max_new_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {n!r}")
    t = body.get("temperature", 0.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 5:
        raise BadGenerate(f"temperature must be a number from 0 (greedy) to 5, got {t!r}")
    p = body.get("top_p", 1.0)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise BadGenerate(f"top_p must be a number in (0, 1], got {p!r}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise BadGenerate(f"seed must be a non-negative whole number, got {seed!r}")
    stop = body.get("stop", [])
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or len(stop) > MAX_STOPS or not all(isinstance(x, str) and x for x in stop):
        raise BadGenerate(f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them")
    stops = [x.encode("utf-8") for x in stop]
    if any(len(x) > MAX_STOP_BYTES for x in stops):
        raise BadGenerate(f"each stop string may be at most {MAX_STOP_BYTES} bytes")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadGenerate(f"stream must be true or false, got {stream!r}")
    ids = list(prompt.encode("utf-8"))
    if len(ids) + n > max_positions:
        raise BadGenerate(f"the prompt ({len(ids)} tokens) and max_new_tokens ({n}) exceed the model's context of "
                          f"{max_positions} tokens")
    return {"ids": ids, "max_new_tokens": n, "temperature": float(t), "top_p": float(p), "seed": seed,
            "stops": stops, "stream": stream}


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return Response(json.dumps({"error": message}).encode(), status_code=status, media_type="application/json",
                    headers=headers)


def _strip_stop(text: bytes, stops: list[bytes]) -> bytes:
    for s in stops:
        if text.endswith(s):
            return text[:-len(s)]
    return text


def _summary(req: GenRequest, t0: float, first: float | None, stops: list[bytes]) -> dict:
    now = time.perf_counter()
    text = _strip_stop(bytes(req.output), stops).decode("utf-8", errors="replace")
    return {"text": text, "finish_reason": req.finish_reason or "cancelled",
            "usage": {"prompt_tokens": len(req.prompt), "completion_tokens": len(req.output)},
            "timings": {"ttft_ms": round((first - t0) * 1e3, 2) if first else None,
                        "total_ms": round((now - t0) * 1e3, 2)}}


@router.post("/v1/generate")
async def generate_route(request: Request):
    engine: GenerationEngine | None = getattr(request.app.state.ailab, "generation", None)
    if engine is None:
        return _error(404, "this server has no generation model (start it with one to use /v1/generate)")
    config = request.app.state.ailab.config
    try:
        raw = await read_body(request, config.max_body_bytes, config.body_timeout_s)
    except InvalidRequest as e:
        return _error(e.status, e.message)
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return _error(400, f"the body is not valid JSON ({e})")
    try:
        params = parse_generate(body, engine.model.max_positions)
        if len(params["ids"]) + params["max_new_tokens"] > engine.max_request_tokens:
            raise BadGenerate(f"the prompt and max_new_tokens need {len(params['ids']) + params['max_new_tokens']} "
                              f"tokens of KV cache; this server holds {engine.max_request_tokens} in all")
    except BadGenerate as e:
        return _error(400, str(e))
    t0 = time.perf_counter()
    try:
        rid, events = engine.submit(params["ids"], params["max_new_tokens"], params["temperature"], params["top_p"],
                                    params["seed"], params["stops"], asyncio.get_running_loop())
    except EngineBusy as e:
        return _error(503, f"the server is busy: {e}; retry later", {"Retry-After": "1"})

    if not params["stream"]:
        first = None
        try:
            while True:
                kind, item = await events.get()
                if kind == "token" and first is None:
                    first = time.perf_counter()
                elif kind == "error":
                    return _error(500, item)
                elif kind == "done":
                    return Response(json.dumps(_summary(item, t0, first, params["stops"])).encode(),
                                    media_type="application/json")
        except asyncio.CancelledError:
            engine.cancel(rid)
            raise

    async def stream():
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        first, index, finished = None, 0, False
        try:
            while True:
                kind, item = await events.get()
                if kind == "token":
                    first = first or time.perf_counter()
                    piece = decoder.decode(bytes([item]))
                    yield f"data: {json.dumps({'index': index, 'token': item, 'text': piece})}\n\n"
                    index += 1
                elif kind == "error":
                    finished = True
                    yield f"event: error\ndata: {json.dumps({'error': item})}\n\n"
                    return
                else:
                    finished = True
                    yield f"event: done\ndata: {json.dumps(_summary(item, t0, first, params['stops']))}\n\n"
                    return
        finally:
            if not finished:        # the client went away: stop generating and free the blocks
                engine.cancel(rid)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
