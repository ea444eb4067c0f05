"""`ailab bench memory --json`: estimator accuracy, tracker overhead, leak detection, bandwidth, FLOP/s.

estimator_max_rel_error: max over a (batch, seq_len) grid of |estimate - measured| / measured, where
the measurement is the peak of bytes held by tensors during one MiniLM forward (the CPU allocator's
own accounting via torch.profiler, or max_memory_allocated on CUDA).
"""

from __future__ import annotations

import time

import torch

from ailab import memory, roofline
from ailab.device import describe_hardware, pick_device


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    from ailab.models import load_encoder

    t_start = time.perf_counter()
    dev = pick_device()
    enc = load_encoder(device=dev)
    model = enc.model
    result: dict = {"device": dev.type, "hardware": describe_hardware().one_line(), "quick": quick}

    # 1. estimate vs measured peak activations
    batches = (1, 8, 16) if quick else (1, 2, 4, 8, 16, 32, 64)
    seqs = (32, 128) if quick else (32, 64, 128, 256)
    errors = []
    for b in batches:
        for t in seqs:
            measured = memory.forward_peak(model, b, t)
            estimate = memory.activation_bytes(b, t, memory.EncoderShape.from_config(model.config))
            errors.append(abs(estimate - measured) / measured)
    result["estimator_max_rel_error"] = max(errors)
    result["estimator_grid_points"] = len(errors)
    result["estimator_grid"] = f"batch {batches} x seq_len {seqs}"

    result["estimator_seconds"] = time.perf_counter() - t_start
    # 2. sampler overhead on a forward-pass loop
    inputs = memory.encoder_inputs(4, 32, device=dev) if quick else memory.encoder_inputs(8, 64, device=dev)

    def forward():
        with torch.inference_mode():
            model(**inputs)

    over = memory.sampler_overhead(forward, pairs=6 if quick else 30, calls_per_block=1 if quick else 2)
    result["overhead_seconds"] = time.perf_counter() - t_start
    result["tracker_overhead_frac"] = over["overhead_frac"]
    result["tracker_overhead_median_frac"] = over["overhead_median_frac"]
    result["overhead_forward_median_s"] = over["fn_median_s"]
    result["sampler_cpu_frac"] = over["sampler_cpu_frac"]
    result["sampler_interval_s"] = over["interval_s"]

    # 3. planted leak vs fixed loop
    leak_batch = 4 if quick else 8
    leak_inputs = memory.encoder_inputs(leak_batch, 32, device=dev)
    iters = 10 if quick else 100
    memory.DEBUG_HISTORY.clear()
    leaky = memory.leak_slope(memory.soak(lambda i: memory.leaky_step(model, leak_inputs), iters, dev, warmup=4))
    memory.DEBUG_HISTORY.clear()
    clean = memory.leak_slope(memory.soak(lambda i: memory.fixed_step(model, leak_inputs), iters, dev, warmup=4))
    memory.DEBUG_HISTORY.clear()
    result["planted_leak_detected"] = leaky.leaking
    result["planted_leak_kib_per_iter"] = leaky.slope_bytes_per_iter / 1024
    result["planted_leak_true_kib_per_iter"] = leak_batch * 32 * model.config.hidden_size * 4 / 1024
    result["clean_loop_flagged"] = clean.leaking
    result["clean_loop_kib_per_iter"] = clean.slope_bytes_per_iter / 1024
    result["soak_iters"] = iters
    result["soak_counter"] = (
        "cuda memory_allocated"
        if dev.type == "cuda"
        else ("glibc malloc in use" if memory.malloc_in_use() is not None else "process RSS")
    )

    result["leak_seconds"] = time.perf_counter() - t_start
    # 4. device microbenchmarks
    result["bandwidth_gbps"] = roofline.measure_bandwidth(mib=128 if quick else 256)["bandwidth_gbps"]
    mm = roofline.measure_matmul(sizes=(256, 512) if quick else (128, 256, 512, 1024))
    result["matmul_gflops"] = max(r["gflops"] for r in mm)
    result["matmul_gflops_by_n"] = {str(r["n"]): round(r["gflops"], 2) for r in mm}
    result["wall_s"] = time.perf_counter() - t_start
    return result
