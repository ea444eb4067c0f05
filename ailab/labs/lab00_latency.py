"""Lab 0 checks: a latency timer that excludes warm-up, syncs the device and reports percentiles.

The learner writes `measure_latency(fn, sync=..., warmup=5, iters=30) -> dict` returning
p50_ms, p95_ms, p99_ms and n. Each check feeds it a function whose true latency we control
(sleeps), so a wrong timer gives a wrong number we can detect, whatever the machine's speed.
"""
from __future__ import annotations

import threading
import time

from ailab.labs.core import check, expect

LAB = "lab00_latency"
KEYS = ("p50_ms", "p95_ms", "p99_ms", "n")


def _result(measure, fn, **kwargs) -> dict:
    out = measure(fn, **kwargs)
    expect(isinstance(out, dict), f"measure_latency should return a dict with keys {KEYS}, got {type(out).__name__}")
    missing = [k for k in KEYS if k not in out]
    expect(not missing, f"the result is missing {missing}; return a dict with keys {KEYS}")
    return out


@check(LAB, "returns one sample per timed run")
def check_counts_runs(measure):
    calls = []
    out = _result(measure, lambda: calls.append(1), warmup=3, iters=12)
    expect(len(calls) == 15, f"with warmup=3 and iters=12, fn should be called 15 times; it was called {len(calls)}")
    expect(out["n"] == 12, f"n should count the 12 timed runs only (not warm-up); got n={out['n']}")


@check(LAB, "excludes warm-up")
def check_excludes_warmup(measure):
    state = {"calls": 0}

    def cold_then_fast():  # the first 3 calls pay a 60 ms cold start, like lazy initialisation
        state["calls"] += 1
        time.sleep(0.060 if state["calls"] <= 3 else 0.002)

    out = _result(measure, cold_then_fast, warmup=5, iters=20)
    expect(out["p99_ms"] < 30, f"p99 is {out['p99_ms']:.1f} ms, but after warm-up every call takes ~2 ms: "
                               "the cold-start calls were timed. Run fn `warmup` times before starting to time.")


@check(LAB, "reports percentiles, not the mean")
def check_percentiles(measure):
    state = {"calls": 0}

    def mostly_fast():  # 1 call in 10 is slow (a GC pause, a queue): p50 ~2 ms, p99 ~40 ms, mean ~6 ms
        state["calls"] += 1
        time.sleep(0.040 if state["calls"] % 10 == 0 else 0.002)

    out = _result(measure, mostly_fast, warmup=0, iters=40)
    expect(out["p50_ms"] < 4.5, f"p50 is {out['p50_ms']:.1f} ms, but 9 of 10 calls take ~2 ms: is it a mean? "
                                "The median (np.percentile(samples, 50)) ignores the rare slow calls.")
    expect(out["p99_ms"] > 30, f"p99 is {out['p99_ms']:.1f} ms, but 1 call in 10 takes ~40 ms: p99 must show them")
    expect(out["p50_ms"] <= out["p95_ms"] <= out["p99_ms"], "percentiles must satisfy p50 <= p95 <= p99")


@check(LAB, "syncs the device before stopping the clock")
def check_syncs(measure):
    # Like a CUDA launch: fn() returns at once and the work finishes later; sync() waits for it.
    pending: list[threading.Thread] = []

    def launch():
        t = threading.Thread(target=time.sleep, args=(0.010,))
        t.start()
        pending.append(t)

    def sync():
        while pending:
            pending.pop().join()

    out = _result(measure, launch, sync=sync, warmup=2, iters=15)
    expect(out["p50_ms"] > 8, f"p50 is {out['p50_ms']:.2f} ms, but each call's work takes 10 ms to finish: "
                              "call sync() after fn() and before reading the clock.")
