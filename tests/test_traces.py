"""ailab.traces: one trace type and one generator for every load (the engine in process, HTTP, vLLM's client)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ailab.traces import TraceRequest, make_trace, poisson_arrivals, with_arrivals


def test_the_bench_trace_is_fixed_length_ascii_and_the_same_every_time():
    trace = make_trace(50, prompt_bytes=60, output_tokens=32)
    assert trace == make_trace(50, prompt_bytes=60, output_tokens=32)
    assert all(isinstance(t, TraceRequest) and len(t.prompt) == 60 and t.prompt.isascii() for t in trace)
    assert all(t.max_tokens == 32 and t.arrival_s == 0.0 for t in trace), "rate inf: flat out, every arrival at 0"
    assert len({t.prompt for t in trace}) == 50
    assert make_trace(50, prompt_bytes=60, output_tokens=32, seed=1) != trace


def test_ranges_are_drawn_per_request_within_their_bounds():
    trace = make_trace(400, prompt_bytes=(8, 96), output_tokens=(4, 96), source="corpus", seed=3)
    lengths, outs = [len(t.prompt) for t in trace], [t.max_tokens for t in trace]
    assert min(lengths) >= 8 and max(lengths) <= 96 and len(set(lengths)) > 40
    assert min(outs) >= 4 and max(outs) <= 96
    assert np.median(outs) < (4 + 96) / 2, "log-uniform: many short answers, a few long ones"
    edge = make_trace(30, prompt_bytes=(1, 1), output_tokens=(1, 1), source="corpus")
    assert all(len(t.prompt) == 1 and t.max_tokens == 1 for t in edge)


def test_arrivals_are_poisson_at_the_rate_and_shared_with_with_arrivals():
    trace = make_trace(2000, rate_rps=50.0, seed=4)
    gaps = np.diff([0.0] + [t.arrival_s for t in trace])
    assert gaps.min() >= 0 and 1 / gaps.mean() == pytest.approx(50.0, rel=0.1)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.1), "exponential gaps: their CV is 1"
    again = with_arrivals(make_trace(2000, seed=4), 50.0, seed=4)
    assert [t.arrival_s for t in again] == [t.arrival_s for t in trace], "one generator of arrivals"
    assert [t.arrival_s for t in with_arrivals(trace, math.inf)] == [0.0] * 2000
    assert poisson_arrivals(3, math.inf, np.random.default_rng(0)).tolist() == [0.0, 0.0, 0.0]


def test_a_cut_of_the_corpus_is_bytes_and_its_text_never_fails():
    trace = make_trace(200, prompt_bytes=(8, 96), source="corpus", seed=0)
    assert all(isinstance(t.prompt, bytes) and isinstance(t.text, str) for t in trace)
    custom = make_trace(5, prompt_bytes=4, source="corpus", text=bytes(range(200)))
    assert all(len(t.prompt) == 4 and t.prompt[1] == t.prompt[0] + 1 for t in custom), "cut from the given text"


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"n": 0}, "n must be"),
        ({"n": 3, "prompt_bytes": 0}, "prompt_bytes"),
        ({"n": 3, "output_tokens": (5, 2)}, "output_tokens"),
        ({"n": 3, "rate_rps": 0}, "rate_rps"),
        ({"n": 3, "source": "web"}, "source"),
    ],
)
def test_bad_arguments_are_refused_with_their_name(kw, words):
    with pytest.raises(ValueError, match=words):
        make_trace(**kw)


def test_a_mixed_trace_has_one_long_prompt_in_long_every_and_is_otherwise_the_same():
    plain = make_trace(24, prompt_bytes=60, output_tokens=16)
    mixed = make_trace(24, prompt_bytes=60, output_tokens=16, long_prompt_bytes=900, long_every=6)
    assert [len(t.prompt) for t in mixed] == [900 if i % 6 == 5 else 60 for i in range(24)]
    assert [t for i, t in enumerate(mixed) if i % 6 != 5] == [t for i, t in enumerate(plain) if i % 6 != 5]
    with pytest.raises(ValueError, match="long_every"):
        make_trace(3, long_prompt_bytes=100, long_every=0)
