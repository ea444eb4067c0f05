"""ailab.generation.measure's in-process measurements of prefix caching and chunked prefill (notebooks 5/04 and
5/05): what each run records, counted without a clock, so they hold on any machine."""

from __future__ import annotations

import pytest
import torch

from ailab.generation import Decoder, Request, measure, trace
from ailab.models import tiny_gpt


@pytest.fixture(scope="module")
def model():
    return Decoder(tiny_gpt("1m", seed=0))


def _arrivals():
    g = torch.Generator().manual_seed(3)
    short = [Request(i, torch.randint(0, 256, (12,), generator=g).tolist(), 10) for i in range(3)]
    return {0: short, 2: [Request(3, torch.randint(0, 256, (100,), generator=g).tolist(), 4)]}


def test_a_run_by_steps_records_each_plan_and_each_token(model):
    arrivals = _arrivals()
    run = measure.run_by_steps(model, arrivals, max_num_batched_tokens=16, max_running=4)
    assert all(not r.output for rs in arrivals.values() for r in rs), "the caller's requests are copied, not served"
    assert {rid: len(out) for rid, out in run.outputs.items()} == {0: 10, 1: 10, 2: 10, 3: 4}
    assert all(len(run.token_ms[rid]) == len(out) for rid, out in run.outputs.items())
    assert max(s["tokens"] for s in run.steps) <= 16 and [s["step"] for s in run.steps] == list(range(len(run.steps)))
    chunks = [dict(s["prefill"])[3] for s in run.steps if 3 in dict(s["prefill"])]
    assert sum(chunks) == 100 and len(chunks) > 1
    first = next(s for s in run.steps if 3 in s["made"])
    assert 3 in dict(first["prefill"]) and first is [s for s in run.steps if 3 in dict(s["prefill"])][-1]
    assert run.ttft_ms(3) > 0 and len(run.itl_ms([0, 1])) == 18 and run.tpot_ms(0) > 0
    assert run.hits == run.queries == 0 and run.hit_rate == 0.0
    assert measure.run_by_steps(model, arrivals, max_running=4).outputs == run.outputs


def test_ttft_by_cached_prefix_serves_full_blocks_and_never_the_last_token(model):
    rows, rounds = measure.ttft_by_cached_prefix(model, prompt_tokens=48, cached=(0, 16, 48), rounds=2)
    assert [(r["cached"], r["served"], r["computed"]) for r in rows] == [(0, 0, 48), (16, 16, 32), (48, 32, 16)]
    assert all(len(v) == 2 for v in rounds.samples.values()) and all(r["ttft_ms"] > 0 for r in rows)


def test_a_chat_trace_finds_the_prefix_full_blocks_in_every_request_but_the_first(model):
    on = measure.chat_trace_run(model, 40, n=5, prompt_bytes=20, output_tokens=3)
    off = measure.chat_trace_run(model, 40, n=5, prompt_bytes=20, output_tokens=3, prefix_caching=False)
    assert on["hits"] == on["full_blocks_hits"] == 4 * 32 and on["queries"] == 5 * 60
    assert on["shared_share"] == pytest.approx(40 / 60) and on["hit_rate"] == pytest.approx(128 / 300)
    assert off["hits"] == off["queries"] == 0 and on["run"].outputs == off["run"].outputs
    rows = measure.chat_rounds(model, 40, rounds=2, n=5, prompt_bytes=20, output_tokens=3)
    assert [(r["round"], r["engine"]) for r in rows] == [(0, "off"), (0, "on"), (1, "off"), (1, "on")]
    assert trace.per_round_ratio(rows, "ttft_p50_ms", "off", "on") > 0 and rows[1]["hit_rate"] == on["hit_rate"]


def test_budget_rounds_count_the_long_prompt_ttft_in_steps(model):
    rows = measure.budget_rounds(model, _arrivals(), decoding=[0, 1, 2], long=3, budgets=(None, 16), rounds=1)
    whole, chunked = rows
    assert (whole["engine"], chunked["engine"]) == ("no budget", "budget 16")
    assert whole["ttft_long_steps"] == 1 and chunked["ttft_long_steps"] == -(-100 // (16 - 3))
    assert whole["outputs"] == chunked["outputs"] and whole["itl_max_ms"] >= whole["itl_p50_ms"] > 0
