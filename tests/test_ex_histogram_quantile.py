"""The histogram_quantile exercise's checks pass the right answer and reject plausible wrong ones.

histogram_quantile(q, buckets) -> float
| question | what the checks try |
|---|---|
| which input varies each field | q alone on one histogram (0.1 to 1.0), the buckets alone (order, empties, float counts, one finite bucket) |
| boundaries | a rank equal to a cumulative count; q = 1; an empty lowest bucket; a rank inside the bucket after an empty one; a rank in +Inf after empty finite buckets; no observations ({} and all zeros) |
| a type the notes never show | float counts (from rates); numpy bounds and counts |
| order or ties | bounds given out of order; tied cumulative counts (empty buckets) out of order, so a sort by count shows |
| errors: type and message | NaN (not 0, not an exception) when there is nothing to measure; the buckets left as they were; no hand-off to ailab's own |
| policy: which item | which bucket holds the rank: the first whose count reaches it |


Each wrong answer is one class of mistake (counts taken as per-bucket, bounds in dict order, the first bucket
that passes the rank instead of reaching it, the lowest bucket starting at its own bound, no interpolation,
+Inf returned, 0 for no data, a constant q, calling ailab's own function, ...).
"""

import math

import numpy as np
import pytest

from ailab import monitoring
from ailab.labs import LabCheckFailed
from ailab.labs import ex_histogram_quantile as L
from ailab.monitoring import histogram_quantile as ailab_hq


def histogram_quantile(q, buckets):
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def histogram_quantile_np(q, buckets):
    """Also right: numpy's interp over the cumulative curve, starting at (0, 0)."""
    items = sorted(buckets.items())
    if not items or items[-1][1] <= 0:
        return float("nan")
    finite = [(b, c) for b, c in items if not math.isinf(b)]
    rank = q * items[-1][1]
    if not finite or rank > finite[-1][1]:
        return finite[-1][0] if finite else 0.0
    counts = np.array([0.0] + [c for _, c in finite])
    bounds = np.array([0.0] + [b for b, _ in finite])
    i = int(np.searchsorted(counts[1:], rank, side="left")) + 1
    return float(bounds[i - 1] + (bounds[i] - bounds[i - 1]) * (rank - counts[i - 1]) / (counts[i] - counts[i - 1]))


def per_bucket_counts(q, buckets):
    """Treats the cumulative counts as counts per bucket and accumulates them again."""
    acc, cum = 0.0, {}
    for b in sorted(buckets):
        acc += buckets[b]
        cum[b] = acc
    return histogram_quantile(q, cum)


def dict_order(q, buckets):
    total = buckets.get(math.inf, 0)
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets.items():
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def passes_rank(q, buckets):
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] > rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
        lower, below = bound, buckets[bound]
    return lower


def lowest_from_its_bound(q, buckets):
    """The lowest bucket is taken to start at its own upper bound: answers there are never below it."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, bounds[0], 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def upper_bound_only(q, buckets):
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    prev = 0.0
    for bound in bounds:
        if buckets[bound] >= q * total:
            return prev if math.isinf(bound) else bound
        prev = bound
    return prev


def returns_inf(q, buckets):
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def zero_when_empty(q, buckets):
    if not buckets or max(buckets.values()) <= 0:
        return 0.0
    return histogram_quantile(q, buckets)


def crashes_when_empty(q, buckets):
    bounds = sorted(buckets)
    return histogram_quantile(q, buckets) if buckets[bounds[-1]] > 0 else 0 / buckets[bounds[-1]]


def fixed_q(q, buckets):
    return histogram_quantile(0.99, buckets)


def rank_minus_one(q, buckets):
    """Rank q * (total - 1), numpy's convention for raw samples, not Prometheus's for buckets."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank, lower, below = q * (total - 1), 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below) if count > below else bound
        lower, below = bound, count
    return lower


def calls_ailab(q, buckets):
    return ailab_hq(q, buckets)


def calls_ailab_module(q, buckets):
    return monitoring.histogram_quantile(q, buckets)


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (histogram_quantile, histogram_quantile_np):
        L.check_interpolation(fn)
        L.check_boundaries(fn)
        L.check_inf_and_empty(fn)
        L.check_against_numpy(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_interpolation, per_bucket_counts, "q=0.5: expected 0.15"),
        (L.check_interpolation, dict_order, "a dict keeps insertion order"),
        (L.check_interpolation, fixed_q, r"q=0.5: expected 0.15.*use the q you are given"),
        (L.check_interpolation, upper_bound_only, r"q=0.5: expected 0.15.*got 0.2"),
        (L.check_interpolation, lowest_from_its_bound, r"q=0.1: rank 4 falls in the lowest bucket, which starts at 0"),
        (L.check_interpolation, calls_ailab, "write it yourself"),
        (L.check_interpolation, calls_ailab_module, "write it yourself"),
        (L.check_interpolation, ailab_hq, "write it yourself"),
        (L.check_boundaries, passes_rank, r"rank 5 is reached at the 1.0 bucket already.*got 2.0"),
        (L.check_boundaries, lowest_from_its_bound, r"rank 5 in \(0.005, 0.01\]|the lowest bucket starts at 0"),
        (L.check_inf_and_empty, returns_inf, r"highest finite bound, 1.0.*got inf"),
        (L.check_inf_and_empty, zero_when_empty, r"an empty histogram \{\}.*never 0.*got 0.0"),
        (L.check_inf_and_empty, crashes_when_empty, r"an empty histogram \{\}, q=0.99: your code raised IndexError"),
        (L.check_against_numpy, per_bucket_counts, "within two bucket widths of numpy's percentile"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_rank_convention_is_named():
    # q * (total - 1) differs from q * total by less than one observation: on the hand example it is visible
    with pytest.raises(LabCheckFailed, match=r"q=0.5: expected 0.15 \(rank 20"):
        L.check_interpolation(rank_minus_one)


@pytest.mark.parametrize(
    "chk",
    [
        L.check_interpolation,
        L.check_boundaries,
        L.check_inf_and_empty,
        L.check_against_numpy,
        L.check_same_as_reference,
    ],
)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def _walk(items, q):
    total = max(c for _, c in items) if items else 0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in items:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return bound if count == below else lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def sorted_by_count(q, buckets):
    """Sorts the buckets by cumulative count: the same order as by bound, until an empty bucket ties two counts."""
    return _walk(sorted(buckets.items(), key=lambda kv: kv[1]), q)


def lower_bound_of_last_nonempty(q, buckets):
    """Takes a bucket's lower bound from the last bucket that gained observations, skipping empty ones."""
    items = sorted(buckets.items())
    total = items[-1][1] if items else 0
    if total <= 0:
        return math.nan
    rank, lower, below, last_gain = q * total, 0.0, 0.0, 0.0
    for bound, count in items:
        if count >= rank:
            if math.isinf(bound):
                return last_gain
            return bound if count == below else last_gain + (bound - last_gain) * (rank - below) / (count - below)
        if count > below:
            last_gain = bound
        lower, below = bound, count
    return lower


def lowest_nonempty_starts_at_zero(q, buckets):
    """Starts the first bucket with observations at 0, as if the empty ones below it were not there."""
    return _walk([(b, c) for b, c in sorted(buckets.items()) if c > 0 or math.isinf(b)], q)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_boundaries, sorted_by_count, r"two bounds share a count.*sort the bounds themselves"),
        (L.check_boundaries, lower_bound_of_last_nonempty, r"q=0.7: rank 7 falls in \(2.0, 3.0\].*got 1.8"),
        (L.check_inf_and_empty, lower_bound_of_last_nonempty, r"highest finite bound, 1.0 \(not 0.1"),
        (L.check_boundaries, lowest_nonempty_starts_at_zero, r"the \(0, 0.1\] bucket is empty.*got 0.1 "),
    ],
)
def test_empty_buckets_and_ties_nobody_listed(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check (issue 42)


def rounded_to_ms(q, buckets):
    """Units and rounding: rounds the seconds to whole milliseconds before returning them."""
    return round(histogram_quantile(q, buckets), 3)


def integer_rank(q, buckets):
    """Units and rounding: the rank truncated to a whole observation, int(q * total)."""
    total = max(buckets.values()) if buckets else 0
    return histogram_quantile(int(q * total) / total, buckets) if total > 0 else math.nan


def strict_reach(q, buckets):
    """Boundaries: a bucket must pass the rank (>), not reach it (>=)."""
    return passes_rank(q, buckets)


def inf_when_past_finite(q, buckets):
    """Boundaries: a rank in the +Inf bucket gives inf."""
    return returns_inf(q, buckets)


def sorts_in_place(q, buckets):
    """State: sorts by rebuilding the caller's dict in bound order (the dict it was given changes order)."""
    items = sorted(buckets.items())
    buckets.clear()
    buckets.update(items)
    return histogram_quantile(q, buckets)


def caches_by_total(q, buckets, _seen={}):
    """State: a cache keyed by (q, total) answers a different histogram with the same total from before."""
    key = (q, max(buckets.values()) if buckets else 0)
    if key not in _seen:
        _seen[key] = histogram_quantile(q, buckets)
    return _seen[key]


def test_right_answers_agree_with_the_reference():
    for fn in (histogram_quantile, histogram_quantile_np):
        L.check_same_as_reference(fn)


@pytest.mark.parametrize(
    "wrong",
    [
        per_bucket_counts,
        dict_order,
        passes_rank,
        lowest_from_its_bound,
        upper_bound_only,
        returns_inf,
        zero_when_empty,
        crashes_when_empty,
        fixed_q,
        rank_minus_one,
        sorted_by_count,
        lower_bound_of_last_nonempty,
        lowest_nonempty_starts_at_zero,
        rounded_to_ms,
        integer_rank,
        strict_reach,
        inf_when_past_finite,
        sorts_in_place,
        caches_by_total,
        calls_ailab,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match="where the two differ|write it yourself|changed its input|where the"):
        L.check_same_as_reference(wrong)


def test_the_differential_check_names_the_smallest_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(returns_inf)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "yours is inf where the reference's is 0.0" in str(e.value)
