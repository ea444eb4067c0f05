"""The serving edge: what every request passes through, whatever its route (issue 28).

`ServingEdge` is the app's outermost ASGI layer. Before any route is looked up it

  1. names the request: the client's X-Request-Id when valid, else a fresh one, echoed on every answer;
  2. checks the key: with an API key set, every path but the probes needs it (401), so a route added tomorrow
     cannot forget to ask, and a client without the key cannot even learn which paths exist; without a key,
     /admin/* answers loopback clients only (403);
  3. turns a handler's exception into an answer: `answer_for` is the one table from exception to status, and
     `error_response` writes the one error body, in the dialect of the route (ailab's own on /v1/predict and the
     rest, OpenAI's nested {"error": {...}} on the OpenAI routes, where clients parse exactly that);
  4. counts and logs it: ailab_requests_total{route, status}, ailab_request_latency_seconds{route}, and one JSON
     log line per request, with what the handler added through `note()` (never the text itself).

Handlers stay small: they raise (InvalidRequest, QueueFullError, ...) and the edge answers. The probes and
/metrics are counted too, under their own route label, so a dashboard can leave them out.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import time
from typing import Callable

from starlette.requests import Request
from starlette.responses import Response

import ailab.server.headers as hdr
from ailab.batching import BatcherClosedError, DeadlineExceededError, QueueFullError
from ailab.server.metrics import log_request
from ailab.server.predictors import InputTooLongError
from ailab.server.registry import ModelLoadError, SwapRefusedError, UnknownModelError
from ailab.server.validation import InvalidRequest

PROBES = ("/healthz", "/readyz")  # open with or without a key: they say nothing private
OPENAI_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/models")
UNMATCHED = "unmatched"  # the route label of a path no route serves (bounded label values)


class ServerBusy(RuntimeError):
    """Some part of the server is full (a waiting line, the in-flight limit): 503 with Retry-After."""


class SwapLoadFailed(ModelLoadError):
    """A hot swap's new version failed to load or verify; the old version keeps serving."""


# The one table: exception -> (status, what the client reads, whether to send Retry-After). First match wins;
# a message of None means str(exception). Anything not listed is a 500 that names only the exception's type.
_TABLE: list[tuple[type, int, str | None, bool]] = [
    (UnknownModelError, 404, None, False),
    (InputTooLongError, 413, None, False),
    (QueueFullError, 503, "server is at capacity (queue full); retry after the Retry-After seconds", True),
    (ServerBusy, 503, None, True),
    (BatcherClosedError, 503, "the model is being swapped or unloaded; retry after the Retry-After seconds", True),
    (DeadlineExceededError, 504, "the request's deadline passed before the model got to it", False),
    (SwapRefusedError, 409, None, False),
    (SwapLoadFailed, 500, None, False),
    (ModelLoadError, 503, None, True),
]


def answer_for(e: BaseException) -> tuple[int, str, bool]:
    """(status, message, retry_after) for an exception a handler raised."""
    if isinstance(e, InvalidRequest):
        return e.status, e.message, e.status == 503
    for kind, status, message, retry in _TABLE:
        if isinstance(e, kind):
            return status, message or str(e), retry
    return 500, f"the server failed on this request ({type(e).__name__}); the request id is in its log", False


_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_response(
    status: int,
    message: str,
    request_id: str,
    openai: bool = False,
    retry_after_s: int | None = None,
    param: str | None = None,
) -> Response:
    """The one error body. ailab's: {"error": message, "status", "request_id"}. OpenAI's routes nest it as their
    clients expect ({"error": {"message", "type", "param", "code"}}) and keep status and request_id beside it."""
    error: object = message
    if openai:
        kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        error = {"message": message, "type": kind, "param": param, "code": status}
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status == 408:
        headers["Connection"] = "close"  # a body that never came: the connection cannot be reused
    body = json.dumps({"error": error, "status": status, "request_id": request_id}, ensure_ascii=False).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def request_id(request: Request) -> str:
    """The id the edge gave this request (the client's X-Request-Id, or a fresh one)."""
    return request.scope.get("ailab.request_id", "-")


def authorised(request: Request) -> bool:
    """True when the server has no key, or this request holds it."""
    return bool(request.scope.get("ailab.authorised"))


def note(request: Request, **fields) -> None:
    """Add fields to this request's log line (model, counts, a fingerprint: never the text)."""
    request.scope.setdefault("ailab.log", {}).update(fields)


def _loopback(scope) -> bool:
    client = scope.get("client")
    try:
        return bool(client) and ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


def flat_routes(routes: list):
    """Every route with a path, routers included by `include_router` opened (FastAPI keeps them nested)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from flat_routes(inner.routes)
        elif getattr(route, "path_regex", None) is not None:
            yield route


class ServingEdge:
    """ASGI middleware; `state` is the app's ServerState (settings and metrics), `routes()` its route list."""

    def __init__(self, app, state, routes: Callable[[], list]):
        self.app, self.state, self._routes = app, state, routes
        self._labels: dict[str, str] = {}  # path -> route label, for paths a route serves

    def route_label(self, scope) -> str:
        path = scope["path"]
        label = self._labels.get(path)
        if label is None:
            label = UNMATCHED
            for route in flat_routes(self._routes()):
                if route.path_regex.match(path):
                    label = route.path
                    break
            if label != UNMATCHED and len(self._labels) < 1024:  # /admin/models/{name}/swap has one per name
                self._labels[path] = label
        return label

    def refusal(self, request: Request, path: str) -> tuple[int, str] | None:
        """(status, message) when this request may not go on, else None. Marks the scope authorised when the
        server has no key or the request holds it (the probes then say more: `authorised`)."""
        key = self.state.config.api_key
        if not key:
            request.scope["ailab.authorised"] = True
            if path.startswith("/admin/") and not _loopback(request.scope):
                return 403, "admin routes answer only loopback clients when the server has no API key (--api-key)"
            return None
        try:
            got = hdr.api_key(request)
        except InvalidRequest as e:
            return None if path in PROBES else (e.status, e.message)  # a header sent twice: 400
        # bytes to bytes, in constant time: how long the answer takes says nothing of how much of a guess was right
        request.scope["ailab.authorised"] = hmac.compare_digest(got, key.encode())
        if path in PROBES or request.scope["ailab.authorised"]:
            return None
        return 401, "missing or wrong API key (send Authorization: Bearer <key>)"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        request = Request(scope, receive)
        path = scope["path"]
        openai = path in OPENAI_ROUTES
        rid, bad_rid = hdr.request_id(request)
        scope["ailab.request_id"] = rid
        sent = {"status": 500, "started": False, "logged": False}
        rid_header = (b"x-request-id", rid.encode())

        def finish() -> None:
            if sent["logged"]:
                return
            sent["logged"] = True
            seconds = time.perf_counter() - t0
            route = self.route_label(scope)
            self.state.metrics.on_request(sent["status"], seconds, route)
            fields = scope.get("ailab.log", {})
            log_request(rid, sent["status"], seconds, route, scope["method"], fields)

        async def send_and_count(message):
            if message["type"] == "http.response.start":
                sent["status"], sent["started"] = message["status"], True
                message = {**message, "headers": [*message.get("headers", []), rid_header]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()  # before the last bytes leave: a client that has its answer finds the log written
            await send(message)

        try:
            refused = None
            if path not in PROBES and bad_rid:
                refused = (400, bad_rid)
            else:
                refused = self.refusal(request, path)
            if refused:
                note(request, error=refused[1])
                return await error_response(*refused, rid, openai)(scope, receive, send_and_count)
            try:
                await self.app(scope, receive, send_and_count)
            except Exception as e:  # every failure becomes an answer from the table, never a bare 500
                if sent["started"]:
                    raise  # the answer is half sent: nothing sane can follow it on this connection
                status, message, retry = answer_for(e)
                note(request, error=f"{type(e).__name__}: {e}" if status >= 500 else message)
                retry_s = self.state.config.retry_after_s if retry else None
                await error_response(status, message, rid, openai, retry_s, getattr(e, "param", None))(
                    scope, receive, send_and_count
                )
        finally:
            finish()
