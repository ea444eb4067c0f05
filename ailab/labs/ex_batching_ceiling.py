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
  against a reference (_reference_batching_ceiling, the contract written out), over Hypothesis-drawn dicts: sizes in
      any order, beyond 2**31, batch 1 missing; exact ties and near-ties a thousandth apart, random and whole-ms
      times; numpy np.int64 sizes and times; the dict it was given left as it was, nothing kept between calls.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ailab.labs.core import answer, check, expect, refused
from ailab.labs.differential import close, exactly, same_as_reference, short

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
            re.search(r"(?<![\d.])1(?![\d.])", str(e)) is not None,  # 1 itself, not the 1 of 16 or 12.0
            f"batch_ms {batch_ms}: the ValueError should say that batch 1 is missing; its message is {str(e)!r}",
        )


# --------------------------------------------------------------------------- against a reference, over drawn inputs


def _reference_batching_ceiling(batch_ms):
    """The contract, written out: per-item time = batch time / size; the best is the lowest, the smaller on a tie."""
    if 1 not in batch_ms:
        sizes = sorted(int(b) for b in batch_ms)
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sizes})")
    per_item = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per_item), key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


# Batch sizes: the notes' powers of two, sizes no note mentions, and one beyond 2**31 (it does not fit an int32).
# Per-item times k/1024 * 2**e are exact binary fractions, so time = per-item * size is exact and
# equal per-item times tie exactly whichever way a right answer divides (ms / b, or b / ms for a throughput).
_SIZES = (1, 2, 3, 4, 5, 7, 8, 12, 16, 32, 48, 64, 100, 128, 256, 1024, 4096, 2**31 + 8)


def _batch_ms_inputs():
    """Hypothesis: (batch_ms,) - sizes in any order, batch 1 mostly present; times exact (ties and near-ties a
    thousandth apart), random floats, or whole ms; sometimes numpy's np.int64 sizes and np.float64/np.int64 times."""
    from hypothesis import strategies as st

    exact = st.builds(
        lambda k, e: k / 1024 * 2.0**e,
        st.sampled_from([1024, 1023, 1025, 512, 768, 1536, 2048, 3072, 4095]),
        st.integers(-4, 6),
    )

    @st.composite
    def draw(d):
        sizes = d(st.sets(st.one_of(st.sampled_from(_SIZES[1:]), st.integers(2, 300)), max_size=6))
        if d(st.integers(0, 9)) < 9:  # batch 1 is there nine times in ten; else a ValueError is the answer
            sizes.add(1)
        sizes = list(sizes)
        order = d(st.permutations(range(len(sizes))))
        kind = d(st.sampled_from(["exact", "float", "int", "mixed"]))
        batch_ms = {}
        for i in order:
            b = sizes[i]
            k = kind if kind != "mixed" else d(st.sampled_from(["exact", "float", "int"]))
            if k == "int" and b > 4096:
                k = "exact"  # whole ms over a size beyond 2**31 would leave per-item times a few ulps apart
            if k == "exact":
                batch_ms[b] = d(exact) * b
            elif k == "float":
                batch_ms[b] = d(st.floats(0.01, 1e4, allow_nan=False, allow_infinity=False))
            else:
                batch_ms[b] = d(st.integers(1, 100_000))
        if d(st.integers(0, 3)) == 3:  # straight from numpy arrays
            batch_ms = {
                np.int64(b): (np.float64(v) if isinstance(v, float) else np.int64(v)) for b, v in batch_ms.items()
            }
        return (batch_ms,)

    return draw()


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def _show_batch_ms(batch_ms):
    shown = "{" + ", ".join(f"{_plain(b)!r}: {_plain(v)!r}" for b, v in batch_ms.items()) + "}"
    if any(isinstance(x, np.generic) for pair in batch_ms.items() for x in pair):
        shown += " (numpy np.int64 sizes and numpy times)"
    return f"batch_ms={shown}"


def _compare_report(mine, ref):
    """The three fields: per-item times and the ceiling within 1e-9 (relative), the best batch exactly."""
    fields = ("per_item_ms", "ceiling", "best_batch")
    if not isinstance(mine, dict) or not set(fields) <= set(mine):
        return (
            "batching_ceiling should return a dict with the keys per_item_ms, ceiling and best_batch; got "
            f"{short(mine)}"
        )
    per = close()(mine["per_item_ms"], ref["per_item_ms"])
    if per:
        shown = {_plain(b): _plain(v) for b, v in ref["per_item_ms"].items()}
        return f"per_item_ms should be {short(shown)} (each batch's time over its size); {per}"
    if exactly(mine["best_batch"], ref["best_batch"]):
        return (
            f"best_batch should be {_plain(ref['best_batch'])!r} (the lowest per-item time, the smaller batch on a "
            f"tie); yours is {short(_plain(mine['best_batch']))}"
        )
    if close()(mine["ceiling"], ref["ceiling"]):
        return (
            f"ceiling should be {_plain(ref['ceiling'])!r} (batch 1's per-item time over the best's); yours is "
            f"{short(_plain(mine['ceiling']))}"
        )
    return None


@check(LAB, "agrees with the contract on every set of measurements tried")
def check_same_as_reference(batching_ceiling):
    same_as_reference(
        batching_ceiling,
        _reference_batching_ceiling,
        _batch_ms_inputs(),
        describe=_show_batch_ms,
        compare=_compare_report,
        edges=[
            ({1: 4, 8: 12, 32: 40},),  # whole ms: per item 4, 1.5 and 1.25, not 4, 1 and 1
            ({1: 3.0, 2: 5.0, 2**31 + 8: float(2**31 + 8)},),  # a batch size beyond 2**31
            ({1: 1.0, 8: 7.992},),  # 0.999 ms per item at batch 8: a thousandth better than batch 1
        ],
        arg_names=("batch_ms",),
        examples=300,
    )
