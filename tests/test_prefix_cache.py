"""Prefix caching (issue 44): the block hash chain, the lookup, reference counts and eviction, and the promise that
matters: the same tokens with and without it, greedy and seeded, preemptions included."""

from __future__ import annotations

import pytest
import torch

from ailab.generation import Decoder, EngineCore, PagedKVCache, Request, SamplingParams
from ailab.generation.prefix_cache import PrefixCachingAllocator, block_hash
from ailab.generation.trace import as_requests
from ailab.models import tiny_gpt
from ailab.traces import make_trace


def test_a_block_is_named_by_its_parent_and_its_tokens():
    a, b = block_hash(None, [1, 2]), block_hash(None, [1, 2])
    assert a == b and block_hash(a, [3, 4]) != block_hash(None, [3, 4]), "the chain: same tokens, other prefix"


def _written(blocks: PrefixCachingAllocator, seq, ids):
    """As the engine does after a step: the sequence's full blocks named."""
    blocks.cache_full_blocks(seq, ids, [], blocks.lengths[seq])


def test_a_prompt_that_begins_with_cached_blocks_takes_them_and_leaves_the_last_token():
    blocks = PrefixCachingAllocator(num_blocks=8, block_size=4)
    first = list(range(10))  # two full blocks and a tail of 2
    blocks.allocate("a", len(first), first)
    _written(blocks, "a", first)
    assert blocks.computed_tokens("a") == 0 and len(blocks.cached) == 2
    same_start = first[:8] + [99, 98, 97]
    assert blocks.can_allocate(len(same_start), same_start)
    blocks.allocate("b", len(same_start), same_start)
    assert blocks.tables["b"][:2] == blocks.tables["a"][:2], "shared, not copied"
    assert blocks.computed_tokens("b") == 8 and blocks.ref_count[blocks.tables["a"][0]] == 2
    exact = first[:8]  # all cached: the last block is computed again, for the logits
    blocks.allocate("c", len(exact), exact)
    assert blocks.computed_tokens("c") == 4
    assert (blocks.queries, blocks.hits) == (10 + 11 + 8, 0 + 8 + 4)


def test_a_freed_block_stays_cached_until_its_slot_is_needed_least_recently_freed_first():
    blocks = PrefixCachingAllocator(num_blocks=4, block_size=2)
    blocks.allocate("a", 4, [1, 2, 3, 4])
    _written(blocks, "a", [1, 2, 3, 4])
    blocks.allocate("b", 2, [7, 8])  # one block, not full once its last token is counted: 2 tokens = full
    _written(blocks, "b", [7, 8])
    blocks.free("a")
    blocks.free("b")
    assert len(blocks.free_blocks) == 4 and len(blocks.cached) == 3
    # queue: the never-used block, then a's tail, a's head (a was freed first, its tail before its head), then b
    a_head, a_tail = (
        blocks.cached[block_hash(None, [1, 2])],
        blocks.cached[block_hash(block_hash(None, [1, 2]), [3, 4])],
    )
    blocks.allocate("c", 4, [9] * 4)  # two fresh blocks: the never-used one, then a's tail (evicted)
    assert a_tail in blocks.tables["c"] and a_head not in blocks.tables["c"]
    assert blocks.cache_hit([1, 2, 3]) == [a_head] and blocks.cache_hit([1, 2, 3, 4, 5]) == [a_head]
    assert blocks.cache_hit([7, 8, 0]) != [], "b, freed last, is still there"


def test_a_block_that_holds_nothing_cached_is_reused_first():
    blocks = PrefixCachingAllocator(num_blocks=3, block_size=2)
    blocks.allocate("named", 2, [5, 6])
    _written(blocks, "named", [5, 6])
    blocks.allocate("tail", 1, [4])  # half a block: never named
    named, tail = blocks.tables["named"][0], blocks.tables["tail"][0]
    blocks.free("named")
    blocks.free("tail")
    assert blocks._take_free() == tail and named in blocks.hash_of


def test_can_allocate_counts_a_hit_block_that_is_free_as_taken():
    blocks = PrefixCachingAllocator(num_blocks=2, block_size=2)
    blocks.allocate("a", 3, [1, 2, 3])
    _written(blocks, "a", [1, 2, 3])
    blocks.free("a")  # both blocks free, one of them cached
    assert blocks.can_allocate(3, [1, 2, 9]), "one hit (taken from the free queue) and one new: 2 of 2"
    assert not blocks.can_allocate(5, [1, 2, 9, 9, 9])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Decoder(tiny_gpt("1m", seed=0))


def _serve(model, reqs, prefix_caching: bool, num_blocks: int = 64, max_running: int = 4):
    core = EngineCore(
        model,
        PagedKVCache.for_model(model, num_blocks, 8, allocator=PrefixCachingAllocator if prefix_caching else None),
        max_running,
    )
    preempted = sum(r.preempted for r in core.run({0: reqs[: len(reqs) // 2], 3: reqs[len(reqs) // 2 :]}))
    return [r.output for r in reqs], core.alloc, preempted


def _chat(n: int, temperature: float = 0.0):
    trace = make_trace(n, prompt_bytes=(8, 30), output_tokens=(4, 24), source="corpus", seed=5, prefix_bytes=40)
    reqs = as_requests(trace)
    for r in reqs:
        r.sampling_params = SamplingParams(max_tokens=r.max_new_tokens, temperature=temperature, seed=r.id)
    return reqs


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_same_tokens_with_and_without_prefix_caching(model, temperature):
    without, _, _ = _serve(model, _chat(12, temperature), prefix_caching=False)
    with_cache, blocks, _ = _serve(model, _chat(12, temperature), prefix_caching=True)
    assert with_cache == without
    assert blocks.hits >= 8 * 4, "the 40-byte system prompt: four full blocks of 8, hit by most requests"


def test_the_same_tokens_when_a_small_pool_preempts(model):
    without, _, pre_a = _serve(model, _chat(10), prefix_caching=False, num_blocks=14, max_running=4)
    with_cache, blocks, pre_b = _serve(model, _chat(10), prefix_caching=True, num_blocks=14, max_running=4)
    assert with_cache == without and pre_a + pre_b > 0, "a pool this small must preempt"
    assert sorted(blocks.free_blocks) == list(range(14)) and not blocks.tables and set(blocks.ref_count) == {0}


def test_a_request_alone_gets_no_hit_and_the_same_tokens(model):
    req = [Request(0, list(b"The film was a quiet, patient thing"), 12)]
    alone, blocks, _ = _serve(model, req, prefix_caching=True)
    assert (
        blocks.hits == 0
        and alone == _serve(model, [Request(0, list(b"The film was a quiet, patient thing"), 12)], False)[0]
    )


def _metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_the_server_flag_serves_the_same_answers_and_counts_hits_in_metrics(model):
    import httpx

    from ailab.server import create_app, start_in_thread
    from ailab.server.async_llm import AsyncLLM

    system = "You are a film critic. Answer in one short sentence, plainly.\n"  # 63 bytes, then "The " for all
    prompts = [system + q for q in ("The plot?", "The acting?", "The music?")]
    answers = {}
    for caching in (False, True):
        engine = AsyncLLM(model, num_blocks=32, block_size=16, name="gpt", enable_prefix_caching=caching)
        with start_in_thread(create_app(generation=engine)) as handle:
            answers[caching] = [
                httpx.post(
                    handle.url + "/v1/completions",
                    json={"model": "gpt", "prompt": p, "max_tokens": 8, "temperature": 0},
                    timeout=30,
                ).json()["choices"][0]["text"]
                for p in prompts
            ]
            metrics = httpx.get(handle.url + "/metrics", timeout=10).text
        queries, hits = (
            _metric(metrics, "ailab_prefix_cache_queries_total"),
            _metric(metrics, "ailab_prefix_cache_hits_total"),
        )
        if caching:
            assert hits == 2 * 64, "the second and third find the 64 bytes all begin with: four full blocks of 16"
            assert queries >= sum(len(p.encode()) for p in prompts)
        else:
            assert queries == hits == 0
    assert answers[True] == answers[False]
