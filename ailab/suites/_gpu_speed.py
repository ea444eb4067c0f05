"""The GPU suite's speed sections (`ailab bench gpu`, ailab/suites/gpu.py runs them), on _gpu_memory's Ctx:

precision         fp16 / bf16 vs fp32: interleaved timing (ailab.timing.interleaved), cosine / max-abs error
batching_ceiling  per-item latency at batch 1 vs larger batches: how much batching can buy at most
generation        KV cache VRAM vs the formula, decode step cost by batch, continuous vs static batching
"""

from __future__ import annotations

from ailab.suites._gpu_memory import NO_CUDA, Ctx, mib, skipped


def sec_precision(ctx: Ctx) -> dict:
    """fp16 / bf16 against fp32: speed (interleaved rounds, paired ratios) and output error."""
    from ailab.device import bf16_supported, fp16_supported

    if not ctx.cuda:
        return skipped(
            f"{NO_CUDA}: the fp16/bf16 speed-up measured here is the tensor cores' (the GPU branch); "
            f"this CPU has fast bf16={bf16_supported('cpu')}, fast fp16={fp16_supported('cpu')} "
            "(AVX512-BF16/AMX), and the course's CPU counterpart is INT8 through ONNX Runtime"
        )
    import numpy as np
    import torch

    from ailab.engine.runners import TorchRunner
    from ailab.memory import encoder_inputs, param_bytes
    from ailab.timing import interleaved

    dev = ctx.device
    precisions = ["fp32"] + [p for p, ok in (("fp16", fp16_supported(dev)), ("bf16", bf16_supported(dev))) if ok]
    runners = {p: TorchRunner(ctx.model, device=dev, precision=p, name=p) for p in precisions}
    shapes = [(1, 128), (64, 128)] if ctx.quick else [(1, 128), (32, 128), (128, 128)]
    out = {
        "precisions": precisions,
        "fp32_matmul_precision": torch.get_float32_matmul_precision(),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "weights_mib": {p: mib(param_bytes(r.model)) for p, r in runners.items()},
        "shapes": [],
    }
    for batch, seq in shapes:
        inputs = encoder_inputs(batch, seq, device=dev)
        outs = {p: r.run(inputs) for p, r in runners.items()}  # (B, 384) float32 numpy, L2-normalised

        def fwd(model, inputs):
            def call():
                with torch.inference_mode():
                    return model(**inputs)

            return call

        cmp = interleaved(
            {p: fwd(r.model, inputs) for p, r in runners.items()},
            rounds=15 if ctx.quick else 40,
            warmup=3,
            device=dev,
            max_seconds=8 if ctx.quick else 25,
        )
        stats = cmp.stats
        row = {
            "batch": batch,
            "seq_len": seq,
            "rounds": stats["fp32"].n,
            "p50_ms": {p: round(s.p50_ms, 4) for p, s in stats.items()},
            "speedup_vs_fp32": {},
            "error_vs_fp32": {},
        }
        ref = outs["fp32"].astype(np.float64)
        for p in precisions[1:]:
            lo, hi = cmp.ratio_spread("fp32", p)
            row["speedup_vs_fp32"][p] = {
                "median": round(cmp.ratio("fp32", p), 3),
                "p10": round(lo, 3),
                "p90": round(hi, 3),
            }
            got = outs[p].astype(np.float64)
            cos = (ref * got).sum(1) / np.maximum(np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1), 1e-12)
            row["error_vs_fp32"][p] = {
                "cosine_mean": float(cos.mean()),
                "cosine_min": float(cos.min()),
                "max_abs": float(np.abs(ref - got).max()),
            }
        out["shapes"].append(row)
        del inputs
    out["timed"] = "the forward alone (inputs already on the GPU), synced per call; error from TorchRunner.run outputs"
    return out


def sec_batching_ceiling(ctx: Ctx) -> dict:
    """Per-item time at batch 1 vs larger batches, interleaved: the most a batcher can ever gain."""
    import torch

    from ailab.memory import encoder_inputs
    from ailab.timing import interleaved

    dev = ctx.device
    if ctx.cuda:
        seq, sizes = 128, (1, 32, 128)
        rounds, max_s = (15, 10) if ctx.quick else (40, 30)
    else:
        seq, sizes = (16, (1, 16)) if ctx.quick else (32, (1, 8, 32))
        rounds, max_s = (3, 2) if ctx.quick else (8, 12)
    model = ctx.model

    def fwd(batch):
        inputs = encoder_inputs(batch, seq, device=dev)

        def call():
            with torch.inference_mode():
                return model(**inputs)

        return call

    cmp = interleaved(
        {f"b{b}": fwd(b) for b in sizes}, rounds=rounds, warmup=1 if ctx.quick else 2, device=dev, max_seconds=max_s
    )
    stats = cmp.stats
    rows = []
    for b in sizes:
        s = stats[f"b{b}"]
        rows.append(
            {
                "batch": b,
                "batch_p50_ms": round(s.p50_ms, 4),
                "per_item_ms": round(s.p50_ms / b, 5),
                "items_per_s": round(1e3 * b / s.p50_ms, 1),
                # per round: b * time(batch 1) / time(batch b), then the median (ailab.timing.Comparison)
                "speedup_per_item_vs_b1": round(cmp.ratio("b1", f"b{b}", scale=b), 3),
            }
        )
    return {
        "device": ctx.device.type,
        "seq_len": seq,
        "rounds": stats["b1"].n,
        "rows": rows,
        "batching_ceiling": rows[-1]["speedup_per_item_vs_b1"],
        "at_batch": sizes[-1],
    }


def sec_generation(ctx: Ctx) -> dict:
    """Issue 10's GPU view: the KV cache's VRAM at several lengths against the formula, a decode step's cost by
    batch size, and continuous over static batching flat out, on the same scheduler code as notebook 5/02."""
    import torch

    from ailab.generation import Decoder
    from ailab.generation.measure import cache_bytes_per_token, cache_growth
    from ailab.generation.trace import (
        arrival_trace,
        compare_batching,
        flat_out_gain,
        static_occupancy,
        step_cost_by_batch,
    )
    from ailab.models import tiny_gpt

    dev = ctx.device
    ctx.release()
    # The cache in the dtype a GPU serves in (fp16), of the largest tiny_gpt; fp32 of the smallest on a CPU.
    big = Decoder(tiny_gpt("30m" if ctx.cuda else "1m").to(dev, torch.float16 if ctx.cuda else torch.float32))
    lengths = (64, 128, 256, 448) if ctx.cuda and not ctx.quick else (64, 448)
    growth = cache_growth(big, lengths, batch=32 if ctx.cuda else 4)
    per_token = cache_bytes_per_token(big, (lengths[0], lengths[-1]), batch=32 if ctx.cuda else 4)
    del big
    ctx.release()

    model = Decoder(tiny_gpt("1m").to(dev))
    if ctx.cuda:
        batches, seats, n, rounds = (1, 8, 32, 64), 32, 128, 1 if ctx.quick else 3
    else:
        batches, seats, n, rounds = (1, 8), 8, 16, 1
    steps = step_cost_by_batch(model, batches, rounds=2 if ctx.quick else 3)
    # Prompts cut from random bytes: the weights are random too, and scheduling does not read the tokens.
    text = torch.randint(0, 256, (20_000,), generator=torch.Generator().manual_seed(0))
    burst = arrival_trace(n=n, rate_rps=1e6, seed=2, text=text)
    rows = compare_batching(model, burst, rounds=rounds, max_running=seats, num_blocks=max(256, seats * 16))
    keep = ("round", "engine", "tokens_per_s", "saturated_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms")
    return {
        "device": dev.type,
        "cache": {
            "model": "tiny_gpt('30m') fp16" if ctx.cuda else "tiny_gpt('1m') fp32",
            "bytes_per_token": per_token,
            "growth": growth,
        },
        "step_cost": steps,
        "seats": seats,
        "requests": n,
        "rows": [{k: r.get(k) for k in keep} for r in rows],
        "continuous_over_static_tokens_per_s": flat_out_gain(rows),
        "bound_if_steps_cost_the_same": 1 / static_occupancy(burst, seats),
    }
