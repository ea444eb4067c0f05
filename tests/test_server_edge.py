"""The serving edge (server/edge.py): every route of the app, listed from the app itself, refuses a request without
the key, in every scheme a client might get wrong; the probes stay open and say nothing private; a route added
later is guarded too; every answer carries its request id; errors use one body (OpenAI's shape on OpenAI's
routes); a handler that raises is a JSON 500 that is logged, never a bare one; every request is counted by route
and logged without its text."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest
from fastapi import Request

from ailab.generation import Decoder
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.edge import flat_routes
from ailab.server.async_llm import AsyncLLM
from ailab.server.metrics import configure_json_logging
from ailab.server.predictors import tiny_predictor

KEY = "s3cret-key"
PROBES = {"/healthz", "/readyz"}
WRONG = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Basic {KEY}"},
    {"Authorization": KEY},
    {"Authorization": f"Token {KEY}"},
    {"X-Api-Key": "wrong"},
    {"Authorization": "Bearer"},
]


@pytest.fixture(scope="module")
def app():
    engine = AsyncLLM(Decoder(tiny_gpt("1m")), num_blocks=32, block_size=16, name="gpt")
    app = create_app({"tiny": tiny_predictor}, "tiny", generation=engine, api_key=KEY, torch_threads=1)

    @app.get("/v1/added-later")  # what a contributor adds tomorrow, with no thought of auth
    async def added_later() -> dict:
        return {"secret": "nobody without the key sees this"}

    @app.post("/v1/broken")
    async def broken(request: Request):
        raise RuntimeError("an unforeseen bug with a private detail /home/me/weights.bin")

    return app


@pytest.fixture(scope="module")
def url(app):
    with start_in_thread(app) as handle:
        yield handle.url


def _every_route(app):
    for route in flat_routes(app.routes):
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            if method != "HEAD":
                yield method, route.path.replace("{name}", "tiny")


def test_every_route_refuses_a_request_without_the_key(app, url):
    routes = list(_every_route(app))
    paths = {p for _, p in routes}
    assert {
        "/v1/predict",
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/models",
        "/metrics",
        "/admin/models/tiny/swap",
        "/v1/added-later",
        "/healthz",
        "/readyz",
    } <= paths, paths
    with httpx.Client(timeout=20) as c:
        for method, path in routes + [("GET", "/no/such/path"), ("POST", "/v1/generate")]:
            for headers in WRONG:
                r = c.request(method, url + path, headers=headers, json={"inputs": "hi", "prompt": "x"})
                if path in PROBES:
                    assert r.status_code in (200, 503), (method, path, r.text)
                    assert set(r.json()) <= {"status", "ready", "reason"}, "a probe says nothing private"
                    assert "sha256" not in r.text and "rss" not in r.text and "tiny" not in r.text  # nor the model
                    continue
                assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
                assert r.headers["www-authenticate"] == "Bearer" and "secret" not in r.text
                error = r.json()["error"]
                message = error["message"] if isinstance(error, dict) else error
                assert "API key" in message
        ok = {"Authorization": f"Bearer {KEY}"}
        assert c.get(url + "/v1/added-later", headers=ok).json()["secret"]
        assert c.get(url + "/healthz", headers=ok).json()["model_sha256"], "with the key, the details"


def test_every_answer_carries_its_request_id(url):
    ok = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=20) as c:
        for method, path, headers in [
            ("GET", "/healthz", {}),
            ("POST", "/v1/predict", {}),
            ("GET", "/nope", ok),
            ("POST", "/v1/predict", ok),
            ("POST", "/v1/completions", ok),
        ]:
            r = c.request(
                method,
                url + path,
                headers={**headers, "X-Request-Id": "trace-7"},
                json={"inputs": "hi", "prompt": "hi", "max_tokens": 2},
            )
            assert r.headers["x-request-id"] == "trace-7", (path, r.status_code)
            if r.status_code >= 400:
                assert r.json()["request_id"] == "trace-7" and r.json()["status"] == r.status_code
        fresh = c.get(url + "/healthz").headers["x-request-id"]
        assert len(fresh) == 32 and fresh != c.get(url + "/healthz").headers["x-request-id"]
        bad = c.post(url + "/v1/predict", headers={**ok, "X-Request-Id": "no spaces"}, json={"inputs": "hi"})
        assert bad.status_code == 400 and "X-Request-Id" in bad.json()["error"]


def test_errors_have_one_body_in_the_routes_dialect(url):
    ok = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=20) as c:
        ailab = c.post(url + "/v1/predict", headers=ok, json={"inputs": []})
        openai = c.post(url + "/v1/completions", headers=ok, json={"prompt": "x", "max_tokens": 0})
        unknown = c.get(url + "/nope", headers=ok)
        wrong_method = c.get(url + "/v1/chat/completions", headers=ok)
    assert ailab.status_code == 422 and isinstance(ailab.json()["error"], str)
    assert openai.status_code == 400 and openai.json()["error"]["param"] == "max_tokens"
    assert openai.json()["error"]["type"] == "invalid_request_error" and openai.json()["error"]["code"] == 400
    assert unknown.status_code == 404 and "/nope" in unknown.json()["error"]
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["message"].startswith("Method Not Allowed")
    for r in (ailab, openai, unknown, wrong_method):
        assert set(r.json()) == {"error", "status", "request_id"} and r.headers["content-type"] == "application/json"


def test_a_handler_that_raises_is_a_logged_json_500_that_keeps_its_secrets(url):
    stream = io.StringIO()
    handler = configure_json_logging(stream)
    try:
        r = httpx.post(url + "/v1/broken", headers={"Authorization": f"Bearer {KEY}", "X-Request-Id": "bug-1"})
    finally:
        logging.getLogger("ailab.server.access").removeHandler(handler)
    assert r.status_code == 500 and "RuntimeError" in r.json()["error"] and "/home/me" not in r.text
    line = next(json.loads(x) for x in stream.getvalue().splitlines() if '"bug-1"' in x)
    assert line["status"] == 500 and "/home/me" in line["error"], "the operator's log keeps what the client may not see"


def test_every_request_is_counted_by_route_and_logged_without_its_text(url):
    ok = {"Authorization": f"Bearer {KEY}"}
    stream = io.StringIO()
    handler = configure_json_logging(stream)
    try:
        with httpx.Client(timeout=30) as c:
            c.post(
                url + "/v1/completions",
                headers={**ok, "X-Request-Id": "gen-1"},
                json={"prompt": "my private prompt", "max_tokens": 3},
            )
            c.post(url + "/v1/predict", headers={**ok, "X-Request-Id": "cls-1"}, json={"inputs": "my private text"})
            c.get(url + "/no/such", headers=ok)
            text = c.get(url + "/metrics", headers=ok).text
    finally:
        logging.getLogger("ailab.server.access").removeHandler(handler)
    for sample in (
        'ailab_requests_total{route="/v1/completions",status="200"}',
        'ailab_requests_total{route="/v1/predict",status="200"}',
        'ailab_requests_total{route="unmatched",status="404"}',
        'ailab_requests_total{route="unmatched",status="401"}',
        'ailab_request_latency_seconds_count{route="/v1/completions"}',
    ):
        assert sample in text, sample
    lines = {x["request_id"]: x for x in map(json.loads, stream.getvalue().splitlines())}
    gen, cls = lines["gen-1"], lines["cls-1"]
    assert (gen["route"], gen["status"], gen["prompt_tokens"], gen["completion_tokens"], gen["finish_reason"]) == (
        "/v1/completions",
        200,
        len("my private prompt"),
        3,
        "length",
    )
    assert (cls["route"], cls["model"], cls["input_chars"]) == ("/v1/predict", "tiny", len("my private text"))
    assert "private" not in stream.getvalue()


def test_a_scrape_before_any_request_reads_zero_not_no_such_metric():
    """A Recorder or Prometheus may scrape before the first request: every route's latency histogram is there,
    at zero, and the monitoring parser reads it as no traffic (a fresh run's first scrape once failed here)."""
    from ailab import monitoring

    fresh = create_app({"tiny": tiny_predictor}, "tiny", torch_threads=1)
    server = start_in_thread(fresh)
    try:
        text = httpx.get(server.url + "/metrics", timeout=10).text
    finally:
        server.stop()
    snap = monitoring.parse_exposition(text)
    assert snap.buckets and all(count == 0 for count in snap.buckets.values()), snap.buckets
    assert sum(snap.requests.values()) == 0  # start_in_thread's readiness probes are not traffic
    routes = {route.path for route in flat_routes(fresh.routes)}
    assert {"/v1/predict", "/v1/completions", "/metrics"} <= routes
    for route in routes - PROBES:  # the probes answered start_in_thread's wait for readiness
        assert f'ailab_request_latency_seconds_count{{route="{route}"}} 0.0' in text, route
