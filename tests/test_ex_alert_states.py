"""The alert-states exercise's checks pass the right answer and reject plausible wrong ones.

alert_states(series, threshold, for_s) -> list[str]
| question | what the checks try |
|---|---|
| which input varies each field | threshold alone (200, 0.01, negative), for_s alone (0, exact, longer than the series), the series alone (spacing, resets, NaN, inf) |
| boundaries | an empty series; a value equal to the threshold; ts - start == for_s; for_s = 0; a series of NaN only; +inf and -inf values |
| a shape the notes never show | uneven spacing; timestamps near 1.7e9 (float precision); 200 random series against the course's evaluator |
| order or ties | the order of samples is the clock: one sample that does not hold resets it, the next holding sample restarts it |
| errors: type and message | - (nothing to refuse); exactly the three state names, one per sample |
| policy: which item | which sample starts the clock (the first holding one after a reset), not the series' start or the previous sample |


Each wrong answer is one class of mistake (counting samples instead of seconds, no reset, `>=` at the
threshold or `>` at for_s, NaN treated as holding or skipped, a latched alert, a constant threshold, the clock
started at the wrong sample); each is rejected with the message that names it.
"""

import math
import re

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_alert_states as L


def alert_states(series, threshold, for_s):
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def count_samples(series, threshold, for_s):
    """Assumes one sample per second: counts samples instead of reading the timestamps."""
    states, held = [], 0
    for _, value in series:
        if value > threshold:
            states.append("firing" if held >= for_s else "pending")
            held += 1
        else:
            held = 0
            states.append("inactive")
    return states


def no_reset(series, threshold, for_s):
    """Remembers the first time the condition ever held and never forgets it."""
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            states.append("inactive")
    return states


def at_threshold_holds(series, threshold, for_s):
    states, since = [], None
    for ts, value in series:
        if value >= threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def strictly_longer(series, threshold, for_s):
    """Fires only once the condition has held for MORE than for_s."""
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since > for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def nan_holds(series, threshold, for_s):
    states, since = [], None
    for ts, value in series:
        if not value <= threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def nan_skipped(series, threshold, for_s):
    """Treats a NaN sample as 'no change': repeats the previous state and keeps the clock running."""
    states, since = [], None
    for ts, value in series:
        if math.isnan(value):
            states.append(states[-1] if states else "inactive")
        elif value > threshold:
            since = ts if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def latched(series, threshold, for_s):
    """Once firing, always firing."""
    states, since, fired = [], None, False
    for ts, value in series:
        if fired:
            states.append("firing")
        elif value > threshold:
            since = ts if since is None else since
            fired = ts - since >= for_s
            states.append("firing" if fired else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def fixed_threshold(series, threshold, for_s):
    return alert_states(series, 200.0, for_s)


def clock_from_series_start(series, threshold, for_s):
    """Measures from the first sample of the series, not from when the condition started holding."""
    t0 = series[0][0] if series else 0.0
    return ["inactive" if not v > threshold else "firing" if ts - t0 >= for_s else "pending" for ts, v in series]


def clock_from_previous_sample(series, threshold, for_s):
    """Starts the clock at the sample before the condition first held (the last inactive one)."""
    states, since, prev = [], None, None
    for ts, value in series:
        if value > threshold:
            since = (prev if prev is not None else ts) if since is None else since
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
        prev = ts
    return states


def capitalised(series, threshold, for_s):
    return [s.upper() for s in alert_states(series, threshold, for_s)]


def drops_empty(series, threshold, for_s):
    if not series:
        return None
    return alert_states(series, threshold, for_s)


def zero_for_never_pending_bug(series, threshold, for_s):
    """Goes pending for one sample even when for_s = 0."""
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            first = since is None
            since = ts if first else since
            states.append("pending" if first else "firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def stub(*a, **k):
    raise NotImplementedError("alert_states() is not implemented yet")


CHECKS = [
    L.check_pending_then_firing,
    L.check_boundaries,
    L.check_reset_and_nan,
    L.check_uneven_spacing,
    L.check_random_series,
    L.check_same_as_reference,
]


def test_right_answer_passes():
    for chk in CHECKS:
        chk(alert_states)


def test_the_reference_is_the_course_evaluator():
    series = [(0.0, 250.0), (1.0, 250.0), (2.5, float("nan")), (3.0, 250.0), (6.0, 250.0)]
    assert L.reference(series, 200.0, 2.0) == alert_states(series, 200.0, 2.0)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_uneven_spacing,
            count_samples,
            r"samples 0.5 s, 0.2 s, 0.3 s.*sample 3 .*should be 'pending', got 'firing'.*measure how long the condition has held from the timestamps",
        ),
        (
            L.check_reset_and_nan,
            no_reset,
            r"one sample below the threshold at t=3.*sample 4 .*should be 'pending', got 'firing'.*clock starts again",
        ),
        (
            L.check_boundaries,
            at_threshold_holds,
            r"a value exactly at the threshold.*should be 'inactive', got 'pending'",
        ),
        (
            L.check_boundaries,
            strictly_longer,
            r"held for exactly for_s = 5 s.*should be 'firing', got 'pending'.*AT LEAST",
        ),
        (L.check_reset_and_nan, nan_holds, r"a NaN sample.*it never holds"),
        (L.check_reset_and_nan, nan_skipped, r"a NaN sample.*should be 'inactive', got 'pending'"),
        (
            L.check_reset_and_nan,
            latched,
            r"one sample below the threshold at t=3.*sample 3 .*should be 'inactive', got 'firing'",
        ),
        (L.check_boundaries, fixed_threshold, r"error rate against threshold 0.01.*use the threshold argument"),
        (
            L.check_pending_then_firing,
            clock_from_series_start,
            r"p99 above 200 from t=1 s.*sample 3 .*should be 'pending', got 'firing'",
        ),
        (L.check_pending_then_firing, clock_from_previous_sample, r"sample 3 .*should be 'pending', got 'firing'"),
        (
            L.check_pending_then_firing,
            capitalised,
            r"every state is one of \['inactive', 'pending', 'firing'\]; got 'INACTIVE'",
        ),
        (L.check_pending_then_firing, drops_empty, "should return a list of str; got NoneType"),
        (L.check_boundaries, zero_for_never_pending_bug, r"for_s = 0.*should be 'firing', got 'pending'"),
        (L.check_random_series, count_samples, r"random series #\d+"),
        (L.check_random_series, nan_skipped, r"random series #\d+"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize(
    "wrong",
    [
        count_samples,
        no_reset,
        at_threshold_holds,
        strictly_longer,
        nan_holds,
        nan_skipped,
        latched,
        fixed_threshold,
        clock_from_series_start,
        clock_from_previous_sample,
        zero_for_never_pending_bug,
    ],
)
def test_random_series_catch_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed):
        L.check_random_series(wrong)


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def alert_states_alt(series, threshold, for_s):
    """Also right: track the state and the start time, compare with math.isnan explicitly."""
    out, start = [], None
    for ts, value in series:
        holds = not math.isnan(value) and value > threshold
        start = (start if start is not None else ts) if holds else None
        out.append("inactive" if start is None else ("firing" if ts - start >= for_s else "pending"))
    return out


def test_other_right_answer_passes():
    for chk in CHECKS:
        chk(alert_states_alt)


def non_finite_is_no_data(series, threshold, for_s):
    """Reads 'NaN is no data' as 'anything not finite is no data': +inf, a latency that never ended, stops holding."""
    return alert_states([(t, v if math.isfinite(v) else float("nan")) for t, v in series], threshold, for_s)


def test_infinity_is_data():
    with pytest.raises(LabCheckFailed, match=r"a latency of \+inf.*should be 'pending', got 'inactive'.*\+inf is data"):
        L.check_reset_and_nan(non_finite_is_no_data)


# --------------------------------------------------------------------------- the differential check


def _walk(series, threshold, for_s, holds=lambda v, t: v > t, elapsed=lambda ts, since: ts - since):
    states, since = [], None
    for ts, value in series:
        if holds(value, threshold):
            since = ts if since is None else since
            states.append("firing" if elapsed(ts, since) >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def whole_second_clock(series, threshold, for_s):
    """Units: reads the clock in whole seconds (int(ts)), as a log line's timestamp shows it."""
    return _walk(series, threshold, for_s, elapsed=lambda ts, since: int(ts) - int(since))


def value_rounded(series, threshold, for_s):
    """Rounding: compares the value rounded to 2 decimals, as the dashboard shows it, with the threshold."""
    return _walk(series, threshold, for_s, holds=lambda v, t: round(v, 2) > t)


def start_at_zero_is_none(series, threshold, for_s):
    """Boundaries: `since = since or ts`, so a run that started at t=0 restarts its clock at every sample."""
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            since = since or ts
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def for_s_zero_means_default(series, threshold, for_s):
    """Boundaries: `for_s = for_s or 300`, as if 0 meant 'not given': a rule without `for:` never fires at once."""
    return _walk(series, threshold, for_s or 300.0)


def cleans_nan_in_place(series, threshold, for_s):
    """State: replaces NaN by -inf in the caller's list first (right states, but the caller's data changed)."""
    for i, (ts, value) in enumerate(series):
        if math.isnan(value):
            series[i] = (ts, -math.inf)
    return _walk(series, threshold, for_s)


def remembers_between_calls(series, threshold, for_s, _since={}):
    """State: a streaming evaluator whose start time, kept per threshold, outlives the call."""
    states = []
    for ts, value in series:
        if value > threshold:
            _since.setdefault(threshold, ts)
            states.append("firing" if ts - _since[threshold] >= for_s else "pending")
        else:
            _since.pop(threshold, None)
            states.append("inactive")
    return states


def value_then_timestamp(series, threshold, for_s):
    """Order: unpacks each sample as (value, timestamp)."""
    return _walk([(v, ts) for ts, v in series], threshold, for_s)


def newest_first(series, threshold, for_s):
    """Order: walks the samples newest first (as a query API lists them), then puts the states back in order."""
    back = _walk([(-ts, v) for ts, v in reversed(series)], threshold, for_s)
    return back[::-1]


NEW_WRONG = [
    whole_second_clock,
    value_rounded,
    start_at_zero_is_none,
    for_s_zero_means_default,
    cleans_nan_in_place,
    remembers_between_calls,
    value_then_timestamp,
    newest_first,
]


@pytest.mark.parametrize(
    "wrong",
    [
        count_samples,
        no_reset,
        at_threshold_holds,
        strictly_longer,
        nan_holds,
        nan_skipped,
        latched,
        fixed_threshold,
        clock_from_series_start,
        clock_from_previous_sample,
        capitalised,
        drops_empty,
        zero_for_never_pending_bug,
        non_finite_is_no_data,
        *NEW_WRONG,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match="should be|should return|changed its input|your code raised"):
        L.check_same_as_reference(wrong)


def test_the_differential_check_names_the_sample_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(at_threshold_holds)
    assert "the smallest input found where the two differ" in str(e.value)
    assert re.search(r"sample \d+ should be 'inactive', yours is 'firing'", str(e.value))


def test_the_differential_check_names_a_changed_series():
    with pytest.raises(LabCheckFailed, match=r"changed its input `series`"):
        L.check_same_as_reference(cleans_nan_in_place)
