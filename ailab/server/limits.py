"""Bounds on what one client can hold: the time to send a body, and the requests in flight at once.

    read_body(request, max_bytes, timeout_s)   the body, or 413 (too big) / 408 (not sent within timeout_s)
    ConcurrencyLimit(app, limit, ...)          ASGI middleware: beyond `limit` requests in flight, 503 at once
                                               (probes and /metrics exempt)

A client that sends its headers and then trickles or stalls its body holds a coroutine, a socket and
one concurrency slot - never a model worker, which only sees complete, validated requests. read_body
bounds that to timeout_s for the WHOLE body (not per chunk, or a byte every few seconds would last
forever); the 408 answer carries "Connection: close", so uvicorn drops the connection after it.
"""

from __future__ import annotations

import asyncio
import json

from starlette.requests import ClientDisconnect, Request

from ailab.server.headers import declared_length
from ailab.server.validation import InvalidRequest

CLOSE = {"Connection": "close"}


async def _read(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():  # also bounds bodies sent without Content-Length
        size += len(chunk)
        if size > max_bytes:
            raise InvalidRequest(413, f"body is over the {max_bytes}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    declared_length(request, max_bytes)  # 413 from the header alone, before reading a byte
    try:
        return await asyncio.wait_for(_read(request, max_bytes), timeout_s)
    except ClientDisconnect:  # a client error, not a 500: nobody is left to read the answer
        raise InvalidRequest(400, "the client closed the connection before sending the whole body") from None
    except asyncio.TimeoutError:
        raise InvalidRequest(
            408, f"the request body did not arrive within {timeout_s:g} s; send it at once (the connection is closed)"
        ) from None


class ConcurrencyLimit:
    """At most `limit` HTTP requests inside the app at once; the next one is answered 503 with Retry-After
    straight away (JSON, like every other refusal; the serving edge outside counts and logs it). Probes and
    /metrics (`exempt`) are never refused: a replica that is merely busy must not fail its liveness check and be
    restarted (which makes overload worse), and overload is exactly when its metrics are wanted."""

    def __init__(self, app, limit: int, retry_after_s: int = 1, exempt: tuple = ("/healthz", "/readyz", "/metrics")):
        self.app, self.limit, self.exempt = app, limit, exempt
        self.retry_after = str(retry_after_s).encode()
        self.active = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in self.exempt:
            return await self.app(scope, receive, send)
        if self.active >= self.limit:
            return await self._refuse(scope, send)
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1

    async def _refuse(self, scope, send):
        body = json.dumps(
            {
                "error": f"server is at its limit of {self.limit} requests in flight; retry after the "
                f"Retry-After seconds",
                "status": 503,
                "request_id": scope.get("ailab.request_id", "-"),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", self.retry_after),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
