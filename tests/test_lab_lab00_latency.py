"""Lab 0's checks pass the right timer and reject plausible wrong ones."""
import time

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab00_latency as L


def right(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    sync()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        s.append((time.perf_counter() - t0) * 1e3)
    p50, p95, p99 = np.percentile(s, [50, 95, 99])
    return {"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "n": len(s)}


def no_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, sync, 0, iters + warmup) | {"n": iters}


def mean_everywhere(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        s.append((time.perf_counter() - t0) * 1e3)
    m = float(np.mean(s))
    return {"p50_ms": m, "p95_ms": m, "p99_ms": m, "n": iters}


def no_sync(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, lambda: None, warmup, iters)


def counts_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, sync, warmup, iters) | {"n": warmup + iters}


def test_right_answer_passes_every_check():
    for c in (L.check_counts_runs, L.check_excludes_warmup, L.check_percentiles, L.check_syncs):
        c(right)


@pytest.mark.parametrize("check, wrong", [
    (L.check_excludes_warmup, no_warmup),
    (L.check_percentiles, mean_everywhere),
    (L.check_syncs, no_sync),
    (L.check_counts_runs, counts_warmup),
])
def test_wrong_answers_fail(check, wrong):
    with pytest.raises(LabCheckFailed):
        check(wrong)


def test_a_timer_that_returns_the_wrong_type_gets_a_message():
    with pytest.raises(LabCheckFailed, match="should return a dict"):
        L.check_counts_runs(lambda fn, **kw: 3.0)
