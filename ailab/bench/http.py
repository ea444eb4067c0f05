"""A lean HTTP/1.1 client for load generation: raw asyncio streams, keep-alive, bodies encoded once.

On a 2-core machine the load generator shares the CPU with the server it measures, so every cycle it
spends is one the server does not get. A general client (httpx) spends several times more per request
than this one; `tests/test_loadgen_crosscheck.py` holds this one within 15 % of `hey` (Go).

`Connection.send(body)` returns the HTTP status, or a word naming the failure: "timeout",
"connect_error", "closed" (the server hung up), or an exception's class name.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit


class BenchTargetError(ConnectionError):
    """The URL under test does not answer at all (refused, no route, wrong scheme)."""


@dataclass(frozen=True)
class Target:
    """Where requests go, with each body encoded once up front (None = GET)."""

    url: str
    host: str
    port: int
    path: str
    tls: bool
    heads: tuple[bytes, ...]  # the request line and headers of each body, ready to write
    bodies: tuple[bytes, ...]

    @classmethod
    def make(cls, url: str, payloads: list, headers: dict | None = None) -> "Target":
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be an http(s) URL such as http://127.0.0.1:8000/predict (got {url!r})")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        heads, bodies = [], []
        for p in payloads:
            if p is None:
                heads.append(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{extra}\r\n".encode())
                bodies.append(b"")
            else:
                body = p if isinstance(p, bytes) else json.dumps(p).encode()
                heads.append(
                    f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                    f"{extra}Content-Length: {len(body)}\r\n\r\n".encode()
                )
                bodies.append(body)
        return cls(url, parts.hostname, port, path, tls, tuple(heads), tuple(bodies))


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before it answered (its idle timeout)."""


class Connection:
    """One keep-alive connection, reopened after any failure."""

    def __init__(self, target: Target, timeout_s: float, connect_timeout_s: float):
        self.target, self.timeout_s, self.connect_timeout_s = target, timeout_s, connect_timeout_s
        self.reader = self.writer = None
        self.opened = 0  # connections opened so far (reopens after failures included)

    async def _open(self):
        t = self.target
        ctx = ssl.create_default_context() if t.tls else None
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(t.host, t.port, ssl=ctx), self.connect_timeout_s
        )
        self.opened += 1

    async def _exchange(self, i: int, reused: bool) -> int:
        try:
            self.writer.write(self.target.heads[i] + self.target.bodies[i])
            header = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            # Not one byte of an answer on a connection that sat idle: the server dropped it at its
            # keep-alive timeout (uvicorn: 5 s) while it waited in the pool. Not the request's failure.
            if reused and not getattr(e, "partial", b""):
                raise _StaleConnection from None
            raise
        status = int(header[9:12])
        lower = header.lower()
        length, chunked = 0, b"transfer-encoding: chunked" in lower
        for line in lower.split(b"\r\n")[1:]:
            if line.startswith(b"content-length:"):
                length = int(line[15:])
        if chunked:
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                await self.reader.readexactly(size + 2)
            await self.reader.readuntil(b"\r\n")
        elif length:
            await self.reader.readexactly(length)
        if b"connection: close" in lower:
            self.close()
        return status

    async def send(self, i: int) -> int | str:
        """Send body `i` and read the whole answer; the status, or what went wrong. A reused connection
        that the server had already closed is reopened and the request sent once more on the new one
        (as browsers and Go's net/http do); any other failure is the answer."""
        try:
            return await self._send(i)
        except _StaleConnection:
            self.close()
            return await self._send(i)

    async def _send(self, i: int) -> int | str:
        try:
            reused = self.writer is not None
            if not reused:
                try:
                    await self._open()
                except (OSError, asyncio.TimeoutError):
                    return "connect_error"
            return await asyncio.wait_for(self._exchange(i, reused), self.timeout_s)
        except _StaleConnection:
            raise
        except asyncio.TimeoutError:
            self.close()
            return "timeout"
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            return "closed"
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            self.close()
            return type(e).__name__

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def preflight(target: Target, connect_timeout_s: float, timeout_s: float = 30.0) -> None:
    """Fail fast and clearly when nothing answers at the URL, instead of a run full of errors (or a hang)."""
    conn = Connection(target, timeout_s, connect_timeout_s)
    try:
        try:
            await conn._open()
        except (OSError, asyncio.TimeoutError) as e:
            raise BenchTargetError(
                f"cannot reach {target.url}: {type(e).__name__}: {e or 'no answer'}. "
                "Is the server running, and is the host and port right?"
            ) from None
        await conn.send(0)  # the first answer may be slow (lazy model load); it is not measured
    finally:
        conn.close()
