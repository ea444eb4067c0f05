"""What the KV cache costs and buys, measured on this machine (notebook 5/01 and `ailab bench generation`).

cache_growth            the cache's memory (VRAM on a GPU: bytes asked for, blocks handed out) at several
                        lengths, beside the formula and the formula rounded to the allocator's blocks
cache_bytes_per_token   bytes the cache's tensors ask for per cached token (slope over two lengths) vs formula
cache_vs_recompute      per-token decode time with the cache vs recomputing the whole prefix, as n grows
prefill_vs_decode       tokens/s of both phases and their arithmetic intensity, for the roofline
paged_waste             KV slots reserved vs used by the real allocator on a mix of lengths
count_ops               tensor operations a call runs (a decode step's are as many at batch 1 as at 16)

Prefix caching and chunked prefill (notebooks 5/04 and 5/05), on the engine core with requests arriving by step:
run_by_steps            a run's every step (its plan: who prefilled how many tokens, who decoded; its wall time)
                        and every token's time: TTFT, ITL and TPOT per request, prefix-cache hits in tokens
ttft_by_cached_prefix   TTFT of one prompt against how many of its first tokens an earlier request left cached
chat_trace_run          a chat trace (one system prompt before every prompt): hit rate against the shared share
chat_rounds             that trace without and with prefix caching, in interleaved rounds (TTFT p50, tokens)
budget_rounds           the same arrivals under token budgets (chunked prefill), in interleaved rounds: ITL and
                        TPOT of the decodes, TTFT of a long prompt
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ailab.generation.decode import decode_one_token, prefill
from ailab.generation.kv_cache import KVCache, NoCacheView, kv_bytes_per_token
from ailab.generation.paged import BlockAllocator


def cache_growth(
    model, lengths: Sequence[int] = (64, 128, 256, 448), batch: int = 8, dtype: torch.dtype | None = None
) -> list[dict]:
    """The memory a KVCache of `batch` sequences takes at each max length, as the allocator of the model's
    device reports it, beside the formula's bytes for as many tokens.

    On a GPU, torch.cuda's counters in a fresh pool (ailab.memory.blocks): `bytes` is what it allocated (blocks),
    `requested_bytes` what the two tensors (K and V) asked for, `block_bytes` the formula's two tensors rounded
    to the allocator's blocks. On a CPU the profiler counts the bytes each tensor asked for; all four agree."""
    from ailab.memory.blocks import allocated_and_requested, fresh_blocks
    from ailab.memory.measure import peak_bytes

    dtype = dtype or model.dtype
    formula = kv_bytes_per_token(model, dtype)
    rows = []
    for n in lengths:

        def build(n=n):
            return KVCache.for_model(model, batch, n, dtype)

        per_tensor = formula * batch * n // 2  # K and V are one tensor each, half the bytes apiece
        row = {"tokens": batch * n, "formula_bytes": formula * batch * n}
        if model.device.type == "cuda":
            m = allocated_and_requested(build, model.device)
            row.update(
                bytes=m["allocated"],
                requested_bytes=m["requested"],
                pool=m["pool"],
                block_bytes=sum(fresh_blocks([per_tensor, per_tensor])),
            )
        else:
            held = peak_bytes(build, model.device)
            row.update(bytes=held, requested_bytes=held, block_bytes=row["formula_bytes"])
        rows.append(row)
    return rows


def cache_bytes_per_token(
    model, lengths: tuple[int, int] = (64, 448), batch: int = 1, dtype: torch.dtype | None = None
) -> dict:
    """Bytes per token of a KVCache from the bytes its tensors asked for (cache_growth at two lengths: the
    slope, so any fixed cost cancels), against the formula; and the slope of what the allocator handed out."""
    dtype = dtype or model.dtype
    short, long = cache_growth(model, lengths, batch, dtype)
    tokens = long["tokens"] - short["tokens"]
    per_token = (long["requested_bytes"] - short["requested_bytes"]) / tokens
    formula = kv_bytes_per_token(model, dtype)
    return {
        "measured_bytes_per_token": per_token,
        "formula_bytes_per_token": formula,
        "error_frac": abs(per_token - formula) / formula,
        "allocated_bytes_per_token": (long["bytes"] - short["bytes"]) / tokens,
        "lengths": list(lengths),
        "dtype": str(dtype).replace("torch.", ""),
        "device": model.device.type,
    }


def cache_vs_recompute(model, lengths: Sequence[int] = (16, 64, 128, 256, 448), rounds: int = 7) -> list[dict]:
    """At each context length n: the time of one decode step with the cache (one new token, n cached)
    against producing the same next token without one (a forward over all n + 1 tokens). Interleaved rounds,
    medians."""
    from ailab.timing import interleaved

    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in lengths:
        ids = torch.randint(0, model.vocab_size, (1, n + 1), generator=gen).to(model.device)
        cache = KVCache.for_model(model, 1, n + 1)
        prefill(model, cache, ids[:, :n])

        def cached():
            cache.length = n  # rewind: the step always sees n cached tokens
            decode_one_token(model, cache, ids[:, n:])

        def recompute():
            with torch.inference_mode():
                model(ids, NoCacheView(1, n + 1, model.device))

        stats = interleaved(
            {"cached": cached, "recompute": recompute}, rounds=rounds, warmup=2, device=model.device, max_seconds=10
        ).stats
        rows.append(
            {
                "context": n,
                "cached_ms": stats["cached"].p50_ms,
                "recompute_ms": stats["recompute"].p50_ms,
                "speedup": stats["recompute"].p50_ms / stats["cached"].p50_ms,
            }
        )
    return rows


def count_ops(fn) -> int:
    """How many tensor operations (ATen calls, each at least one kernel) `fn()` runs: what a step pays per call
    whatever its sizes. Eager only: a compiled function's fused kernels are not ATen calls."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.calls


def param_count(model) -> int:
    return sum(p.numel() for p in model.hf.parameters())


def prefill_vs_decode(model, prompt: int = 256, batch: int = 8, decode_steps: int = 16, rounds: int = 5) -> dict:
    """Tokens/s of prefill (batch x prompt tokens in one pass) and of decode (batch tokens per pass), with
    the arithmetic intensity of each: about 2 FLOPs per weight per token, over the bytes of the weights and
    the KV cache read once per pass. Decode reads every weight to produce `batch` tokens: it is memory-bound."""
    from ailab.timing import interleaved

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.vocab_size, (batch, prompt + decode_steps), generator=gen).to(model.device)
    cache = KVCache.for_model(model, batch, prompt + decode_steps)

    def run_prefill():
        cache.length = 0
        prefill(model, cache, ids[:, :prompt])

    def run_decode():
        cache.length = prompt
        for t in range(decode_steps):
            decode_one_token(model, cache, ids[:, prompt + t : prompt + t + 1])

    run_prefill()
    stats = interleaved(
        {"prefill": run_prefill, "decode": run_decode}, rounds=rounds, warmup=1, device=model.device, max_seconds=20
    ).stats
    params, itemsize = param_count(model), torch.empty((), dtype=model.dtype).element_size()
    weight_bytes = params * itemsize
    kv_token = kv_bytes_per_token(model, model.dtype)
    flops_prefill = 2 * params * batch * prompt
    flops_decode_pass = 2 * params * batch
    bytes_prefill = weight_bytes + kv_token * batch * prompt  # weights once, K/V written once
    bytes_decode_pass = weight_bytes + kv_token * batch * (prompt + decode_steps / 2)  # weights + the cache read
    p_s, d_s = stats["prefill"].p50_ms / 1e3, stats["decode"].p50_ms / 1e3
    return {
        "prompt": prompt,
        "batch": batch,
        "decode_steps": decode_steps,
        "prefill_tokens_per_s": batch * prompt / p_s,
        "decode_tokens_per_s": batch * decode_steps / d_s,
        "prefill_gflops": flops_prefill / p_s / 1e9,
        "decode_gflops": flops_decode_pass * decode_steps / d_s / 1e9,
        "prefill_intensity": flops_prefill / bytes_prefill,
        "decode_intensity": flops_decode_pass / bytes_decode_pass,
    }


def request_mix(n: int = 200, seed: int = 0, max_len: int = 1024) -> np.ndarray:
    """Final lengths (prompt + output) of `n` requests: log-normal, as chat traffic is (a few long ones)."""
    from ailab.memory.kv import request_lengths

    return request_lengths(n, seed=seed, median=max_len // 6, sigma=0.9, max_len=max_len)


def paged_waste(lengths: Sequence[int], block_size: int = 16, max_len: int = 1024) -> dict:
    """Run the real BlockAllocator over sequences that grow to `lengths` (a prompt, then one token at a
    time) and count reserved against used slots, beside reserving max_len per sequence."""
    lengths = [int(x) for x in lengths]
    alloc = BlockAllocator(num_blocks=sum(-(-x // block_size) for x in lengths), block_size=block_size)
    for i, n in enumerate(lengths):
        prompt = max(1, n // 2)
        alloc.allocate(i, prompt)
        for _ in range(n - prompt):
            alloc.append(i)
    used, reserved = alloc.used_tokens, alloc.reserved_tokens
    return {
        "sequences": len(lengths),
        "used_tokens": used,
        "reserved_paged_tokens": reserved,
        "reserved_max_tokens": max_len * len(lengths),
        "waste_frac_paged": 1 - used / reserved,
        "waste_frac_max": 1 - used / (max_len * len(lengths)),
        "block_size": block_size,
    }


# Prefix caching and chunked prefill, measured in process (notebooks 5/04 and 5/05). Requests arrive *by step*, so
# two runs of the same requests plan the same steps and only the clock differs between them.


@dataclass
class StepRun:
    """One run of the engine core: each step's plan and wall time, each request's token times (ms from the start).

    `steps[k]`: {"step", "start_ms", "ms", "prefill": [(id, tokens computed)], "decode": [ids], "tokens": computed
    in all, "made": [ids of the requests that got a token]}."""

    steps: list[dict]
    added_ms: dict[int, float]  # request id -> when it was added (its arrival)
    token_ms: dict[int, list[float]]  # request id -> the end of each step that made one of its tokens
    outputs: dict[int, list[int]]  # request id -> its tokens
    hits: int = 0  # prefix cache: prompt tokens found cached, and asked for (0 without a prefix cache)
    queries: int = 0

    def ttft_ms(self, rid: int) -> float:
        return self.token_ms[rid][0] - self.added_ms[rid]

    def itl_ms(self, rids: Sequence[int] | None = None) -> list[float]:
        """Every gap between two consecutive tokens of the given requests (all: None)."""
        rids = list(self.token_ms) if rids is None else rids
        return [float(g) for r in rids for g in np.diff(self.token_ms[r])]

    def tpot_ms(self, rid: int) -> float:
        t = self.token_ms[rid]
        return (t[-1] - t[0]) / (len(t) - 1)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def run_by_steps(
    model,
    arrivals: dict[int, list],
    prefix_caching: bool = False,
    max_num_batched_tokens: int | None = None,
    num_blocks: int = 256,
    block_size: int = 16,
    max_running: int = 8,
) -> StepRun:
    """Serve `arrivals` (step k -> the Requests added before step k) on a fresh EngineCore until it is idle,
    recording every step's plan (who prefilled how many tokens, who decoded) and wall time. The requests are
    copied: the same arrivals can be served again, with another setting."""
    import copy
    import time

    from ailab.generation.engine_core import EngineCore
    from ailab.generation.plan import schedule

    arrivals = {k: [copy.deepcopy(r) for r in reqs] for k, reqs in arrivals.items()}
    plans = []

    def recording(*args, **kw):  # plan.py's planner, its plans kept as ids (the requests change after)
        plan = schedule(*args, **kw)
        plans.append(([(r.id, n) for r, n in plan.prefill], [r.id for r in plan.decode]))
        return plan

    core = EngineCore.for_model(model, num_blocks, block_size, max_running, prefix_caching, max_num_batched_tokens)
    core.warm_up(2)  # no run pays a first call's cost in its time (ids < 0, prompts shorter than a block)
    core.scheduler.planner = recording  # from here on: the warm-up's plans are not recorded
    if prefix_caching:
        core.alloc.queries = core.alloc.hits = 0
    steps, added, token_ms, k = [], {}, {}, 0
    reqs = [r for rs in arrivals.values() for r in rs]
    t0 = time.perf_counter()
    while arrivals or not core.idle:
        for req in arrivals.pop(k, []):
            core.add_request(req)
            added[req.id], token_ms[req.id] = (time.perf_counter() - t0) * 1e3, []
        start = time.perf_counter()
        report = core.step()
        end = time.perf_counter()
        for out in report.outputs:
            token_ms[out.request_id].append((end - t0) * 1e3)
        prefill, decode = plans[-1]
        ms, tokens = (end - start) * 1e3, sum(n for _, n in prefill) + len(decode)
        steps.append({"step": k, "start_ms": (start - t0) * 1e3, "ms": ms, "prefill": prefill, "decode": decode,
                      "tokens": tokens, "made": [out.request_id for out in report.outputs]})  # fmt: skip
        k += 1
    hits, queries = (core.alloc.hits, core.alloc.queries) if prefix_caching else (0, 0)
    return StepRun(steps, added, token_ms, {r.id: list(r.output) for r in reqs}, hits, queries)


def ttft_by_cached_prefix(
    model, prompt_tokens: int = 448, cached: Sequence[int] = (0, 64, 128, 192, 256, 320, 384, 448), rounds: int = 5
):
    """TTFT of a `prompt_tokens`-token prompt arriving at an idle engine with prefix caching, against how many of
    its first tokens an earlier request (its first `k` tokens, one token generated) left in the cache. Each
    measurement is a fresh random prompt on one engine (blocks of 16); rounds interleave the sizes (in turn,
    reversed every other round). Returns (rows, timing.Comparison keyed by k): per k, the tokens the cache
    served (measured), the tokens computed, and the median TTFT."""
    import time

    from ailab.generation.engine_core import EngineCore
    from ailab.generation.request import Request
    from ailab.timing import Comparison

    core = EngineCore.for_model(model, num_blocks=64, block_size=16, max_running=2, prefix_caching=True)
    core.warm_up(2)
    gen = torch.Generator().manual_seed(0)
    samples, served, rid = {k: [] for k in cached}, {}, 0
    for i in range(rounds + 1):  # round 0 is a warm-up: its times are dropped
        for k in cached if i % 2 else list(reversed(cached)):
            prompt = torch.randint(0, model.vocab_size, (prompt_tokens,), generator=gen).tolist()
            if k:
                core.add_request(Request(rid, prompt[:k], 1))  # the earlier request: its blocks stay cached
                core.run_until_idle()
            core.add_request(Request(rid + 1, prompt, 1))
            hits = core.alloc.hits
            t = time.perf_counter()
            core.step()  # the prompt's uncached tokens computed, its first token sampled
            ms = (time.perf_counter() - t) * 1e3
            core.run_until_idle()
            served[k], rid = core.alloc.hits - hits, rid + 2
            if i:
                samples[k].append(ms)
    rows = [
        {"cached": k, "served": served[k], "computed": prompt_tokens - served[k], "ttft_ms": float(np.median(s))}
        for k, s in samples.items()
    ]
    return rows, Comparison(samples)


def chat_trace_run(
    model, prefix_bytes: int, n: int = 16, prompt_bytes: int = 60, output_tokens: int = 16, prefix_caching=True
) -> dict:
    """A chat trace (ailab.traces.make_trace: the same `prefix_bytes` before each of `n` prompts) served with or
    without prefix caching: the first request alone before step 0, the rest before step 1, so that every one
    after the first can find the prefix's blocks (a request admitted in the very step that computes a block
    cannot: blocks are named once written). Returns the run, the hit rate, the shared share of the prompts'
    tokens, the most that blocks of 16 can serve (every request but the first: the prefix's full blocks), and
    the median TTFT."""
    from ailab.generation.trace import as_requests
    from ailab.traces import make_trace

    reqs = as_requests(make_trace(n, prompt_bytes, output_tokens, prefix_bytes=prefix_bytes))
    run = run_by_steps(model, {0: reqs[:1], 1: reqs[1:]}, prefix_caching=prefix_caching, num_blocks=512)
    prompt_tokens = sum(len(r.prompt) for r in reqs)
    return {
        "prefix_bytes": prefix_bytes,
        "run": run,
        "hits": run.hits,
        "queries": run.queries,
        "hit_rate": run.hit_rate,
        "shared_share": prefix_bytes * n / prompt_tokens,
        "full_blocks_hits": (n - 1) * (prefix_bytes // 16) * 16,
        "ttft_p50_ms": float(np.median([run.ttft_ms(r.id) for r in reqs])),
    }


def chat_rounds(model, prefix_bytes: int = 384, rounds: int = 5, **trace) -> list[dict]:
    """chat_trace_run without and with prefix caching, in turn, `rounds` times: one row per run ("round",
    "engine": "off" or "on", the TTFT p50, the hit rate, the tokens), for trace.per_round_ratio."""
    rows = []
    for i in range(rounds):
        for engine in ("off", "on"):
            r = chat_trace_run(model, prefix_bytes, prefix_caching=engine == "on", **trace)
            rows.append({"round": i, "engine": engine, "ttft_p50_ms": r["ttft_p50_ms"], "hit_rate": r["hit_rate"],
                         "outputs": r["run"].outputs})  # fmt: skip
    return rows


def budget_rounds(
    model, arrivals: dict[int, list], decoding: Sequence[int], long: int, budgets=(None, 64), rounds: int = 5
) -> list[dict]:
    """The same arrivals served under each token budget (None: no chunked prefill), in turn, `rounds` times: one
    row per run, for trace.per_round_ratio ("engine": "no budget" or "budget N"). Per run: the gaps between the
    tokens of the `decoding` requests (ITL: their worst, p99 and p50) and their TPOT (mean), the TTFT of the
    `long` prompt in ms and in steps, the run's steps, and every request's tokens."""
    rows = []
    for i in range(rounds):
        for budget in budgets:
            run = run_by_steps(model, arrivals, max_num_batched_tokens=budget)
            itl = run.itl_ms(decoding)
            arrived = next(s["step"] for s in run.steps if s["start_ms"] >= run.added_ms[long])
            made = next(s["step"] for s in run.steps if long in s["made"])
            rows.append(
                {
                    "round": i,
                    "engine": "no budget" if budget is None else f"budget {budget}",
                    "budget": budget,
                    "itl_max_ms": max(itl),
                    "itl_p99_ms": float(np.percentile(itl, 99)),
                    "itl_p50_ms": float(np.percentile(itl, 50)),
                    "tpot_ms": float(np.mean([run.tpot_ms(r) for r in decoding])),
                    "ttft_long_ms": run.ttft_ms(long),
                    "ttft_long_steps": made - arrived + 1,
                    "steps": run.steps,
                    "outputs": run.outputs,
                }
            )
    return rows
