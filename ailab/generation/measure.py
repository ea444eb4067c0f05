"""What the KV cache costs and buys, measured on this machine (notebook 5/01 and `ailab bench generation`).

cache_growth            the cache's memory (VRAM on a GPU: bytes asked for, blocks handed out) at several
                        lengths, beside the formula and the formula rounded to the allocator's blocks
cache_bytes_per_token   bytes the cache's tensors ask for per cached token (slope over two lengths) vs formula
cache_vs_recompute      per-token decode time with the cache vs recomputing the whole prefix, as n grows
prefill_vs_decode       tokens/s of both phases and their arithmetic intensity, for the roofline
paged_waste             KV slots reserved vs used by the real allocator on a mix of lengths
count_ops               tensor operations a call runs (a decode step's are as many at batch 1 as at 16)
"""

from __future__ import annotations

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
