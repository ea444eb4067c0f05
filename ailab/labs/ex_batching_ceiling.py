"""Exercise checks: the batching ceiling from measured batch times (topic S1).

The learner writes one function:
  batching_ceiling(batch_ms) -> {"per_item_ms": {batch: ms}, "ceiling": float, "best_batch": int}
      `batch_ms` maps a batch size to the measured time of one batch of that size (ms). per_item_ms is that time
      over the batch size; best_batch the batch size with the lowest per-item time (the smaller one on a tie);
      ceiling the per-item time at batch 1 over the best per-item time - how much a perfect batcher could ever
      gain over one-at-a-time. Batch 1 missing (or no batch at all) is a ValueError that names batch 1.

The checks are derived from what the function must guarantee:
  per_item_ms: every batch size of the input and only those, time / batch size (not the reverse, not a
      throughput), for sizes no note mentions (3, 48, 128), keys in any order; plain numbers.
  best_batch / ceiling: the lowest per-item time, also when it is not at the largest batch (non-monotone data:
      the largest batch is slower per item than a middle one), ties to the smaller batch whatever the dict's
      order, batch 1 when batching never helps (ceiling 1.0, never below 1), a lone batch 1 (ceiling 1.0);
      the ceiling divides per-item times (not batch times) and uses batch 1 as the baseline (not the first key,
      not the smallest key present).
  errors: no batch 1 is a ValueError that names batch 1 (not a KeyError, not a ceiling taken from another size);
      an empty dict is a ValueError.
"""

from __future__ import annotations

import math

import numpy as np

from ailab.labs.core import answer, check, expect, refused

LAB = "ex_batching_ceiling"


def _run(fn, batch_ms, what):
    before = dict(batch_ms)
    out = answer(fn, batch_ms, what=what)
    expect(
        isinstance(out, dict) and {"per_item_ms", "ceiling", "best_batch"} <= set(out),
        f"{what}: batching_ceiling should return a dict with the keys per_item_ms, ceiling and best_batch; got "
        f"{sorted(out) if isinstance(out, dict) else type(out).__name__}",
    )
    expect(dict(batch_ms) == before, f"{what}: batching_ceiling changed the dict it was given")
    per = out["per_item_ms"]
    expect(
        isinstance(per, dict) and set(per) == set(batch_ms),
        f"{what}: per_item_ms should have one entry per batch size of the input, {sorted(batch_ms)}; got "
        f"{sorted(per) if isinstance(per, dict) else per!r}",
    )
    expect(
        isinstance(out["ceiling"], (int, float)) and not isinstance(out["ceiling"], bool),
        f"{what}: ceiling should be a number; got {out['ceiling']!r}",
    )
    return out


def _close(a, b):
    return math.isclose(float(a), b, rel_tol=1e-9)


@check(LAB, "per_item_ms is each batch's time over its size")
def check_per_item(batching_ceiling):
    batch_ms = {1: 4.0, 8: 12.0, 32: 40.0}
    out = _run(batching_ceiling, batch_ms, "batch_ms {1: 4.0, 8: 12.0, 32: 40.0}")
    per = out["per_item_ms"]
    expect(
        _close(per[1], 4.0) and _close(per[8], 1.5) and _close(per[32], 1.25),
        f"{{1: 4.0, 8: 12.0, 32: 40.0}}: per_item_ms should be {{1: 4.0, 8: 1.5, 32: 1.25}} (the batch's time "
        f"divided by the number of items in it); got {per}",
    )
    batch_ms = {48: 96.0, 3: 9.0, 1: 5.0, 128: 192.0}
    out = _run(batching_ceiling, batch_ms, "batch sizes 48, 3, 1, 128 in that order")
    per = out["per_item_ms"]
    want = {1: 5.0, 3: 3.0, 48: 2.0, 128: 1.5}
    expect(
        all(_close(per[b], v) for b, v in want.items()),
        f"{{48: 96.0, 3: 9.0, 1: 5.0, 128: 192.0}}: per_item_ms should be {want}; got {per} - use each key's own "
        "batch size, whatever the sizes and their order",
    )
    sizes, times = np.array([1, 4, 16]), np.array([4.0, 6.0, 20.0])
    batch_ms = dict(zip(sizes, times))
    out = _run(batching_ceiling, batch_ms, "sizes and times straight from numpy arrays (np.int64: np.float64)")
    expect(
        _close(out["per_item_ms"][4], 1.5) and out["best_batch"] == 16 and _close(out["ceiling"], 3.2),
        "sizes and times from numpy arrays, {1: 4.0, 4: 6.0, 16: 20.0}: per item 4, 1.5 and 1.25 ms, best_batch 16, "
        f"ceiling 3.2; got {out} - numpy's integers and floats are numbers like any other",
    )


@check(LAB, "best_batch has the lowest per-item time; ceiling is batch 1's per-item time over it")
def check_ceiling_and_best(batching_ceiling):
    batch_ms = {1: 10.0, 2: 12.0, 4: 16.0, 8: 24.0, 16: 64.0}
    out = _run(batching_ceiling, batch_ms, "non-monotone: per item 10, 6, 4, 3, then 4 ms at batch 16")
    expect(
        out["best_batch"] == 8,
        f"per-item times 10, 6, 4, 3 and 4 ms at batches 1, 2, 4, 8, 16: best_batch should "
        f"be 8 (the lowest per-item time, not the largest batch); got {out['best_batch']!r}",
    )
    expect(
        _close(out["ceiling"], 10.0 / 3.0),
        f"per item 10 ms at batch 1 and 3 ms at best (batch 8): ceiling should be 10 / 3 = 3.33; got "
        f"{out['ceiling']!r} - per-item time at batch 1 over the best per-item time (the largest batch is not the "
        "best here, and batch times are not per-item times)",
    )
    batch_ms = {16: 80.0, 1: 20.0, 8: 40.0, 4: 24.0}
    out = _run(batching_ceiling, batch_ms, "a tie: batches 16 and 8 both at 5 ms per item (16 listed first)")
    expect(
        out["best_batch"] == 8,
        f"batches 8 and 16 both take 5 ms per item: best_batch should be the smaller, 8 "
        f"(same gain, half the wait to fill it); got {out['best_batch']!r}",
    )
    expect(
        _close(out["ceiling"], 4.0),
        f"20 ms per item at batch 1, 5 at best: ceiling should be 4.0; got "
        f"{out['ceiling']!r} - the baseline is batch 1, wherever it is listed",
    )
    batch_ms = {4: 24.0, 2: 14.0, 1: 6.0}
    out = _run(batching_ceiling, batch_ms, "batching never helps: per item 6, 7, 6 ms")
    expect(
        out["best_batch"] == 1 and _close(out["ceiling"], 1.0),
        f"per item 6 ms at batch 1, 7 at batch 2 and 6 at batch 4: nothing beats batch 1 (batch 4 only ties it), so "
        f"best_batch should be 1 and the ceiling 1.0; got best_batch {out['best_batch']!r}, ceiling "
        f"{out['ceiling']!r} - the ceiling is never below 1",
    )
    out = _run(batching_ceiling, {1: 7.5}, "only batch 1")
    expect(
        out["best_batch"] == 1 and _close(out["ceiling"], 1.0),
        f"with batch 1 alone best_batch should be 1 and the ceiling 1.0; got {out['best_batch']!r}, {out['ceiling']!r}",
    )
    out = _run(batching_ceiling, {2: 3.0, 1: 5.0, 64: 64.0}, "batch 2 listed before batch 1")
    expect(
        _close(out["ceiling"], 5.0) and out["best_batch"] == 64,
        f"{{2: 3.0, 1: 5.0, 64: 64.0}}: per item 1.5, 5 and 1 ms - the baseline is batch 1 (5 ms), the best batch "
        f"64 (1 ms): ceiling 5.0, best_batch 64; got ceiling {out['ceiling']!r}, best_batch {out['best_batch']!r}",
    )


@check(LAB, "no batch 1 is an error that names it")
def check_needs_batch_1(batching_ceiling):
    for batch_ms in ({2: 6.0, 4: 8.0, 8: 12.0}, {}):
        e = refused(
            batching_ceiling,
            batch_ms,
            what=f"batch_ms {batch_ms} has no batch 1",
            should="the ceiling is measured against one-at-a-time, so without batch 1 there is none: raise "
            "ValueError saying so",
        )
        expect(
            "1" in str(e),
            f"batch_ms {batch_ms}: the ValueError should say that batch 1 is missing; its message is {str(e)!r}",
        )
