"""The inference server over real HTTP on loopback, with a tiny model (fast) as the workload."""

import io
import json
import logging
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from ailab.server import ServerConfig, create_app, start_in_thread
from ailab.server.metrics import configure_json_logging
from ailab.server.run import build_parser
from test_server_helpers import FailingLoader, SlowPredictor, tiny

TEXTS = ["a wonderful, moving film", "dull and far too long", "the plot makes no sense but the cast is great"]


@pytest.fixture(scope="module")
def server():
    app = create_app(
        {"tiny": lambda: tiny(0), "tiny2": lambda: tiny(1)}, "tiny", torch_threads=1, max_models=1, max_wait_ms=5
    )
    handle = start_in_thread(app)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=30) as c:
        yield c


def post(client, url, payload, **kw):
    return client.post(url + "/v1/predict", json=payload, **kw)


def test_predict_matches_the_model_called_directly(server, client):
    r = post(client, server.url, {"inputs": TEXTS}, headers={"X-Request-ID": "abc-123"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "tiny" and body["request_id"] == "abc-123"
    assert body["model_sha256"] == tiny(0).sha256 and len(body["model_sha256"]) == 64
    direct = tiny(0)(TEXTS)
    got = np.array([o["probs"] for o in body["outputs"]])
    np.testing.assert_allclose(got, np.array([d["probs"] for d in direct]), atol=1e-4)
    assert [o["label"] for o in body["outputs"]] == [d["label"] for d in direct]
    single = post(client, server.url, {"inputs": TEXTS[0]}).json()
    assert len(single["outputs"]) == 1 and single["outputs"][0]["probs"] == body["outputs"][0]["probs"]


def test_health_ready_and_metrics(server, client):
    post(client, server.url, {"inputs": "warm"})
    h = client.get(server.url + "/healthz").json()
    assert h["status"] == "ok" and h["ready"] and h["model_sha256"] == tiny(0).sha256
    assert h["rss_bytes"] > 10 * 2**20 and h["recent_qps"] > 0
    assert client.get(server.url + "/readyz").status_code == 200
    m = client.get(server.url + "/metrics").text
    for name in (
        "ailab_requests_total",
        "ailab_request_latency_seconds_bucket",
        "ailab_queue_wait_seconds_bucket",
        "ailab_batch_size_bucket",
        "ailab_in_flight",
        "ailab_queue_depth",
        "ailab_model_load_seconds",
        "ailab_process_resident_memory_bytes",
    ):
        assert name in m, name
    assert 'ailab_requests_total{route="/v1/predict",status="200"}' in m
    assert 'ailab_requests_total{route="/healthz",status="200"}' in m, "every route is counted, under its own label"


def test_metrics_split_each_batch_into_tokenize_forward_and_postprocess():
    """The predictor is the engine's TextClassifierRunner, so /metrics can say where a batch's time went."""
    from ailab.monitoring import read_metrics

    app = create_app({"tiny": lambda: tiny(0)}, "tiny", torch_threads=1, max_wait_ms=1)
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        before = read_metrics(c.get(h.url + "/metrics").text)
        for _ in range(5):
            assert post(c, h.url, {"inputs": TEXTS}).status_code == 200
        m = read_metrics(c.get(h.url + "/metrics").text)
    count = lambda stage, ms=m: ms.get(f'ailab_batch_stage_seconds_count{{model="tiny",stage="{stage}"}}', 0)  # noqa: E731
    total = lambda stage: m[f'ailab_batch_stage_seconds_sum{{model="tiny",stage="{stage}"}}']  # noqa: E731
    assert count("tokenize", before) == 0, "warm-up and self-test batches are not traffic"
    batches = m["ailab_batch_size_count"]
    assert count("tokenize") == count("forward") == count("postprocess") == batches >= 1
    assert 0 < total("tokenize") and 0 < total("forward")
    # the stages are parts of the batch's compute time, measured inside it
    assert total("tokenize") + total("forward") + total("postprocess") <= m["ailab_batch_compute_seconds_sum"]


def test_rejected_and_kept_texts_keep_their_places():
    """too_long="reject" drops the long text before the forward pass; the others keep their answers."""
    p = tiny(0, too_long="reject")
    texts = ["short one", "word " * 200, "another short one"]
    out = p(texts)
    assert isinstance(out[1], Exception) and "word pieces" in str(out[1])
    direct = tiny(0)([texts[0], texts[2]])
    assert [o["probs"] for o in (out[0], out[2])] == [d["probs"] for d in direct]
    both = p(["word " * 200] * 2)
    assert all(isinstance(o, Exception) for o in both) and both[0] is not both[1]  # one error per text


def test_alert_rules_parse_and_use_served_metrics(server, client):
    rules = yaml.safe_load(Path("monitoring/alerts.yml").read_text())["groups"][0]["rules"]
    names = {r["alert"] for r in rules}
    assert {"HighP99Latency", "HighErrorRate", "QueueNearlyFull", "ServingDegraded"} <= names
    exposed = client.get(server.url + "/metrics").text
    for r in rules:
        for metric in (
            "ailab_request_latency_seconds_bucket",
            "ailab_requests_total",
            "ailab_queue_depth",
            "ailab_degraded_total",
        ):
            if metric in r["expr"]:
                assert metric.replace("_bucket", "") in exposed


@pytest.mark.parametrize(
    "payload, status",
    [
        ({"inputs": ""}, 422),
        ({"inputs": "   "}, 422),
        ({"inputs": []}, 422),
        ({"inputs": 5}, 422),
        ({"inputs": ["ok", 3]}, 422),
        ({"text": "hi"}, 422),
        ({"inputs": "hi", "extra": 1}, 422),
        ([1, 2], 422),
        ({"inputs": ["x"] * 65}, 413),
        ({"inputs": "x" * 5001}, 413),
        ({"inputs": "hi", "model": "nope"}, 404),
    ],
)
def test_bad_json_shapes_get_clear_4xx(server, client, payload, status):
    r = post(client, server.url, payload)
    assert r.status_code == status, r.text
    assert r.json()["error"] and r.json()["request_id"]


def test_bytes_level_validation(server, client):
    url = server.url + "/v1/predict"
    j = {"content-type": "application/json"}
    assert client.post(url, content=b'{"inputs": "\xff\xfe"}', headers=j).status_code == 400
    assert client.post(url, content=b'{"inputs": NaN}', headers=j).status_code == 400
    assert client.post(url, content=b'{"inputs": ', headers=j).status_code == 400
    assert client.post(url, content=b"", headers=j).status_code == 400
    assert client.post(url, content=b"[" * 100_000, headers=j).status_code == 413
    assert client.post(url, content=b"[" * 5000 + b"]" * 5000, headers=j).status_code in (400, 422)
    assert client.post(url, content=b'{"inputs": "hi"}', headers={"content-type": "text/plain"}).status_code == 415
    assert client.post(url, content=b'{"inputs": "\\ud800"}', headers=j).status_code == 422
    assert client.get(server.url + "/healthz").status_code == 200


def test_long_text_truncated_and_flagged(server, client):
    body = post(client, server.url, {"inputs": ["short one", "word " * 200]}).json()
    assert [o["truncated"] for o in body["outputs"]] == [False, True]


def test_long_text_rejected_when_configured():
    app = create_app({"t": lambda: tiny(0, too_long="reject")}, torch_threads=1)
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        r = post(c, h.url, {"inputs": ["short one", "word " * 200]})
        assert r.status_code == 413 and "word pieces" in r.json()["error"]
        assert post(c, h.url, {"inputs": "short one"}).status_code == 200


def test_models_loaded_on_demand_with_lru_eviction(server, client):
    r = post(client, server.url, {"inputs": TEXTS[0], "model": "tiny2"})
    assert r.status_code == 200 and r.json()["model_sha256"] == tiny(1).sha256
    models = client.get(server.url + "/v1/models").json()
    assert [m["name"] for m in models["loaded"]] == ["tiny2"] and models["evictions"] >= 1  # max_models=1
    r = post(client, server.url, {"inputs": TEXTS[0]})
    assert r.status_code == 200 and r.json()["model_sha256"] == tiny(0).sha256


def test_memory_budget_evicts_least_recently_used():
    budget = int(tiny(0).n_bytes * 2.5)
    app = create_app(
        {n: (lambda s=s: tiny(s)) for s, n in enumerate("abc")},
        "a",
        torch_threads=1,
        max_models=10,
        max_model_bytes=budget,
    )
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        for name in "ab":
            assert post(c, h.url, {"inputs": "x", "model": name}).status_code == 200
        post(c, h.url, {"inputs": "x", "model": "a"})  # a is now more recent than b
        assert post(c, h.url, {"inputs": "x", "model": "c"}).status_code == 200
        loaded = {m["name"] for m in c.get(h.url + "/v1/models").json()["loaded"]}
        assert loaded == {"a", "c"}


def test_api_key_required_when_set():
    app = create_app({"t": lambda: tiny(0)}, api_key="s3cret", torch_threads=1)
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        assert post(c, h.url, {"inputs": "hi"}).status_code == 401
        assert post(c, h.url, {"inputs": "hi"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert post(c, h.url, {"inputs": "hi"}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get(h.url + "/metrics").status_code == 401
        assert c.get(h.url + "/healthz").status_code == 200  # probes stay open


def test_overload_answers_503_with_retry_after_and_deadline_504():
    slow = SlowPredictor(tiny(0), batch_s=0.3)
    app = create_app({"t": lambda: slow}, max_batch_size=1, max_queue=2, torch_threads=1, warmup=False)
    with start_in_thread(app) as h:
        results = []

        def send(headers=None):
            with httpx.Client(timeout=30) as c:
                results.append(post(c, h.url, {"inputs": "hi"}, headers=headers))

        threads = [threading.Thread(target=send) for _ in range(8)]
        for t in threads:
            t.start()
            time.sleep(0.01)
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results)
        assert set(codes) == {200, 503} and codes.count(200) >= 3
        assert all(r.headers.get("retry-after") for r in results if r.status_code == 503)
        with httpx.Client(timeout=30) as c:
            busy = threading.Thread(target=send)
            busy.start()
            batcher = h.state.registry.loaded["t"].batcher
            while batcher.in_flight < 1:  # wait until the model is busy with that request
                time.sleep(0.005)
            t0 = time.monotonic()
            r = post(c, h.url, {"inputs": "hi"}, headers={"X-Timeout-Ms": "50"})
            assert r.status_code == 504 and time.monotonic() - t0 < 0.25
            busy.join()


def test_a_request_to_a_model_still_loading_gets_504_at_its_deadline_and_the_load_goes_on():
    """The server answers while its model loads (the default): a request then waits for the load only as long
    as its deadline, and the load it waited on is not cancelled with it."""
    loaded = threading.Event()

    def slow_loader():
        loaded.wait(30)  # released by the test, once the early request was answered
        return tiny(0)

    app = create_app({"t": slow_loader}, torch_threads=1, warmup=False)
    with start_in_thread(app, wait_ready=False) as h, httpx.Client(timeout=30) as c:
        t0 = time.monotonic()
        r = post(c, h.url, {"inputs": "hi"}, headers={"X-Timeout-Ms": "200"})
        waited = time.monotonic() - t0
        assert r.status_code == 504 and "deadline" in r.json()["error"] and waited < 5, (r.status_code, waited)
        loaded.set()
        assert post(c, h.url, {"inputs": "hi"}).status_code == 200
        assert c.get(h.url + "/readyz").status_code == 200


def test_load_failure_not_ready_and_fallback_marked_degraded():
    app = create_app({"broken": FailingLoader()}, fallback={"label": "unknown", "score": None})
    with start_in_thread(app, wait_ready=False) as h, httpx.Client(timeout=30) as c:
        deadline = time.monotonic() + 10
        while (r := c.get(h.url + "/readyz")).status_code == 503 and "weights" not in r.text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.status_code == 503 and "weights file missing" in r.json()["reason"]
        body = post(c, h.url, {"inputs": "hi"}).json()
        assert body["degraded"] is True and body["outputs"] == [{"label": "unknown", "score": None}]
        assert "ailab_degraded_total 1.0" in c.get(h.url + "/metrics").text
    loader = FailingLoader()
    app = create_app({"broken": loader})
    with start_in_thread(app, wait_ready=False) as h, httpx.Client(timeout=30) as c:
        for _ in range(5):
            r = post(c, h.url, {"inputs": "hi"})
            assert r.status_code == 503 and r.headers["retry-after"] and "weights file missing" in r.json()["error"]
    assert loader.calls == 1, "a broken model must not be reloaded on every request"


def test_logs_are_json_lines_without_raw_input():
    stream = io.StringIO()
    handler = configure_json_logging(stream)
    try:
        app = create_app({"t": lambda: tiny(0)}, torch_threads=1)
        secret = "my private diary entry about my neighbour"
        with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
            post(c, h.url, {"inputs": secret}, headers={"X-Request-ID": "req-42"})
    finally:
        logging.getLogger("ailab.server.access").removeHandler(handler)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    mine = [x for x in lines if x.get("request_id") == "req-42"]
    assert mine and mine[0]["input_chars"] == len(secret) and len(mine[0]["input_sha256_prefix"]) == 12
    assert "diary" not in stream.getvalue()


def test_config_and_cli_defaults_are_safe():
    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.engine == "torch_eager"
    with pytest.raises(ValueError, match="too_long"):
        ServerConfig(too_long="drop")
    with pytest.raises(ValueError, match="max_queue"):
        ServerConfig(max_queue=0)


def test_priority_header_is_checked(server, client):
    assert post(client, server.url, {"inputs": "hi"}, headers={"X-Priority": "2"}).status_code == 200
    assert post(client, server.url, {"inputs": "hi"}, headers={"X-Priority": "urgent"}).status_code == 400


def test_multi_text_request_is_admitted_all_or_nothing():
    slow = SlowPredictor(tiny(0), batch_s=0.3)
    app = create_app({"t": lambda: slow}, max_batch_size=2, max_queue=4, torch_threads=1, warmup=False)
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        r = post(c, h.url, {"inputs": ["a", "b", "c", "d", "e"]})
        assert r.status_code == 503 and r.headers["retry-after"]
        slow.batch_sizes.clear()
        assert post(c, h.url, {"inputs": ["a", "b", "c"]}).status_code == 200
        assert sum(slow.batch_sizes) == 3, "the refused request must not have been computed"
        assert post(c, h.url, {"inputs": "hi"}, headers={"X-Timeout-Ms": "nan"}).status_code == 400


def test_predict_takes_the_fast_path_and_every_other_request_the_router(server, client, monkeypatch):
    """POST /v1/predict skips FastAPI's routing (routes.PredictFastPath); the rest, and other methods or paths
    near it, still go through the router and get its answers (405, 404)."""
    from fastapi.routing import APIRoute

    routed, handle = [], APIRoute.handle

    async def counting(self, scope, receive, send):
        routed.append((scope["method"], scope["path"]))
        return await handle(self, scope, receive, send)

    monkeypatch.setattr(APIRoute, "handle", counting)
    assert post(client, server.url, {"inputs": TEXTS[0]}).status_code == 200
    assert post(client, server.url, {"inputs": []}).status_code == 422  # refusals too: its own JSON
    assert client.get(server.url + "/healthz").status_code == 200
    assert client.get(server.url + "/v1/predict").status_code == 405
    assert client.post(server.url + "/v1/predict/x", json={"inputs": "a"}).status_code == 404
    assert ("POST", "/v1/predict") not in routed and ("GET", "/healthz") in routed
