"""Exercise checks: a latency percentile from a Prometheus histogram, as histogram_quantile computes it (topic S9).

The learner writes
  histogram_quantile(q, buckets) -> float
      buckets maps each bucket's upper bound (seconds, +Inf included) to the CUMULATIVE count of observations
      at or below it, as /metrics exposes them. The rank is q * total (total = the +Inf count); the answer lies
      in the first bucket whose cumulative count reaches the rank, interpolated linearly between that bucket's
      lower bound (the previous bound; 0 for the lowest bucket) and its upper bound. A rank in the +Inf bucket
      gives the highest finite bound; no observations give NaN.

The checks are derived from what the function must guarantee:
  interpolation on a hand example for several q (q is used), the lowest bucket starting at 0, bounds given in
  any order (a dict is not sorted by bound), float counts (rates), a rank equal to a cumulative count followed
  by empty buckets (the first bucket that reaches the rank, not the first that passes it); a rank inside the bucket
  after an empty one (its lower bound is the empty bucket's bound), an empty lowest bucket; empty buckets given out
  of order, so their tied counts show a sort by count; numpy bounds and counts; the +Inf bucket (highest finite
  bound, never inf or NaN, also when the finite buckets before it are empty); no observations (an empty dict, all
  counts 0) give NaN, not 0
  and not an error; q = 1; against numpy's percentile of the raw samples on fine buckets, on two scales.
  The function must be the learner's own: one that hands the work to ailab.monitoring.histogram_quantile fails.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ailab.labs.core import answer, check, expect
from ailab.labs.differential import same_as_reference

LAB = "ex_histogram_quantile"
INF = float("inf")


def _delegates(fn) -> bool:
    """Does `fn` just call ailab's own histogram_quantile (directly, by alias, or through the module)?"""
    from ailab import monitoring

    theirs = monitoring.histogram_quantile
    if fn is theirs or getattr(fn, "__wrapped__", None) is theirs:
        return True
    code, env = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    if code is None:
        return False
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _has_contents(c)]
    seen = [env.get(n) for n in code.co_names] + cells
    return any(v is theirs for v in seen) or (
        "histogram_quantile" in code.co_names and any(v is monitoring for v in seen)
    )


def _has_contents(c) -> bool:
    try:
        c.cell_contents
    except ValueError:
        return False
    return True


def _q(fn, q, buckets, what):
    expect(
        not _delegates(fn),
        "your histogram_quantile calls ailab.monitoring.histogram_quantile: the exercise is to write it yourself",
    )
    given = dict(buckets)
    out = answer(fn, q, buckets, what=f"{what}, q={q}")
    expect(
        dict(buckets) == given, f"{what}: histogram_quantile changed the buckets it was given; leave them as they are"
    )
    expect(
        isinstance(out, numbers.Real) and not isinstance(out, bool),
        f"{what}, q={q}: histogram_quantile should return a number (seconds); got {out!r}",
    )
    return float(out)


def _close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@check(LAB, "interpolates inside the bucket that holds the rank")
def check_interpolation(histogram_quantile):
    buckets = {0.1: 10, 0.2: 30, 0.5: 40, INF: 40}
    what = f"buckets={buckets}"
    for q, want, why in [
        (0.5, 0.15, "rank 20 falls in (0.1, 0.2], which holds observations 11-30: halfway is 0.15"),
        (0.75, 0.2, "rank 30 is reached exactly at the 0.2 bucket: its upper bound"),
        (0.9, 0.38, "rank 36 falls in (0.2, 0.5], which holds observations 31-40: 0.2 + 0.3 * 6/10"),
        (1.0, 0.5, "rank 40 (every observation) is reached at the 0.5 bucket"),
    ]:
        got = _q(histogram_quantile, q, buckets, what)
        expect(
            _close(got, want),
            f"{what}, q={q}: expected {want} ({why}); got {got!r} - use the q you are given, "
            "the rank is q * total and the counts are cumulative",
        )
    got = _q(histogram_quantile, 0.1, buckets, what)
    expect(
        _close(got, 0.04),
        f"{what}, q=0.1: rank 4 falls in the lowest bucket, which starts at 0: 0 + 0.1 * 4/10 = 0.04; got {got!r}",
    )
    shuffled = {0.5: 40, INF: 40, 0.1: 10, 0.2: 30}
    got = _q(histogram_quantile, 0.5, shuffled, f"the same buckets in another order, {shuffled}")
    expect(
        _close(got, 0.15),
        f"buckets given in the order {list(shuffled)}: q=0.5 should still be 0.15; got {got!r} - a "
        "dict keeps insertion order, not the order of the bounds",
    )


@check(LAB, "bucket boundaries, float counts and the lowest bucket")
def check_boundaries(histogram_quantile):
    buckets = {1.0: 5, 2.0: 5, 3.0: 10, INF: 10}
    got = _q(histogram_quantile, 0.5, buckets, f"buckets={buckets}")
    expect(
        _close(got, 1.0),
        f"buckets={buckets}, q=0.5: rank 5 is reached at the 1.0 bucket already (the first bucket "
        f"whose cumulative count is at least the rank): 1.0; got {got!r}",
    )
    buckets = {0.005: 2.5, 0.01: 7.5, 0.025: 10.0, INF: 10.0}
    got = _q(histogram_quantile, 0.5, buckets, f"float counts {buckets}")
    expect(
        _close(got, 0.0075),
        f"buckets={buckets} (counts from a rate are floats), q=0.5: rank 5 in (0.005, 0.01] -> 0.0075; got {got!r}",
    )
    buckets = {2.0: 4, 4.0: 8, INF: 8}
    got = _q(histogram_quantile, 0.25, buckets, f"buckets={buckets}")
    expect(
        _close(got, 1.0),
        f"buckets={buckets}, q=0.25: rank 2 is halfway through the lowest bucket, (0, 2]: 1.0; got "
        f"{got!r} - the lowest bucket starts at 0",
    )
    got = _q(histogram_quantile, 0.5, {0.3: 7, INF: 7}, "one finite bucket {0.3: 7, inf: 7}")
    expect(_close(got, 0.15), f"buckets={{0.3: 7, inf: 7}}, q=0.5: halfway through (0, 0.3] is 0.15; got {got!r}")
    # empty buckets where the rank falls inside the next one: its lower bound is the empty bucket's bound
    buckets = {1.0: 5, 2.0: 5, 3.0: 10, INF: 10}
    got = _q(histogram_quantile, 0.7, buckets, f"buckets={buckets}")
    expect(
        _close(got, 2.4),
        f"buckets={buckets}, q=0.7: rank 7 falls in (2.0, 3.0], which holds observations 6-10 (the "
        f"(1.0, 2.0] bucket is empty, yet 2.0 is still where (2.0, 3.0] starts): 2.0 + 1.0 * 2/5 = 2.4; "
        f"got {got!r} - a bucket's lower bound is the previous bound, empty or not",
    )
    buckets = {0.1: 0, 0.2: 4, INF: 4}
    got = _q(histogram_quantile, 0.5, buckets, f"an empty lowest bucket, buckets={buckets}")
    expect(
        _close(got, 0.15),
        f"buckets={buckets}, q=0.5: the (0, 0.1] bucket is empty, so rank 2 falls in (0.1, 0.2]: "
        f"0.1 + 0.1 * 2/4 = 0.15; got {got!r} - only the lowest bucket starts at 0",
    )
    # tied cumulative counts given out of order: sorting by count (or keeping the dict's order) shows here
    tied = {3.0: 10, 2.0: 5, INF: 10, 1.0: 5}
    for q, want in [(0.5, 1.0), (0.7, 2.4), (1.0, 3.0)]:
        got = _q(histogram_quantile, q, tied, f"empty buckets given out of order, {tied}")
        expect(
            _close(got, want),
            f"buckets {tied} (the 2.0 bucket empty, so two bounds share a count), q={q}: "
            f"expected {want}; got {got!r} - sort the bounds themselves: counts tie wherever a "
            "bucket is empty",
        )
    np_buckets = {np.float64(0.1): np.int64(10), np.float64(0.2): np.int64(30), np.float64(INF): np.int64(40)}
    got = _q(histogram_quantile, 0.5, np_buckets, "numpy bounds and counts (np.float64: np.int64)")
    expect(_close(got, 0.15), f"numpy bounds and counts {{0.1: 10, 0.2: 30, inf: 40}}, q=0.5: 0.15; got {got!r}")


@check(LAB, "the +Inf bucket, and no observations")
def check_inf_and_empty(histogram_quantile):
    got = _q(histogram_quantile, 0.5, {0.1: 3, 0.5: 3, 1.0: 3, INF: 10}, "buckets {0.1: 3, 0.5: 3, 1.0: 3, inf: 10}")
    expect(
        got == 1.0,
        f"buckets {{0.1: 3, 0.5: 3, 1.0: 3, inf: 10}}, q=0.5: rank 5 is past the last finite bucket, so "
        f"the answer is the highest finite bound, 1.0 (not 0.1, the last bucket that gained "
        f"observations); got {got!r}",
    )
    buckets = {0.1: 5, 1.0: 8, INF: 10}
    for q in (0.95, 0.81, 1.0):
        got = _q(histogram_quantile, q, buckets, f"buckets={buckets}")
        expect(
            got == 1.0,
            f"buckets={buckets}, q={q}: rank {q * 10:g} is past the last finite bucket (8 observations "
            f"at or below 1.0): nothing is known above it, so the answer is the highest finite bound, "
            f"1.0; got {got!r}",
        )
    for what, buckets in [("an empty histogram {}", {}), ("all counts 0", {0.1: 0, 1.0: 0, INF: 0})]:
        got = _q(histogram_quantile, 0.99, buckets, what)
        expect(
            math.isnan(got),
            f"{what}: with no observations there is no percentile; return float('nan') (never 0, "
            f"which reads as a perfect latency); got {got!r}",
        )


def _histogram(samples, bounds):
    counts = np.searchsorted(np.sort(samples), bounds, side="right")
    return {**{float(b): int(c) for b, c in zip(bounds, counts)}, INF: int(len(samples))}


@check(LAB, "agrees with numpy's percentile on fine buckets")
def check_against_numpy(histogram_quantile):
    rng = np.random.default_rng(11)
    for scale, unit in [(0.02, "seconds"), (20.0, "milliseconds")]:
        samples = rng.lognormal(0.0, 0.5, size=20_000) * scale
        width = scale / 50
        bounds = np.arange(1, 400) * width
        buckets = _histogram(samples, bounds)
        for q in (0.5, 0.9, 0.99):
            got = _q(histogram_quantile, q, buckets, f"20,000 latencies in {unit}, buckets {width:g} wide")
            want = float(np.percentile(samples, 100 * q))
            expect(
                abs(got - want) <= 2 * width,
                f"20,000 lognormal latencies in {unit} in buckets {width:g} wide: q={q} should be within two bucket "
                f"widths of numpy's percentile {want:.4g}; got {got!r}",
            )


def _histograms():
    """Hypothesis: (q, buckets) as /metrics could expose them, bounds in any order, counts int or float."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        bounds = sorted(d(st.sets(st.sampled_from([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0]))))
        per_bucket = d(st.lists(st.integers(0, 5), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
        as_float = d(st.booleans())
        cumulative = np.cumsum(per_bucket).tolist()
        pairs = list(zip([*bounds, INF], [float(c) if as_float else int(c) for c in cumulative]))
        order = d(st.permutations(range(len(pairs))))
        total = cumulative[-1]
        q = d(
            st.one_of(
                st.sampled_from([1.0, 0.5, 0.99]),
                st.floats(0.001, 1.0),
                st.integers(1, max(total, 1)).map(lambda k: k / max(total, 1)),  # a rank equal to a count
            )
        )
        return q, {pairs[i][0]: pairs[i][1] for i in order}

    return draw()


@check(LAB, "agrees with Prometheus's rule on every histogram tried")
def check_same_as_reference(histogram_quantile):
    from ailab import monitoring

    expect(
        not _delegates(histogram_quantile),
        "your histogram_quantile calls ailab.monitoring.histogram_quantile: the exercise is to write it yourself",
    )
    same_as_reference(
        histogram_quantile,
        monitoring.histogram_quantile,
        _histograms(),
        describe=lambda q, buckets: f"q={q!r}, buckets={buckets}",
        arg_names=("q", "buckets"),
        examples=300,
    )
