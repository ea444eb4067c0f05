"""What watching memory costs: the background sampler's slowdown of a forward pass, measured in
interleaved blocks with the sampler on and off (`ailab bench memory` reports it)."""

from __future__ import annotations

import statistics
import time

from ailab.memory.tracker import MemoryTracker


def sampler_overhead(fn, pairs: int = 12, calls_per_block: int = 3, interval_s: float = 0.05) -> dict:
    """How much the background sampler slows `fn` (a forward pass): interleaved A/B blocks.

    Blocks with and without a running sampler alternate (AB BA AB ...), so drift on a shared machine
    hits both arms. Two estimates are returned: `overhead_frac` compares each arm's fastest call
    (timeit's convention: the least-disturbed run shows the cost that is always paid), and
    `overhead_median_frac` is the median of per-pair ratios (it also carries scheduling noise: on a
    loaded machine its spread can be tens of percent). `sampler_cpu_frac` is the sampler's own CPU
    time over the sampled wall time, which does not depend on noise in `fn` at all.
    """
    if pairs < 2 or calls_per_block < 1:
        raise ValueError(f"pairs must be >= 2 and calls_per_block >= 1 (got {pairs}, {calls_per_block})")

    fn()  # warm-up outside the measurement
    ratios, cpu, wall = [], 0.0, 0.0
    calls: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(pairs):
        block = {}
        for arm in ("off", "on") if i % 2 == 0 else ("on", "off"):
            tracker = MemoryTracker(interval_s=interval_s, python_heap=False, sample=(arm == "on"))
            if arm == "on":
                tracker.wait_ready()  # time the sampling, not the sampler's start-up
            t_block = time.perf_counter()
            for _ in range(calls_per_block):
                t0 = time.perf_counter()
                fn()
                calls[arm].append(time.perf_counter() - t0)
            block[arm] = time.perf_counter() - t_block
            tracker.stop()
            if arm == "on":
                cpu += tracker.sampler_cpu_s
                wall += block[arm]
        ratios.append(block["on"] / block["off"])
    return {
        "overhead_frac": min(calls["on"]) / min(calls["off"]) - 1,
        "overhead_median_frac": statistics.median(ratios) - 1,
        "sampler_cpu_frac": cpu / wall if wall else 0.0,
        "pairs": pairs,
        "interval_s": interval_s,
        "fn_median_s": statistics.median(calls["off"]),
    }
