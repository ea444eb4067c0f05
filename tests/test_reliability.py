"""Reliability of the server under abuse: overload, a poisoned input, a hot swap under load, malformed
payloads. All traffic goes to 127.0.0.1, bounded in count and time."""

import asyncio
import json
import threading
import time

import httpx
import numpy as np

from ailab.batching import run_sync
from ailab.server import create_app, start_in_thread
from test_server_helpers import SlowPredictor, tiny


async def open_loop(url: str, rate: float, duration_s: float, timeout_s: float = 15.0) -> list:
    """Send at a fixed rate whatever the answers do (an open loop): returns one status per request sent."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:

        async def one(i):
            try:
                r = await client.post(url, json={"inputs": f"request number {i} about a film"})
                return r.status_code
            except httpx.HTTPError as e:
                return type(e).__name__

        tasks, start = [], time.monotonic()
        for i in range(int(rate * duration_s)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(i)))
        return await asyncio.gather(*tasks)


def test_twice_capacity_for_10s_every_request_answered_and_server_healthy():
    batch_s, max_batch = 0.1, 4  # capacity: 4 texts per 0.1 s = 40 requests/s
    slow = SlowPredictor(tiny(0), batch_s=batch_s)
    app = create_app(
        {"t": lambda: slow},
        max_batch_size=max_batch,
        max_wait_ms=5,
        max_queue=8,
        request_timeout_s=1.0,
        torch_threads=1,
    )
    capacity = max_batch / batch_s
    with start_in_thread(app) as h:
        t0 = time.monotonic()
        codes = run_sync(lambda: open_loop(h.url + "/v1/predict", rate=2 * capacity, duration_s=10.0))
        took = time.monotonic() - t0
        counts = {c: codes.count(c) for c in set(codes)}
        assert len(codes) == int(2 * capacity * 10), "every request sent must come back"
        assert set(counts) <= {200, 503, 504}, f"only 200/503/504 allowed under overload, got {counts}"
        assert counts.get(200, 0) >= 0.4 * capacity * 10, f"the server should still serve near capacity: {counts}"
        assert counts.get(503, 0) > 0, "2x overload must shed load with 503"
        assert took < 10.0 + 8.0, "nothing may hang: answers come within the deadline"
        with httpx.Client(timeout=10) as c:
            health = c.get(h.url + "/healthz")
            assert health.status_code == 200 and health.json()["in_flight"] == 0
            assert c.post(h.url + "/v1/predict", json={"inputs": "still alive?"}).status_code == 200


def test_poisoned_item_fails_alone_in_its_batch():
    poisoned = SlowPredictor(tiny(0), batch_s=0.0, poison="POISON")
    app = create_app({"t": lambda: poisoned}, max_batch_size=8, max_wait_ms=200, torch_threads=1)
    with start_in_thread(app) as h:
        texts = [f"fine review {i}" for i in range(7)]
        texts.insert(3, "POISON pill")
        results = {}

        def send(t):
            with httpx.Client(timeout=30) as c:
                results[t] = c.post(h.url + "/v1/predict", json={"inputs": t}).status_code

        poisoned.batch_sizes.clear()
        threads = [threading.Thread(target=send, args=(t,)) for t in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.pop("POISON pill") == 500
        assert set(results.values()) == {200} and len(results) == 7
        assert max(poisoned.batch_sizes) > 1, "the poisoned text must have shared a batch"
        assert h.state.registry.loaded["t"].batcher.stats.retried_batches >= 1


def test_hot_swap_under_load_zero_failed_requests():
    v1, v2 = tiny(0), tiny(1)
    assert v1.sha256 != v2.sha256
    app = create_app({"t": lambda: SlowPredictor(v1, batch_s=0.005)}, max_batch_size=8, max_wait_ms=5, torch_threads=1)
    with start_in_thread(app) as h:
        seen, stop = [], threading.Event()

        def load():
            with httpx.Client(timeout=30) as c:
                while not stop.is_set():
                    r = c.post(h.url + "/v1/predict", json={"inputs": "a steady stream of reviews"})
                    seen.append((r.status_code, r.json().get("model_sha256")))

        clients = [threading.Thread(target=load) for _ in range(6)]
        for t in clients:
            t.start()
        time.sleep(1.0)
        entry = h.call(lambda: h.state.registry.swap("t", lambda: SlowPredictor(v2, batch_s=0.005)))
        assert entry.sha256 == v2.sha256 and entry.version == 2
        time.sleep(1.0)
        with httpx.Client(timeout=60) as c:  # and once more over HTTP (reload the registered loader)
            r = c.post(h.url + "/admin/models/t/swap")
            assert r.status_code == 200 and r.json()["version"] == 3
        time.sleep(0.7)
        stop.set()
        for t in clients:
            t.join()
    statuses = [s for s, _ in seen]
    assert len(statuses) > 50 and set(statuses) == {200}, f"non-200 answers during the swap: {set(statuses)}"
    shas = [sha for _, sha in seen]
    assert shas[0] == v1.sha256 and shas[-1] == v2.sha256 and v1.sha256 in shas


def malformed_payloads() -> list[tuple[str, bytes, dict]]:
    """At least 200 bad requests: (what, body, headers)."""
    j = {"content-type": "application/json"}
    out = []
    raw = [
        b"",
        b" ",
        b"\n",
        b"{",
        b"}",
        b"null",
        b"true",
        b"1",
        b'"just a string"',
        b"[]",
        b"{}",
        b"[1,2,3]",
        b'{"inputs": }',
        b"{'inputs': 'single quotes'}",
        b'{"inputs": "a",}',
        b'\xef\xbb\xbf{"inputs": "bom"}',
        b'{"inputs": "unterminated',
        b'{"inputs": NaN}',
        b'{"inputs": Infinity}',
        b'{"inputs": -Infinity}',
        b'{"inputs": ["a", NaN]}',
        b'{"inputs": "\\ud800"}',
        b'{"inputs": ["ok", "\\udfff"]}',
    ]
    out += [(f"raw {i}", b, j) for i, b in enumerate(raw)]
    for value in [
        None,
        0,
        1.5,
        True,
        False,
        {},
        {"a": 1},
        [1],
        [None],
        [[]],
        [["nested"]],
        [{"t": "x"}],
        "",
        "   ",
        "\n\t",
        [],
        [""],
        ["ok", ""],
        ["x"] * 65,
        "x" * 5001,
        ["x" * 5001],
    ]:
        out.append((f"inputs={str(value)[:20]}", json.dumps({"inputs": value}).encode(), j))
    for extra in [
        {"model": 3},
        {"model": ""},
        {"model": "no-such-model"},
        {"model": ["t"]},
        {"extra": 1},
        {"Inputs": "x"},
        {"model": "x" * 200},
    ]:
        out.append((f"extra {extra}"[:40], json.dumps({"inputs": "ok", **extra}).encode(), j))
    out.append(("no inputs", b'{"model": "t"}', j))
    for depth in (50, 900, 5000, 20000):
        out.append((f"deep list {depth}", b"[" * depth + b"]" * depth, j))
        out.append((f"deep object {depth}", b'{"inputs": ' + b'{"a": ' * depth + b"1" + b"}" * (depth + 1), j))
    out.append(("huge body", json.dumps({"inputs": "x" * 200_000}).encode(), j))
    for ct in [
        {},
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "multipart/form-data; boundary=x"},
        {"content-type": "application/xml"},
    ]:
        out.append((f"content-type {ct}", b'{"inputs": "fine text"}', ct))
    out.append(("timeout header", b'{"inputs": "fine"}', {**j, "x-timeout-ms": "soon"}))
    valid = json.dumps({"inputs": ["a good film", "a bad film"]}).encode()
    out += [(f"truncated at {n}", valid[:n], j) for n in range(1, len(valid) - 1, 2)]
    rng = np.random.default_rng(0)
    for i in range(120):
        blob = rng.integers(0, 256, size=int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
        if i % 3 == 0:
            blob = b'{"inputs": "' + blob + b'"}'  # invalid UTF-8 inside a JSON string, most of the time
        out.append((f"random bytes {i}", blob, j))
    return out


def test_two_hundred_malformed_payloads_all_4xx_and_server_alive():
    payloads = malformed_payloads()
    assert len(payloads) >= 200
    app = create_app({"t": lambda: tiny(0)}, torch_threads=1)
    bad = []
    with start_in_thread(app) as h, httpx.Client(timeout=10) as c:
        t0 = time.monotonic()
        for what, body, headers in payloads:
            r = c.post(h.url + "/v1/predict", content=body, headers=headers)
            if not 400 <= r.status_code < 500:
                bad.append((what, r.status_code, r.text[:100]))
            elif r.headers.get("content-type", "").startswith("application/json"):
                assert r.json()["error"], what
        assert time.monotonic() - t0 < 60
        assert c.get(h.url + "/healthz").status_code == 200
        assert c.post(h.url + "/v1/predict", json={"inputs": "a good film"}).status_code == 200
    assert not bad, f"{len(bad)} malformed payloads were not answered 4xx: {bad[:5]}"
