"""`ailab bench generation --json`: the generation layer measured (issue 10).

cache bytes       the allocator's bytes per cached token vs 2 x layers x heads x head_dim x itemsize
cache vs none     per-token decode time with the KV cache vs recomputing the prefix, as the context grows
prefill/decode    tokens/s and arithmetic intensity of each phase, against the matmul peak and bandwidth
paged waste       the real block allocator on a log-normal mix of lengths vs reserving the maximum
batching          continuous vs static batching vs Hugging Face generate on one open-loop trace, interleaved
saturated         the same three flat out (every request at once): continuous over static tokens/s; a decode step
                  by batch size, the model's forward ms beside the scheduler's own (plan, block tables, sampling,
                  apply); the share reached of the bound that prices each step at what a decode step of its
                  batch cost in the same run (trace.continuous_bound), and of that bound with each prompt's
                  prefill priced too (measured alone, by length); TPOT p50 over the bare forward; the roofline:
                  the tokens/s the measured matmul peak and bandwidth allow on the same burst, and the share reached
compiled          the decode step under torch.compile beside eager: step cost by batch, and the continuous
                  scheduler flat out on the same burst, in turn (full runs, or --compile)
weight_only       fp32, INT8 and INT4 weights (ailab.quantize.weight_only) on --weight-only-size (default 30m,
                  where the weights outweigh the cache; --size with --quick): decode ms per step at batch 1 and 16
                  in interleaved rounds, speed-ups as medians of per-round ratios, weight bytes per step; and the
                  bits per byte of each on held-out text, for a 1m model trained here (full runs)
step_profile      torch.profiler over a paged decode step of 16 sequences with 64 tokens cached, on
                  --weight-only-size's model (ailab.profiling): self time by part (matmul, attention, KV gather,
                  ...), operator calls per step, the operators that took the most
speculative       greedy speculative decoding, an 8m target and a 1m draft trained here (full runs; random weights
                  with --quick): acceptance and speed-up over plain decoding by k, on held-out text and on random
                  bytes, interleaved rounds per prompt; and prompt lookup (n-gram) at k = 4
"""

from __future__ import annotations

import argparse
import time


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench generation")
    p.add_argument("--size", default="1m", help="tiny_gpt size: 1m, 8m or 30m (default 1m)")
    p.add_argument(
        "--requests", type=int, default=None, help="requests in the arrival trace (default: 8 s of arrivals)"
    )
    p.add_argument("--rate", type=float, default=None, help="arrivals per second (default: 60 %% of a measured rate)")
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="measure the compiled decode step beside the eager one (default: on, off with --quick)",
    )
    p.add_argument(
        "--weight-only-size",
        default=None,
        help="tiny_gpt size for the weight-only section's speeds (default 30m; --size with --quick)",
    )
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench --json generation` prints JSON")
    return p.parse_args(argv or [])


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    import numpy as np

    from ailab import roofline
    from ailab.device import describe_hardware, pick_device
    from ailab.generation import Decoder
    from ailab.generation.measure import (
        cache_bytes_per_token,
        cache_vs_recompute,
        paged_waste,
        prefill_vs_decode,
        request_mix,
    )
    from ailab.generation.trace import (
        arrival_trace,
        compare_batching,
        continuous_bound,
        flat_out_gain,
        prefill_cost_by_length,
        roofline_bound,
        run_scheduler,
        static_occupancy,
        step_cost_by_batch,
    )
    from ailab.models import tiny_gpt

    args = parse_args(argv)
    t0 = time.perf_counter()
    dev = pick_device()  # the roofline below measures this device too: the model must run there
    model = Decoder(tiny_gpt(args.size).to(dev))
    out: dict = {
        "device": dev.type,
        "hardware": describe_hardware().one_line(),
        "model": f"tiny_gpt({args.size!r})",
        "parameters": sum(p.numel() for p in model.hf.parameters()),
    }
    out["cache_bytes"] = cache_bytes_per_token(model)
    out["cache_vs_recompute"] = cache_vs_recompute(
        model, (16, 128) if quick else (16, 64, 128, 256, 448), rounds=3 if quick else 7
    )
    pd = prefill_vs_decode(
        model, prompt=64 if quick else 256, batch=8, decode_steps=8 if quick else 16, rounds=3 if quick else 5
    )
    bw = roofline.measure_bandwidth(mib=128 if quick else 256)["bandwidth_gbps"]
    peak = max(r["gflops"] for r in roofline.measure_matmul(sizes=(512,) if quick else (512, 1024)))
    pd.update(
        bandwidth_gbps=bw,
        matmul_peak_gflops=peak,
        ridge_intensity=peak / bw,
        decode_memory_bound=pd["decode_intensity"] < peak / bw,
    )
    out["prefill_vs_decode"] = pd
    out["paged_waste"] = paged_waste(request_mix(200, seed=0, max_len=1024), block_size=16, max_len=1024)

    probe = arrival_trace(n=16, rate_rps=1e4, seed=1)  # all at once: what the engine serves flat out
    flat_out = run_scheduler(model, probe, "continuous")
    mean_new = sum(r.max_new_tokens for r in probe) / len(probe)
    rate = args.rate or round(0.6 * flat_out["tokens_per_s"] / mean_new, 2)
    # enough requests for about 2 s (quick) or 8 s (full) of arrivals at that rate
    n = args.requests or max(16, int(rate * (2.0 if quick else 8.0)))
    trace = arrival_trace(n=n, rate_rps=rate, seed=0)
    out["batching"] = {
        "rate_rps": rate,
        "requests": n,
        "flat_out_tokens_per_s": flat_out["tokens_per_s"],
        "rows": compare_batching(model, trace, rounds=1 if quick else 2),
    }
    # Flat out: every request arrives at once, so tokens/s is what each policy serves, not what was offered.
    # Static batching holds a batch's seats until its longest member ends; continuous refills them each step.
    burst = arrival_trace(n=16 if quick else 48, rate_rps=1e6, seed=2)
    seats = 8  # compare_batching's default max_running
    rows = compare_batching(model, burst, rounds=1 if quick else 3, max_running=seats)
    cost = step_cost_by_batch(model, (1, seats) if quick else (1, 2, 4, 8, 16))
    continuous = [r for r in rows if r["engine"] == "continuous"]
    # Each continuous run against the bound priced by its own decode steps (trace.continuous_bound): what it lost
    # to prefills, preemptions and the loop around the steps. And its TPOT against the bare forward at full seats.
    bounds = [continuous_bound(burst, r["step_cost_in_run"], seats) for r in continuous]
    # The same bound with each request's prefill priced too, as a forward of its own (measured alone, by prompt
    # length). The executor packs the prompts into the decodes' forward instead (step_paged), so a run can beat this
    # one: a share above 1 is what packing saved over running each prefill apart.
    prefill = prefill_cost_by_length(model, (8, 32, 64, 96), rounds=3 if quick else 7)
    with_prefills = [continuous_bound(burst, r["step_cost_in_run"], seats, prefill_cost=prefill) for r in continuous]
    bare = [next(c["forward_ms"] for c in r["step_cost_in_run"] if c["batch"] == seats) for r in continuous]
    out["saturated"] = {
        "requests": len(burst),
        "rows": rows,
        "continuous_over_static_tokens_per_s": flat_out_gain(rows),
        "continuous_over_static_makespan": flat_out_gain(rows, "tokens_per_s"),
        "bound_if_steps_cost_the_same": 1 / static_occupancy(burst, seats),
        "step_cost": cost,  # per batch size: step_ms = forward_ms + overhead_ms (the scheduler's own)
        # the measured continuous run: the scheduler's own ms per step beside the forward's
        "overhead_ms_per_step": float(np.median([r["overhead_ms_per_step"] for r in continuous])),
        "forward_ms_per_step": float(np.median([r["forward_ms_per_step"] for r in continuous])),
        # the bound that prices every step at what a decode step of its batch cost in the run, and the share of it
        # each run reached (median over rounds); without the scheduler's own time, steps priced at the forward alone
        "bound_tokens_per_s": float(np.median(bounds)),
        "bound_without_overhead_tokens_per_s": float(
            np.median([continuous_bound(burst, r["step_cost_in_run"], seats, "forward_ms") for r in continuous])
        ),
        "share_of_bound": float(np.median([r["tokens_per_s"] / b for r, b in zip(continuous, bounds)])),
        "prefill_cost": prefill,
        "bound_with_prefills_tokens_per_s": float(np.median(with_prefills)),
        "share_of_bound_with_prefills": float(
            np.median([r["tokens_per_s"] / b for r, b in zip(continuous, with_prefills)])
        ),
        # what the runs lost against the decode-priced bound, as shares of their time (medians): the admitting steps'
        # cost beyond a decode step of as many rows (the prompts), and the time between steps
        "lost_to_prompts": float(np.median([r["prompt_extra_ms"] / (r["seconds"] * 1e3) for r in continuous])),
        "lost_between_steps": float(np.median([r["between_steps_ms"] / (r["seconds"] * 1e3) for r in continuous])),
        # TPOT p50 over the bare forward of a decode step at full seats, in the same run (target: <= 1.25)
        "bare_step_ms": float(np.median(bare)),
        "tpot_over_bare_step": float(np.median([r["tpot_p50_ms"] / b for r, b in zip(continuous, bare)])),
    }
    # The machine's own limit on the same burst: every step priced at its FLOPs over the matmul peak or its bytes
    # over the bandwidth, whichever is slower (trace.roofline_bound), and the share of it the runs reached.
    roof = roofline_bound(burst, model, seats, peak, bw)
    roof["share_reached"] = float(np.median([r["tokens_per_s"] / roof["tokens_per_s"] for r in continuous]))
    out["saturated"]["roofline"] = roof
    if args.compile if args.compile is not None else not quick:
        out["compiled"] = compiled_vs_eager(model, burst, seats, cost, rounds=1 if quick else 3)
    out["weight_only"] = weight_only(args.weight_only_size or (args.size if quick else "30m"), quick, dev)
    out["step_profile"] = step_profile(args.weight_only_size or (args.size if quick else "30m"), dev)
    out["speculative"] = speculative(quick, dev)
    out["seconds"] = time.perf_counter() - t0
    return out


def weight_only(size: str, quick: bool, dev) -> dict:
    """Decode speed by batch for fp32, INT8 and INT4 weights of tiny_gpt(size), and (full runs) the bits per byte
    each costs a 1m model trained here for 100 steps (random weights have no bits per byte worth reading)."""
    from ailab.generation.train import corpus, train_lm
    from ailab.models import tiny_gpt
    from ailab.quantize.decoder_report import quantized_variants, weight_only_report

    kernel = "aten" if dev.type == "cpu" else "plain"  # PyTorch's weight-only kernels used here are CPU-only
    model = tiny_gpt(size).to(dev)
    out = weight_only_report(
        model, quantized_variants(model, kernel=kernel), batches=(1,) if quick else (1, 16), rounds=3 if quick else 7
    )
    out["model"], out["kernel"] = f"tiny_gpt({size!r})", kernel
    if not quick:
        trained = train_lm("1m", steps=100, max_seconds=None).model.to(dev)
        report = weight_only_report(
            trained, quantized_variants(trained, kernel=kernel), batches=(), held_out=corpus("test").to(dev)
        )
        out["bits_per_byte_1m_trained"] = {name: row["bits_per_byte"] for name, row in report["variants"].items()}
    return out


def step_profile(size: str, dev, seats: int = 16) -> dict:
    """Where a decode step of tiny_gpt(size) spends its time, from torch.profiler's operator table."""
    import torch

    from ailab.generation import Decoder, PagedKVCache
    from ailab.generation.decode import decode_paged
    from ailab.models import tiny_gpt
    from ailab.profiling import profile_steps

    model = Decoder(tiny_gpt(size).to(dev))
    pool = PagedKVCache.for_model(model, 256, 16)
    for i in range(seats):
        pool.allocator.allocate(i, 64)
    view, token = pool.view(list(range(seats)), 1), torch.zeros(seats, 1, dtype=torch.long, device=dev)
    with torch.inference_mode():
        report = profile_steps(lambda: decode_paged(model, view, token), steps=5, label="decode_step", device=dev)
    return {
        "model": f"tiny_gpt({size!r})",
        "seats": seats,
        "self_ms_per_step": report.self_ms_per_step,
        "step_ms_profiled": report.ranges.get("decode_step"),
        "shares": report.shares,
        "calls_per_step": report.calls_per_step,
        "top": [vars(r) for r in report.rows[:8]],
    }


def speculative(quick: bool, dev) -> dict:
    """Acceptance and speed-up by k for greedy speculative decoding at batch 1 (ailab.generation.speculative)."""
    import torch

    from ailab.generation import Decoder
    from ailab.generation.speculative import DraftProposer, NgramProposer, speculation_by_k
    from ailab.generation.train import corpus, train_lm
    from ailab.models import tiny_gpt

    if quick:
        target, draft = Decoder(tiny_gpt("1m", seed=1).to(dev)), Decoder(tiny_gpt("1m", seed=2).to(dev))
    else:
        target = Decoder(train_lm("8m", steps=60, max_seconds=None).model.to(dev))
        draft = Decoder(train_lm("1m", steps=60, max_seconds=None).model.to(dev))
    held = corpus("test")
    n = 1 if quick else 4
    prompts = {
        "held-out text": [held[i * 700 : i * 700 + 32][None].to(dev) for i in range(n)],
        "random bytes": [
            torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(i)).to(dev) for i in range(n)
        ],
    }
    ks = (2,) if quick else (1, 2, 4, 8)
    proposers = {f"draft k={k}": (lambda: DraftProposer(draft), k) for k in ks}
    proposers["ngram k=4"] = (NgramProposer, 4)
    rows = speculation_by_k(target, proposers, prompts, new_tokens=8 if quick else 64, rounds=1 if quick else 3)
    return {"target": "tiny_gpt('8m')" if not quick else "tiny_gpt('1m')", "draft": "tiny_gpt('1m')", "rows": rows}


def compiled_vs_eager(model, burst, seats: int, eager_cost: list[dict], rounds: int) -> dict:
    """The decode step compiled (ailab.generation.compiled) beside the eager one: its cost by batch size, and the
    continuous scheduler flat out on the same burst, eager and compiled in turn."""
    import numpy as np

    from ailab.generation.trace import compare_compiled, flat_out_gain, step_cost_by_batch

    t0 = time.perf_counter()
    cost = step_cost_by_batch(model, [r["batch"] for r in eager_cost], compile=True)  # its warm-up compiles
    rows = compare_compiled(model, burst, rounds=rounds, max_running=seats)
    eager = {r["batch"]: r for r in eager_cost}
    return {
        "mode": "reduce-overhead" if model.device.type == "cuda" else "default",
        "seconds_with_compilation": time.perf_counter() - t0,
        "step_cost": cost,
        "compiled_over_eager_step_ms": {r["batch"]: r["step_ms"] / eager[r["batch"]]["step_ms"] for r in cost},
        "rows": rows,
        "compiled_over_eager_tokens_per_s": flat_out_gain(rows, "tokens_per_s", ("compiled", "eager")),
        "tpot_p50_ms": {
            e: float(np.median([r["tpot_p50_ms"] for r in rows if r["engine"] == e])) for e in ("eager", "compiled")
        },
    }
