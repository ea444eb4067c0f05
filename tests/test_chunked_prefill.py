"""Chunked prefill (issue 44): a token budget per step, decodes first, then prompt chunks; a long prompt spread
over several steps; the same tokens as without it, greedy and seeded, with preemption and prefix caching."""

from __future__ import annotations

import pytest
import torch

from ailab.generation import Decoder, EngineCore, PagedKVCache, Request, SamplingParams
from ailab.generation.prefix_cache import PrefixCachingAllocator
from ailab.models import tiny_gpt


@pytest.fixture(scope="module")
def model():
    return Decoder(tiny_gpt("1m", seed=0))


def _mixed(temperature: float = 0.0) -> dict[int, list[Request]]:
    """Short prompts running, then long ones arriving among them (by step)."""
    g = torch.Generator().manual_seed(7)
    spec = [(12, 20, 0), (9, 24, 0), (150, 10, 2), (20, 16, 3), (220, 8, 5), (6, 18, 6)]
    out: dict[int, list[Request]] = {}
    for i, (n, new, at) in enumerate(spec):
        sp = SamplingParams(max_tokens=new, temperature=temperature, seed=i)
        out.setdefault(at, []).append(Request(i, torch.randint(0, 256, (n,), generator=g).tolist(), sp))
    return out


def _serve(model, budget, num_blocks=96, prefix_caching=False, temperature=0.0, max_running=4):
    arrivals = _mixed(temperature)
    reqs = sorted((r for rs in arrivals.values() for r in rs), key=lambda r: r.id)
    cache = PagedKVCache.for_model(model, num_blocks, 8, allocator=PrefixCachingAllocator if prefix_caching else None)
    core = EngineCore(model, cache, max_running, max_num_batched_tokens=budget)
    plans = []
    real_schedule = core.scheduler.schedule

    def schedule():
        plan = real_schedule()
        plans.append([(r.id, n) for r, n in plan.prefill] + [(r.id, 1) for r in plan.decode])
        return plan

    core.scheduler.schedule = schedule
    reports = list(core.run(arrivals))
    return reqs, plans, reports


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_the_same_tokens_with_and_without_a_token_budget(model, temperature):
    whole, _, _ = _serve(model, None, temperature=temperature)
    for budget in (4, 16, 64):
        chunked, plans, _ = _serve(model, budget, temperature=temperature)
        assert [r.output for r in chunked] == [r.output for r in whole], f"budget {budget}"
        assert max(sum(n for _, n in p) for p in plans) <= budget, "never more tokens in a step than the budget"


def test_a_long_prompt_is_spread_over_steps_and_the_decodes_go_on_beside_it(model):
    reqs, plans, _ = _serve(model, 32)
    long_chunks = [dict(p)[4] for p in plans if 4 in dict(p) and reqs[4].first_token_s is not None]
    assert len([n for n in long_chunks if n > 1]) >= 220 // 32 - 1, "220 prompt tokens at most 32 a step"
    # every step that computed a chunk of request 4 also decoded each running short request
    for p in plans:
        ids = dict(p)
        if ids.get(4, 0) > 1:
            assert any(n == 1 for rid, n in p if rid != 4), "a decode beside the long prompt's chunk"


def test_the_same_tokens_with_prefix_caching_and_a_small_pool_that_preempts(model):
    whole, _, _ = _serve(model, None, num_blocks=64)
    chunked, _, reports = _serve(model, 16, num_blocks=64, prefix_caching=True)
    assert [r.output for r in chunked] == [r.output for r in whole]
    small, _, reports = _serve(model, 16, num_blocks=32, max_running=4)
    assert sum(r.preempted for r in reports) > 0, "a pool this small must preempt"
    assert [r.output for r in small] == [r.output for r in whole]


def test_a_budget_below_the_seats_is_refused_with_its_reason(model):
    cache = PagedKVCache.for_model(model, 16, 8)
    with pytest.raises(ValueError, match="at least max_running"):
        EngineCore(model, cache, max_running=8, max_num_batched_tokens=4)
