"""Timing done properly: warm-up excluded, device synced before the clock stops, percentiles not means.

This is the bottom-layer primitive every measurement in ailab uses (engine, quantize, memory,
benchmarks). Lab 0 asks the learner to write the same thing, then compares.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from ailab.device import sync


@dataclass
class LatencyStats:
    """Latency figures in milliseconds over `n` timed runs (warm-up excluded)."""

    n: int
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    min_ms: float

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (f"p50 {self.p50_ms:.2f} ms · p95 {self.p95_ms:.2f} ms · p99 {self.p99_ms:.2f} ms "
                f"(n={self.n}, max {self.max_ms:.2f} ms)")


def latency_stats(samples_ms) -> LatencyStats:
    """Summarise latencies (ms). Refuses an empty or non-finite sample rather than inventing figures."""
    arr = np.asarray(list(samples_ms), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("latency_stats() got no samples: time at least one run")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("latency_stats() got a negative, NaN or infinite latency; check the timer")
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return LatencyStats(int(arr.size), float(p50), float(p90), float(p95), float(p99),
                        float(arr.max()), float(arr.mean()), float(arr.min()))


def measure_latency(fn: Callable[[], object], iters: int = 30, warmup: int = 5,
                    device=None, max_seconds: float | None = None) -> LatencyStats:
    """Call `fn()` `warmup` times untimed, then `iters` times timed; sync the device around each.

    The first calls pay for lazy initialisation (allocator growth, kernel selection, caches); timing
    them would report a cold start as steady-state latency, so they are run and discarded.
    `max_seconds` caps the timed loop (at least 3 runs) so a slow machine still finishes.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"measure_latency needs iters >= 1 and warmup >= 0 (got iters={iters}, warmup={warmup})")
    for _ in range(warmup):
        fn()
    sync(device)
    samples, start = [], time.perf_counter()
    for i in range(iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append((time.perf_counter() - t0) * 1e3)
        if max_seconds is not None and i >= 2 and time.perf_counter() - start > max_seconds:
            break
    return latency_stats(samples)


def ratio(a: float, b: float) -> float:
    """a / b, or nan when b is zero: speed-ups are reported as ratios measured in one run."""
    return a / b if b else math.nan
