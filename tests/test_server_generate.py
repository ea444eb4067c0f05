"""POST /v1/generate on the real server (uvicorn on loopback): JSON and streamed answers equal ailab's own greedy
generation, bad parameters are 400 with words (never 500), a full queue is 503 with Retry-After, a client that
disconnects mid-stream frees its KV blocks, stop strings end a request, and /metrics reports the generation."""
from __future__ import annotations

import json
import time

import httpx
import pytest
import torch

from ailab.generation import Decoder, generate
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.generate import GenerationEngine
from ailab.server.predictors import tiny_predictor


@pytest.fixture(scope="module")
def model():
    return Decoder(tiny_gpt("1m", seed=0))


@pytest.fixture(scope="module")
def served(model):
    engine = GenerationEngine(model, num_blocks=64, block_size=16, max_running=4, max_waiting=16)
    app = create_app({"tiny": tiny_predictor}, "tiny", generation=engine)
    with start_in_thread(app) as handle:
        yield handle.url, engine


def _greedy(model, prompt: str, n: int) -> bytes:
    return bytes(generate(model, torch.tensor([list(prompt.encode())]), n)[0].tolist())


def _sse(lines):
    events, kind = [], "message"
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
            kind = "message"
    return events


def test_json_answer_equals_greedy_generation(served, model):
    url, _ = served
    r = httpx.post(url + "/v1/generate", json={"prompt": "This movie ", "max_new_tokens": 24}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["finish_reason"] == "length" and body["usage"] == {"prompt_tokens": 11, "completion_tokens": 24}
    assert body["text"] == _greedy(model, "This movie ", 24).decode("utf-8", errors="replace")
    assert body["timings"]["ttft_ms"] <= body["timings"]["total_ms"]


def test_streamed_tokens_are_the_same_and_end_with_counts(served, model):
    url, _ = served
    with httpx.stream("POST", url + "/v1/generate", json={"prompt": "A film", "max_new_tokens": 16, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _sse(r.iter_lines())
    tokens = [e for k, e in events if k == "message"]
    assert [e["index"] for e in tokens] == list(range(16))
    assert bytes(e["token"] for e in tokens) == _greedy(model, "A film", 16)
    kind, done = events[-1]
    assert kind == "done" and done["usage"]["completion_tokens"] == 16 and done["finish_reason"] == "length"


@pytest.mark.parametrize("body, words", [
    ({"prompt": "x", "max_new_tokens": -1}, "max_new_tokens"),
    ({"prompt": "x", "max_new_tokens": 10**6}, "max_new_tokens"),
    ({"prompt": "x", "max_new_tokens": True}, "max_new_tokens"),
    ({"prompt": "x", "max_new_tokens": 2.5}, "max_new_tokens"),
    ({"prompt": "x", "temperature": -0.1}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "top_p": 1.5}, "top_p"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": 3}, "prompt"),
    ({"prompt": "x" * 500, "max_new_tokens": 100}, "context"),
    ({"prompt": "x", "seed": -4}, "seed"),
    ({"prompt": "x", "stop": [""]}, "stop"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "temprature": 1}, "unknown"),
    ([1, 2], "JSON object"),
])
def test_bad_parameters_are_400_with_words(served, body, words):
    url, _ = served
    r = httpx.post(url + "/v1/generate", json=body, timeout=10)
    assert r.status_code == 400 and words in r.json()["error"], (r.status_code, r.text)


def test_a_body_that_is_not_json_is_400(served):
    url, _ = served
    r = httpx.post(url + "/v1/generate", content=b"{nope", headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


def test_a_disconnect_mid_stream_frees_the_blocks(served):
    url, engine = served
    with httpx.stream("POST", url + "/v1/generate", json={"prompt": "Long", "max_new_tokens": 400, "stream": True},
                      timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen == 5:
                break
        assert engine.blocks_free < engine.blocks_total, "the running request holds blocks"
    deadline = time.monotonic() + 10
    while (engine.blocks_free < engine.blocks_total or engine.running) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.blocks_free == engine.blocks_total and engine.running == 0


def test_a_stop_string_ends_the_request_before_it(served, model):
    url, _ = served
    text = _greedy(model, "Stop here", 40)
    stop = text[20:23]
    cut = text.index(stop)
    if any(b >= 0x80 for b in stop):
        pytest.skip("the greedy text has non-ASCII bytes where the stop string would be")
    r = httpx.post(url + "/v1/generate", json={"prompt": "Stop here", "max_new_tokens": 40,
                                               "stop": stop.decode()}, timeout=30)
    body = r.json()
    assert body["finish_reason"] == "stop" and body["text"].encode() == text[:cut]


def test_a_full_queue_is_503_with_retry_after(model):
    engine = GenerationEngine(model, num_blocks=8, block_size=16, max_running=1, max_waiting=0)
    app = create_app({"tiny": tiny_predictor}, "tiny", generation=engine)
    with start_in_thread(app) as handle:
        r = httpx.post(handle.url + "/v1/generate", json={"prompt": "x", "max_new_tokens": 4}, timeout=10)
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "busy" in r.json()["error"]


def test_metrics_report_the_generation(served):
    url, _ = served
    httpx.post(url + "/v1/generate", json={"prompt": "metrics", "max_new_tokens": 8}, timeout=30)
    text = httpx.get(url + "/metrics", timeout=10).text
    for name in ("ailab_generation_ttft_seconds_count", "ailab_generation_inter_token_seconds_count",
                 "ailab_generation_tokens_total", "ailab_generation_running", "ailab_generation_waiting",
                 "ailab_kv_blocks_used", "ailab_kv_blocks_free"):
        assert name in text, name


def test_without_an_engine_the_route_says_so():
    app = create_app({"tiny": tiny_predictor}, "tiny")
    with start_in_thread(app) as handle:
        r = httpx.post(handle.url + "/v1/generate", json={"prompt": "x"}, timeout=10)
    assert r.status_code == 404 and "no generation model" in r.json()["error"]


def test_ailab_serve_generate_flags_are_checked_before_anything_loads(tmp_path, capsys):
    from ailab.models import WeightsIntegrityError, save_state_dict
    from ailab.server.run import build_parser, generation_engine, serve_main

    def engine(*flags):
        return generation_engine(build_parser().parse_args(list(flags)))

    assert engine() is None
    with pytest.raises(ValueError, match="need --generate SIZE"):
        engine("--generate-weights", "x.safetensors")
    with pytest.raises(ValueError, match="choose one of"):
        engine("--generate", "2m")
    with pytest.raises(ValueError, match="needs --generate-sha256"):
        engine("--generate", "1m", "--generate-weights", "x.safetensors")
    path = tmp_path / "lm.safetensors"     # what train.save_lm writes: the weights without the tied head
    sha = save_state_dict({k: v for k, v in tiny_gpt("1m", seed=3).state_dict().items() if k != "lm_head.weight"}, path)
    with pytest.raises(WeightsIntegrityError, match="trusted hash"):
        engine("--generate", "1m", "--generate-weights", str(path), "--generate-sha256", "0" * 64)
    served = engine("--generate", "1m", "--generate-weights", str(path), "--generate-sha256", sha)
    try:
        assert torch.equal(served.model.hf.transformer.wte.weight.cpu(), tiny_gpt("1m", seed=3).transformer.wte.weight)
        # on the device the classifiers get (pick_device), with its KV block pool beside it
        from ailab.device import pick_device

        assert served.model.device.type == pick_device().type and served.cache.k.device == served.model.device
    finally:
        served.close()
    assert serve_main(["--quiet", "--generate", "2m"]) == 2
    assert "choose one of" in capsys.readouterr().err
