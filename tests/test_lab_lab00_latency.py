"""Lab 0's checks pass the right timer and reject plausible wrong ones, each with a message naming what is wrong.

measure_latency(fn, sync=..., warmup=5, iters=30) -> {"p50_ms", "p95_ms", "p99_ms", "n"}
| question | what the checks try |
|---|---|
| which input varies each field | warmup and iters each alone ((3, 12), (0, 7), (4, 1), (11, 23), the defaults); one distribution where p50, p95 and p99 each sit on their own plateau |
| boundaries | warmup 0; iters 1 (every field that sample); iters 0 (no number may be reported) |
| a shape the notes never show | a fake device whose fn returns before its work is done (sync matters); the clock read through perf_counter_ns |
| order or ties | the order of events: clock, fn, sync, clock per sample, and a sync after the warm-up; slow calls in no particular order (sorting needed) |
| errors: type and message | a DeviceError from fn (warm-up or timed) or sync reaches the caller, wrapped or not, never swallowed or retried |
| policy: which item | which calls are timed: none of the warm-up, every one after it |


The wrong timers cover different classes of mistake: warm-up timed or counted, arguments ignored, a mean or
the max or a neighbouring percentile in one field, fractions for percents, unsorted samples, wrong units,
sync in the wrong place or missing after the warm-up, errors swallowed, an empty run reported as 0 ms.
"""

import statistics
import time

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab00_latency as L

ALL_CHECKS = (
    L.check_counts_runs,
    L.check_excludes_warmup,
    L.check_percentiles,
    L.check_syncs,
    L.check_boundaries,
    L.check_errors_propagate,
)


def right(fn, sync=lambda: None, warmup=5, iters=30):
    """The solution's timer."""
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
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": len(s)}


def _timed(fn, sync, warmup, iters, clock=None):
    """Samples in ms, the right way (used by wrong answers that differ elsewhere)."""
    clock = clock or time.perf_counter
    for _ in range(warmup):
        fn()
    sync()
    s = []
    for _ in range(iters):
        t0 = clock()
        fn()
        sync()
        s.append((clock() - t0) * 1e3)
    return s


def _result(p50, p95, p99, n):
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "n": n}


# --- alternative right answers: other percentile definitions, perf_counter_ns, syncing more often ---------------


def right_nearest_rank(fn, sync=lambda: None, warmup=5, iters=30):
    s = sorted(_timed(fn, sync, warmup, iters))
    pick = lambda q: s[max(0, int(np.ceil(q / 100 * len(s))) - 1)]  # noqa: E731
    return _result(pick(50), pick(95), pick(99), len(s))


def right_statistics(fn, sync=lambda: None, warmup=5, iters=30):
    s = _timed(fn, sync, warmup, iters)
    if len(s) < 2:
        return _result(s[0], s[0], s[0], len(s))
    q = statistics.quantiles(s, n=100, method="inclusive")
    return _result(statistics.median(s), q[94], q[98], len(s))


def right_ns(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
        sync()  # a sync after every warm-up call is fine too
    s = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter_ns()
        fn()
        sync()
        s.append((time.perf_counter_ns() - t0) / 1e6)
    return _result(*np.percentile(s, [50, 95, 99]), len(s))


def right_wraps_the_error(fn, sync=lambda: None, warmup=5, iters=30):  # keeps the cause: fine
    try:
        return right(fn, sync, warmup, iters)
    except Exception as e:
        raise RuntimeError(f"timing {fn!r} failed") from e


@pytest.mark.parametrize("timer", [right, right_nearest_rank, right_statistics, right_ns, right_wraps_the_error])
def test_right_answers_pass_every_check(timer):
    for c in ALL_CHECKS:
        c(timer)


def test_checks_take_no_real_time():
    t0 = time.perf_counter()
    for c in ALL_CHECKS:
        c(right)
    assert time.perf_counter() - t0 < 2.0, "the checks run on a fake clock: they should not sleep"


def test_the_real_clock_is_restored_after_a_check():
    real = time.perf_counter
    with pytest.raises(LabCheckFailed):
        L.check_counts_runs(lambda fn, **kw: 1 / 0)
    L.check_counts_runs(right)
    assert time.perf_counter is real


# --- wrong answers -----------------------------------------------------------------------------------------------


def no_warmup(fn, sync=lambda: None, warmup=5, iters=30):  # times the warm-up calls too
    return right(fn, sync, 0, iters + warmup) | {"n": iters}


def off_by_one_warmup(fn, sync=lambda: None, warmup=5, iters=30):  # drops one warm-up sample too few
    s = _timed(fn, sync, 0, warmup + iters)[warmup - 1 :] if warmup else _timed(fn, sync, 0, iters)
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def counts_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, sync, warmup, iters) | {"n": warmup + iters}


def fixed_iters(fn, sync=lambda: None, warmup=5, iters=30):  # a constant where the argument belongs
    return right(fn, sync, warmup, 30)


def fixed_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, sync, 5, iters)


def warmup_or_default(fn, sync=lambda: None, warmup=5, iters=30):  # `warmup or 5`: warmup=0 becomes 5
    return right(fn, sync, warmup or 5, iters)


def uses_time_time(fn, sync=lambda: None, warmup=5, iters=30):
    return _result(*np.percentile(_timed(fn, sync, warmup, iters, clock=time.time), [50, 95, 99]), iters)


def mean_everywhere(fn, sync=lambda: None, warmup=5, iters=30):
    m = float(np.mean(_timed(fn, sync, warmup, iters)))
    return _result(m, m, m, iters)


def mean_as_p50(fn, sync=lambda: None, warmup=5, iters=30):  # one field wrong, its neighbours right
    s = _timed(fn, sync, warmup, iters)
    return _result(np.mean(s), *np.percentile(s, [95, 99]), iters)


def whole_loop_divided(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
        sync()
    per_call = (time.perf_counter() - t0) * 1e3 / iters
    return _result(per_call, per_call, per_call, iters)


def max_as_p99(fn, sync=lambda: None, warmup=5, iters=30):
    s = _timed(fn, sync, warmup, iters)
    return _result(*np.percentile(s, [50, 95]), max(s), iters)


def p90_as_p95(fn, sync=lambda: None, warmup=5, iters=30):
    s = _timed(fn, sync, warmup, iters)
    return _result(*np.percentile(s, [50, 90, 99]), iters)


def p95_as_p99(fn, sync=lambda: None, warmup=5, iters=30):
    s = _timed(fn, sync, warmup, iters)
    return _result(*np.percentile(s, [50, 95, 95]), iters)


def fractions_not_percents(fn, sync=lambda: None, warmup=5, iters=30):
    return _result(*np.percentile(_timed(fn, sync, warmup, iters), [0.5, 0.95, 0.99]), iters)


def unsorted_index(fn, sync=lambda: None, warmup=5, iters=30):  # picks by rank without sorting
    s = _timed(fn, sync, warmup, iters)
    return _result(s[len(s) // 2], s[int(0.95 * len(s))], s[int(0.99 * len(s))], iters)


def seconds_not_ms(fn, sync=lambda: None, warmup=5, iters=30):
    return _result(*(np.percentile(_timed(fn, sync, warmup, iters), [50, 95, 99]) / 1e3), iters)


def no_sync(fn, sync=lambda: None, warmup=5, iters=30):
    return right(fn, lambda: None, warmup, iters)


def sync_before_call(fn, sync=lambda: None, warmup=5, iters=30):  # the right operations in the wrong order
    for _ in range(warmup):
        fn()
    sync()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sync()
        fn()
        s.append((time.perf_counter() - t0) * 1e3)
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def clock_before_sync(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    sync()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        sync()
        s.append((t1 - t0) * 1e3)
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def sync_once_at_the_end(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        s.append((time.perf_counter() - t0) * 1e3)
    sync()
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def no_sync_after_warmup(fn, sync=lambda: None, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    s = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        s.append((time.perf_counter() - t0) * 1e3)
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def drops_first_sample(fn, sync=lambda: None, warmup=5, iters=30):  # "the first one is always slow"
    s = _timed(fn, sync, warmup, iters)[1:]
    return _result(*np.percentile(s, [50, 95, 99]), len(s) + 1)


def zeros_when_empty(fn, sync=lambda: None, warmup=5, iters=30):
    s = _timed(fn, sync, warmup, iters)
    if not s:
        return _result(0.0, 0.0, 0.0, 0)
    return _result(*np.percentile(s, [50, 95, 99]), len(s))


def swallows_errors(fn, sync=lambda: None, warmup=5, iters=30):
    def safe(f):
        try:
            f()
        except Exception:  # the mistake under test
            pass

    return right(lambda: safe(fn), lambda: safe(sync), warmup, iters)


def swallows_warmup_errors(fn, sync=lambda: None, warmup=5, iters=30):  # "a cold call may fail"
    for _ in range(warmup):
        try:
            fn()
        except Exception:  # the mistake under test
            pass
    return right(fn, sync, 0, iters)


def swallows_sync_errors(fn, sync=lambda: None, warmup=5, iters=30):
    def safe_sync():
        try:
            sync()
        except Exception:  # the mistake under test
            pass

    return right(fn, safe_sync, warmup, iters)


def retries_until_it_works(fn, sync=lambda: None, warmup=5, iters=30):
    def again():
        for _ in range(3):
            try:
                return fn()
            except Exception:  # the mistake under test
                continue

    return right(again, sync, warmup, iters)


def hides_the_error(fn, sync=lambda: None, warmup=5, iters=30):
    try:
        return right(fn, sync, warmup, iters)
    except Exception:
        raise ValueError("measurement failed") from None


WRONG = [
    (L.check_excludes_warmup, no_warmup, r"p95_ms is .* expected 2 ms: .*cold call was timed"),
    (L.check_excludes_warmup, off_by_one_warmup, r"p99_ms is .* expected 2 ms"),
    (L.check_counts_runs, counts_warmup, r"n should count the 12 timed calls only .* got n=15"),
    (L.check_counts_runs, fixed_iters, r"with warmup=3 and iters=12, fn should be called 15 times; it was called 33"),
    (L.check_counts_runs, fixed_warmup, r"with warmup=3 and iters=12, fn should be called 15 times; it was called 17"),
    (L.check_counts_runs, warmup_or_default, r"with warmup=0 and iters=7, fn should be called 7 times"),
    (L.check_counts_runs, uses_time_time, r"never called time.perf_counter\(\)"),
    (L.check_percentiles, mean_everywhere, r"p50_ms is 4.01 ms, expected 2 ms"),
    (L.check_percentiles, mean_as_p50, r"p50_ms is 4.01 ms, expected 2 ms"),
    (L.check_percentiles, whole_loop_divided, r"p50_ms is 4.01 ms, expected 2 ms"),
    (L.check_percentiles, max_as_p99, r"p99_ms is 250 ms, expected 30 ms"),
    (L.check_percentiles, p90_as_p95, r"p95_ms is 2 ms, expected 9 ms"),
    (L.check_percentiles, p95_as_p99, r"p99_ms is 9 ms, expected 30 ms"),
    (L.check_percentiles, fractions_not_percents, r"p95_ms is 2 ms, expected 9 ms.*in percent"),
    (L.check_percentiles, unsorted_index, r"p95_ms is 2 ms, expected 9 ms.*sorted"),
    (L.check_percentiles, seconds_not_ms, r"p50_ms is 0.002 ms, expected 2 ms.*in seconds"),
    (L.check_syncs, no_sync, r"sync\(\) was never called"),
    (L.check_syncs, sync_before_call, r"after timed call 1, the clock was read before sync\(\) ran"),
    (L.check_syncs, clock_before_sync, r"after timed call 1, the clock was read before sync\(\) ran"),
    (L.check_syncs, sync_once_at_the_end, r"after timed call 1, the clock was read before sync\(\) ran"),
    (L.check_syncs, no_sync_after_warmup, r"after the last warm-up call the clock was read before any sync\(\)"),
    (L.check_boundaries, drops_first_sample, r"raised IndexError"),
    (L.check_boundaries, zeros_when_empty, r"with iters=0 nothing was timed, yet your timer reported"),
    (L.check_errors_propagate, swallows_errors, r"fn\(\) raised on its 6th call .* your timer returned"),
    (L.check_errors_propagate, swallows_warmup_errors, r"fn\(\) raised during the warm-up .* your timer returned"),
    (L.check_errors_propagate, swallows_sync_errors, r"sync\(\) raised on its 5th call .* your timer returned"),
    (L.check_errors_propagate, retries_until_it_works, r"fn\(\) raised on its 6th call .* your timer returned"),
    (L.check_errors_propagate, hides_the_error, r"your timer raised ValueError: measurement failed instead"),
]


@pytest.mark.parametrize("check, wrong, message", WRONG, ids=[f"{c.__name__}-{w.__name__}" for c, w, _ in WRONG])
def test_wrong_answers_fail_with_a_message(check, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        check(wrong)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the empty run of some wrong timers
def test_every_wrong_timer_fails_some_check():
    """Whatever check names it, each wrong timer is rejected by the lab as a whole."""
    for wrong in {w for _, w, _ in WRONG}:
        failed = 0
        for c in ALL_CHECKS:
            try:
                c(wrong)
            except LabCheckFailed:
                failed += 1
        assert failed, f"{wrong.__name__} passed every check"


def test_a_timer_that_returns_the_wrong_type_gets_a_message():
    with pytest.raises(LabCheckFailed, match="should return a dict"):
        L.check_counts_runs(lambda fn, **kw: 3.0)


def test_a_timer_with_an_array_field_gets_a_message():
    def arrays(fn, sync=lambda: None, warmup=5, iters=30):
        s = _timed(fn, sync, warmup, iters)
        return {"p50_ms": np.percentile(s, [50]), "p95_ms": 1.0, "p99_ms": 1.0, "n": iters}

    with pytest.raises(LabCheckFailed, match="p50_ms should be a number of milliseconds, got ndarray"):
        L.check_counts_runs(arrays)


def test_a_float_n_gets_a_message():
    with pytest.raises(LabCheckFailed, match="n should be an int"):
        L.check_counts_runs(
            lambda fn, sync=lambda: None, warmup=5, iters=30: right(fn, sync, warmup, iters) | {"n": float(iters)}
        )


def test_the_stub_fails_every_check():
    def stub(*a, **k):
        raise NotImplementedError("measure_latency() is not implemented yet: write your answer here")

    for c in ALL_CHECKS:
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            c(stub)


# --- the differential check (issue 42) -------------------------------------------------------------------------


def whole_ms_ticks(fn, sync=lambda: None, warmup=5, iters=30):
    """Units and rounding: reads the clock in whole ms (perf_counter_ns() // 1_000_000), "now" truncated to ticks."""
    clock = lambda: time.perf_counter_ns() // 1_000_000 / 1e3  # noqa: E731 - seconds, in whole ms
    return _result(*np.percentile(_timed(fn, sync, warmup, iters, clock=clock), [50, 95, 99]), iters)


def int_ms_samples(fn, sync=lambda: None, warmup=5, iters=30):
    """Units and rounding: each sample truncated to whole ms with int(), "ms are enough"."""
    s = [int(x) for x in _timed(fn, sync, warmup, iters)]
    return _result(*np.percentile(s, [50, 95, 99]), iters)


def rounded_to_a_tenth(fn, sync=lambda: None, warmup=5, iters=30):
    """Units and rounding: each percentile rounded to 0.1 ms before it is returned."""
    return {k: round(v, 1) if k != "n" else v for k, v in right(fn, sync, warmup, iters).items()}


def warmup_only_above_one(fn, sync=lambda: None, warmup=5, iters=30):
    """Boundaries: `if warmup > 1` ("one warm-up call is not worth it"), so warmup=1 times the cold call."""
    return right(fn, sync, warmup if warmup > 1 else 0, iters)


def first_index_skipped(fn, sync=lambda: None, warmup=5, iters=30):
    """Boundaries: one loop over warmup + iters that starts timing when i > warmup (not >=): one sample short."""
    s = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        fn()
        sync()
        if i > warmup:
            s.append((time.perf_counter() - t0) * 1e3)
    return _result(*np.percentile(s or [0.0], [50, 95, 99]), iters)


def keeps_samples_between_calls(fn, sync=lambda: None, warmup=5, iters=30, _samples=[]):
    """State: a default list argument collects the samples, so each call also reports the calls before it."""
    _samples.extend(_timed(fn, sync, warmup, iters))
    return _result(*np.percentile(_samples, [50, 95, 99]), iters)


_WARMED = []


def warms_up_once(fn, sync=lambda: None, warmup=5, iters=30):
    """State: warms up on the first call only ("the process is warm now"), whatever function it is given next."""
    w = 0 if _WARMED else warmup
    _WARMED.append(True)
    return right(fn, sync, w, iters)


NEW_WRONG = [
    whole_ms_ticks,
    int_ms_samples,
    rounded_to_a_tenth,
    warmup_only_above_one,
    first_index_skipped,
    keeps_samples_between_calls,
    warms_up_once,
]


@pytest.mark.parametrize("timer", [right, right_nearest_rank, right_statistics, right_ns, right_wraps_the_error])
def test_right_answers_agree_with_the_reference(timer):
    L.check_same_as_reference(timer)


def test_the_reference_passes_every_check():
    for c in ALL_CHECKS:
        c(L._reference_measure_latency)


# what the differential check cannot see: errors are never raised by its fake device (check_errors_propagate),
# and iters=0, which the contract leaves open (raise or NaN), is never drawn (check_boundaries)
NOT_DIFFERENTIAL = {
    swallows_errors,
    swallows_warmup_errors,
    swallows_sync_errors,
    retries_until_it_works,
    hides_the_error,
    zeros_when_empty,
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "wrong", [w for w in dict.fromkeys(w for _, w, _ in WRONG) if w not in NOT_DIFFERENTIAL] + NEW_WRONG
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    _WARMED.clear()
    with pytest.raises(LabCheckFailed, match="where the two differ|on measure_latency"):
        L.check_same_as_reference(wrong)


@pytest.mark.parametrize("wrong", sorted(NOT_DIFFERENTIAL, key=lambda w: w.__name__))
def test_what_the_differential_check_leaves_to_the_others(wrong):
    L.check_same_as_reference(wrong)
    assert any(_fails(c, wrong) for c in ALL_CHECKS)


def _fails(chk, wrong):
    try:
        chk(wrong)
    except LabCheckFailed:
        return True
    return False


@pytest.mark.parametrize("wrong", [whole_ms_ticks, rounded_to_a_tenth, warmup_only_above_one])
def test_the_old_checks_miss_what_the_differential_check_catches(wrong):
    """These got past the hand-picked cases, whose durations are whole ms and whose warmup is never 1."""
    _WARMED.clear()
    for c in ALL_CHECKS:
        c(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(int_ms_samples)
    assert "measure_latency(fn, sync" in str(e.value) and "the reference says" in str(e.value)


def test_a_wrong_type_gets_words_from_the_differential_check():
    with pytest.raises(LabCheckFailed, match="should return a dict"):
        L.check_same_as_reference(lambda fn, **kw: 3.0)


def test_the_stub_fails_the_differential_check():
    def stub(*a, **k):
        raise NotImplementedError("measure_latency() is not implemented yet: write your answer here")

    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
