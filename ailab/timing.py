"""Timing done properly: warm-up excluded, device synced before the clock stops, percentiles not means.

This is the bottom-layer primitive every measurement in ailab uses (engine, quantize, memory,
benchmarks). Lab 0 asks the learner to write the same thing, then compares.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import numpy as np


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
        return (
            f"p50 {self.p50_ms:.2f} ms · p95 {self.p95_ms:.2f} ms · p99 {self.p99_ms:.2f} ms "
            f"(n={self.n}, max {self.max_ms:.2f} ms)"
        )


def latency_stats(samples_ms) -> LatencyStats:
    """Summarise latencies (ms). Refuses an empty or non-finite sample rather than inventing figures."""
    arr = np.asarray(list(samples_ms), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("latency_stats() got no samples: time at least one run")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("latency_stats() got a negative, NaN or infinite latency; check the timer")
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return LatencyStats(
        int(arr.size),
        float(p50),
        float(p90),
        float(p95),
        float(p99),
        float(arr.max()),
        float(arr.mean()),
        float(arr.min()),
    )


def measure_latency(
    fn: Callable[[], object], iters: int = 30, warmup: int = 5, device=None, max_seconds: float | None = None
) -> LatencyStats:
    """Call `fn()` `warmup` times untimed, then `iters` times timed; sync the device around each.

    The first calls pay for lazy initialisation (allocator growth, kernel selection, caches); timing
    them would report a cold start as steady-state latency, so they are run and discarded.
    `max_seconds` caps the timed loop (at least 3 runs) so a slow machine still finishes.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"measure_latency needs iters >= 1 and warmup >= 0 (got iters={iters}, warmup={warmup})")
    # Imported here: the load generator's child process imports this module for latency_stats alone, and
    # importing torch (through ailab.device) would add ~1.5 s and ~300 MB to every load test it runs.
    from ailab.device import sync

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


@dataclass
class Comparison:
    """Several functions timed in interleaved rounds: raw samples (ms) per key, one per round each."""

    samples: dict[str, list[float]]

    @property
    def stats(self) -> dict[str, LatencyStats]:
        return {k: latency_stats(v) for k, v in self.samples.items()}

    def paired_ratios(self, a: str, b: str, scale: float = 1.0) -> np.ndarray:
        """Per round, scale * time(a) / time(b). Both ran back to back in that round, under the same load."""
        return scale * np.asarray(self.samples[a]) / np.asarray(self.samples[b])

    def ratio(self, a: str, b: str, scale: float = 1.0) -> float:
        """The median of the paired ratios: what one burst of load elsewhere cannot move much."""
        return float(np.median(self.paired_ratios(a, b, scale)))

    def ratio_spread(self, a: str, b: str, scale: float = 1.0) -> tuple[float, float]:
        """The 10th and 90th percentiles of the paired ratios: how far a single round strays."""
        lo, hi = np.percentile(self.paired_ratios(a, b, scale), [10, 90])
        return float(lo), float(hi)


def interleaved(
    fns: Mapping[str, Callable[[], object]],
    rounds: int = 10,
    warmup: int = 2,
    device=None,
    max_seconds: float | None = None,
) -> Comparison:
    """Time several functions in rounds (a, b, c, a, b, c, ...), each call synced, warm-up excluded.

    On a shared machine the load drifts; timing one function after the other would charge a busy
    minute to whichever ran in it. In rounds every function meets the same conditions, so a ratio
    taken per round and then its median is fair on a quiet laptop and beside a busy neighbour alike.
    `max_seconds` caps the timed rounds (at least 3 run).
    """
    if rounds < 1 or warmup < 0 or not fns:
        raise ValueError(
            f"interleaved() needs functions, rounds >= 1 and warmup >= 0 (got {len(fns)} functions, "
            f"rounds={rounds}, warmup={warmup})"
        )
    from ailab.device import sync  # not at the top: see measure_latency

    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync(device)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    for i in range(rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync(device)
            samples[key].append((time.perf_counter() - t0) * 1e3)
        if max_seconds is not None and i >= 2 and time.perf_counter() - start > max_seconds:
            break
    return Comparison(samples)


def ratio(a: float, b: float) -> float:
    """a / b, or nan when b is zero: speed-ups are reported as ratios measured in one run."""
    return a / b if b else math.nan
