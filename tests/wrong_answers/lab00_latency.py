"""Independent wrong answers for lab00_latency, written from labs/0_orientation/lab00_latency.ipynb's contract alone."""

import statistics
import time

import numpy as np


def measure_latency(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}


def whole_milliseconds(fn, sync=lambda: None, warmup=5, iters=30):
    """Converts each sample to whole milliseconds with integer division of microseconds, dropping the fraction."""
    # differs on: fn taking 1.5 ms per call (fake clock) -> right p50 1.5, wrong 1.0
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(int((time.perf_counter() - t0) * 1e6) // 1000)
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}


def statistics_quantiles(fn, sync=lambda: None, warmup=5, iters=30):
    """Takes the percentiles from statistics.quantiles (exclusive method), which needs two samples and interpolates
    differently from np.percentile."""
    # differs on: samples 1..10 ms -> right p95 9.55, wrong 10.45; iters=1 raises StatisticsError
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    cuts = statistics.quantiles(samples, n=100)
    return {"p50_ms": float(cuts[49]), "p95_ms": float(cuts[94]), "p99_ms": float(cuts[98]), "n": len(samples)}


def at_least_one_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    """Always makes at least one warm-up call, even when the caller asks for warmup=0."""
    # differs on: warmup=0, iters=3 -> right calls fn 3 times, wrong 4 times
    for _ in range(max(warmup, 1)):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}


def skips_failed_calls(fn, sync=lambda: None, warmup=5, iters=30):
    """Catches an exception from a timed call and leaves that call out of the samples, so a broken run still
    reports numbers."""
    # differs on: fn that raises RuntimeError on its 8th call -> right raises, wrong returns n=29
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        try:
            fn()
            sync()
        except Exception:
            continue
        samples.append((time.perf_counter() - t0) * 1e3)
    if not samples:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "n": 0}
    p50, p95, p99 = np.percentile(samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(samples)}


_samples = []


def samples_kept_between_calls(fn, sync=lambda: None, warmup=5, iters=30):
    """Keeps the samples in a module-level list, so a second call's percentiles and n include the first call's."""
    # differs on: two calls with iters=3 -> right n=3 on the second call, wrong n=6
    for _ in range(warmup):
        fn()
    sync()
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        _samples.append((time.perf_counter() - t0) * 1e3)
    p50, p95, p99 = np.percentile(_samples, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(_samples)}


RIGHT = {"measure": measure_latency}  # the checks take the timer as `measure`
WRONG = [
    ("measure", whole_milliseconds, "units/rounding"),
    ("measure", statistics_quantiles, "units/rounding"),
    ("measure", at_least_one_warmup, "boundaries"),
    ("measure", skips_failed_calls, "error handling"),
    ("measure", samples_kept_between_calls, "state"),
]
