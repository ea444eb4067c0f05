"""One completion followed from the route to the sampler and back, through the lifecycle's own types (issue 43):
the SamplingParams the route checked reach the sampler as the same object; the core sends EngineCoreOutputs; the
route gets RequestOutputs; one FinishReason names the end all the way."""

from __future__ import annotations

import json

import httpx
import pytest

from ailab.generation import Decoder, EngineCoreOutput, EngineCoreOutputs, FinishReason, ModelExecutor
from ailab.generation.core_io import EngineCoreRequest
from ailab.generation.sampling_params import SamplingParams
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.async_llm import AsyncLLM
from ailab.server.core_client import InprocClient
from ailab.server.output_processor import OutputProcessor, RequestOutput


@pytest.fixture
def traced(monkeypatch):
    seen: dict[str, list] = {"added": [], "core_requests": [], "sampled": [], "core_outputs": [], "route": []}

    def spy(cls, name, record):
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            record(args, result)
            return result

        monkeypatch.setattr(cls, name, wrapper)

    spy(AsyncLLM, "add_request", lambda a, state: seen["added"].append((a[1], state)))
    spy(InprocClient, "add_request", lambda a, _: seen["core_requests"].append(a[0]))
    spy(ModelExecutor, "sample", lambda a, _: seen["sampled"].extend((r.id, r.sampling_params) for r in a[0]))
    spy(OutputProcessor, "process_outputs", lambda a, _: seen["core_outputs"].append(a[0]))
    original_hand_over = __import__("ailab.server.output_processor", fromlist=["_hand_over"])._hand_over

    def hand_over(items):
        seen["route"].extend(out for _, out in items)
        original_hand_over(items)

    monkeypatch.setattr("ailab.server.output_processor._hand_over", hand_over)
    engine = AsyncLLM(Decoder(tiny_gpt("1m", seed=0)), num_blocks=32, block_size=16, max_running=4, name="gpt")
    with start_in_thread(create_app(generation=engine)) as handle:
        yield handle.url, seen


def _stream(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_completion_crosses_the_lifecycle_in_its_own_types(traced):
    url, seen = traced
    chunks = _stream(url, {"model": "gpt", "prompt": "This movie", "max_tokens": 7, "temperature": 0.7, "seed": 5})
    want = SamplingParams(max_tokens=7, temperature=0.7, top_p=1.0, seed=5, stop=())

    (params, state), = seen["added"]  # fmt: skip
    assert params == want, "the route's SamplingParams, checked from the body"
    (core_request,) = seen["core_requests"]
    assert isinstance(core_request, EngineCoreRequest) and core_request.request_id == state.request_id
    assert core_request.sampling_params is params, "carried to the core as the same object, not copied field by field"
    assert core_request.prompt_token_ids == list(b"This movie")
    sampled = [p for rid, p in seen["sampled"] if rid == state.request_id]  # not the warm-up's
    assert len(sampled) == 7 and all(p is params for p in sampled), "and read by the sampler, every step"

    ours = [o for outs in seen["core_outputs"] for o in outs.outputs if o.request_id == state.request_id]
    assert all(isinstance(outs, EngineCoreOutputs) for outs in seen["core_outputs"])
    assert all(isinstance(o, EngineCoreOutput) for o in ours)
    assert [len(o.new_token_ids) for o in ours] == [1] * 7, "one token a step, seven steps"
    assert [o.finish_reason for o in ours] == [None] * 6 + [FinishReason.LENGTH]

    route = [o for o in seen["route"] if isinstance(o, RequestOutput)]
    assert route and route[-1].finish_reason is FinishReason.LENGTH and route[-1].completion_tokens == 7
    made = bytes(t for o in ours for t in o.new_token_ids).decode("utf-8", errors="replace")
    assert "".join(c["choices"][0]["text"] for c in chunks) == "".join(o.text for o in route) == made
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_a_stop_string_ends_the_request_in_the_core_and_never_reaches_the_client(traced):
    url, seen = traced
    whole = _stream(url, {"model": "gpt", "prompt": "This movie", "max_tokens": 40, "temperature": 0})
    text = "".join(c["choices"][0]["text"] for c in whole).encode()
    at = next(i for i in range(5, len(text) - 1) if text[i : i + 2].isascii())  # a stop string from its own text
    stop = text[at : at + 2].decode()
    first = text.index(stop.encode())
    seen["core_outputs"].clear()
    chunks = _stream(url, {"model": "gpt", "prompt": "This movie", "max_tokens": 40, "temperature": 0, "stop": stop})
    assert "".join(c["choices"][0]["text"] for c in chunks).encode() == text[:first]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    ends = [o for outs in seen["core_outputs"] for o in outs.outputs if o.finish_reason is not None]
    assert [o.finish_reason for o in ends] == [FinishReason.STOP]
    made = sum(len(o.new_token_ids) for outs in seen["core_outputs"] for o in outs.outputs)
    assert made == first + len(stop), "the core stopped in the step that made the stop string"
