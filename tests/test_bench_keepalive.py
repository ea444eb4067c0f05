"""The load generator's connections: few, warm, and not failed by a server's keep-alive timeout.

A server closes a keep-alive connection that sat idle past its timeout (uvicorn: 5 s). A load generator
that then writes its next request on it sees "closed" and must not count that as the server's failure:
the capstone's open loop once reported 18 % errors from exactly this, on a healthy server.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import uvicorn

from ailab import bench
from ailab.bench.http import Connection, Target


def _start_uvicorn(keep_alive_s: float, delay_s: float = 0.0):
    """A tiny ASGI app under uvicorn with a short keep-alive; returns (url, peers seen, server)."""
    peers: set = set()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        peers.add(tuple(scope["client"]))  # one client port per TCP connection
        while (await receive()).get("more_body"):
            pass
        if delay_s:
            await asyncio.sleep(delay_s)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="error", timeout_keep_alive=keep_alive_s, lifespan="off"
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    t_end = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < t_end, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}/predict", peers, server


@pytest.fixture
def keepalive_server():
    started = []

    def start(keep_alive_s: float, delay_s: float = 0.0):
        url, peers, server = _start_uvicorn(keep_alive_s, delay_s)
        started.append(server)
        return url, peers

    yield start
    for server in started:
        server.should_exit = True


def test_a_connection_the_server_closed_while_idle_is_reopened_not_failed(keepalive_server):
    url, peers = keepalive_server(keep_alive_s=0.3)
    conn = Connection(Target.make(url, [{"inputs": "x"}]), timeout_s=5.0, connect_timeout_s=2.0)

    async def two_sends():
        try:
            first = await conn.send(0)
            await asyncio.sleep(1.0)  # well past the server's keep-alive timeout
            return first, await conn.send(0)
        finally:
            conn.close()

    assert asyncio.run(two_sends()) == (200, 200)
    assert conn.opened == 2 and len(peers) == 2


def test_the_open_loop_reuses_warm_connections(keepalive_server):
    url, peers = keepalive_server(keep_alive_s=0.5, delay_s=0.005)
    res = bench.open_loop(url, [{"inputs": "x"}], rate_rps=40, duration_s=2.5, warmup_s=0.5, progress=False)
    assert res.errors_by_status == {}, res
    # ~100 requests, a few in flight at once: a handful of connections, not one per request. (Opening a
    # connection per request, then reusing the oldest after seconds idle, is the bug this guards against.)
    assert res.n >= 60 and len(peers) <= 12, (res.n, len(peers))


def test_a_server_that_hangs_up_without_answering_is_reported_closed_after_one_retry():
    answered = []

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if not answered:  # the very first request is answered; none after it
            answered.append(1)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the next request on it: hang up without an answer
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = Connection(Target.make(f"http://127.0.0.1:{port}/", [None]), timeout_s=5.0, connect_timeout_s=2.0)
        try:
            first = await conn.send(0)
            second = await asyncio.wait_for(conn.send(0), 10)
        finally:
            conn.close()
            server.close()
        return first, second, conn.opened

    first, second, opened = asyncio.run(main())
    assert (first, second) == (200, "closed")
    assert opened == 2  # one reopen for the reused connection, then the failure is the answer
