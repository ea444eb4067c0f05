"""What weight-only quantization buys a decoder and what it costs: decode speed by batch, bytes per step, bits per byte.

    weight_only_report(gpt, batches=(1, 16))   fp32, INT8 and INT4 copies of one tiny_gpt, their decode steps timed
                                               in interleaved rounds (ailab.timing.interleaved), each speed-up the
                                               median of per-round ratios against fp32, with its spread
    bits_per_byte(gpt, held_out)               the next-byte cross-entropy on held-out text, in bits: the accuracy
                                               gate's measure (a rise of 0.01 is 0.7 % more bits for the same text)

The speed-up depends on the batch: at batch 1 a step reads every weight for one token, so fewer bytes is less
time; at batch 16 the same bytes serve 16 tokens, the step is closer to arithmetic-bound, and the kernels that
unpack the codes compete with fp32's tuned GEMM.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ailab.quantize.weight_only import linear_weight_bytes, quantize_decoder

VARIANTS = {"fp32": None, "int8": ("int8", 32), "int4": ("int4", 32)}  # name: (scheme, group size)


def quantized_variants(hf_model, names=tuple(VARIANTS), kernel: str = "aten") -> dict:
    """{name: GPT2LMHeadModel}: the fp32 model itself and a weight-only copy per scheme named in VARIANTS."""
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    return {
        n: hf_model if VARIANTS[n] is None else quantize_decoder(hf_model, VARIANTS[n][0], VARIANTS[n][1], kernel)
        for n in names
    }


@torch.no_grad()
def bits_per_byte(hf_model, held_out: torch.Tensor, block: int = 128, windows: int = 64) -> float:
    """Mean next-byte cross-entropy over evenly spaced windows of `held_out`, in bits."""
    from ailab.generation.train import held_out_loss

    return held_out_loss(hf_model, held_out, block, windows) / math.log(2)


def _decode_steps(decoder, batch: int, context: int, steps: int):
    """A function that runs `steps` decode steps for `batch` sequences of `context` cached tokens (the cache is
    rewound each call, so every call does the same work)."""
    from ailab.generation import KVCache, decode_one_token, prefill

    g = torch.Generator().manual_seed(0)
    cache = KVCache.for_model(decoder, batch, context + steps)
    prompt = torch.randint(0, decoder.vocab_size, (batch, context), generator=g).to(decoder.device)  # (B, T)
    prefill(decoder, cache, prompt)
    token = torch.randint(0, decoder.vocab_size, (batch, 1), generator=g).to(decoder.device)  # (B, 1)

    def run():
        cache.length = context
        for _ in range(steps):
            decode_one_token(decoder, cache, token)

    return run


def weight_only_report(
    hf_model,
    variants: dict | None = None,
    batches=(1, 16),
    context: int = 64,
    steps: int = 8,
    rounds: int = 7,
    held_out: torch.Tensor | None = None,
) -> dict:
    """Decode ms per step by batch for each variant, timed in interleaved rounds, with the bytes of the linear
    weights a step reads and (given `held_out` text as byte values) the bits per byte of each."""
    from ailab.generation import Decoder
    from ailab.timing import interleaved

    variants = variants or quantized_variants(hf_model)
    if "fp32" not in variants:
        raise ValueError("the report compares against fp32: pass the unquantized model as variants['fp32']")
    fp32_bytes = linear_weight_bytes(variants["fp32"])
    rows = {}
    for name, model in variants.items():
        nbytes = linear_weight_bytes(model)
        rows[name] = {
            "weight_bytes": nbytes,
            "bytes_vs_fp32": nbytes / fp32_bytes,
            "bits_per_weight": 32 * nbytes / fp32_bytes,
        }
        if held_out is not None:
            rows[name]["bits_per_byte"] = bits_per_byte(model, held_out)
    by_batch = {}
    for batch in batches:
        fns = {name: _decode_steps(Decoder(m), batch, context, steps) for name, m in variants.items()}
        comparison = interleaved(fns, rounds=rounds, warmup=1, device=Decoder(variants["fp32"]).device)
        entry = {}
        for name in variants:
            ms = float(np.median(comparison.samples[name])) / steps
            low, high = comparison.ratio_spread("fp32", name)
            entry[name] = {
                "step_ms": ms,
                "tokens_per_s": batch * 1e3 / ms,
                "speedup": comparison.ratio("fp32", name),  # median of per-round fp32 / this
                "speedup_spread": [low, high],
            }
        by_batch[str(batch)] = entry
    return {"context": context, "steps_per_round": steps, "rounds": rounds, "variants": rows, "by_batch": by_batch}
