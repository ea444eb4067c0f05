"""The capstone lab's checks fail on plausible wrong answers and pass on the right ones.

slo_verdict(result, target_rps, p99_bound_ms, max_error_rate) -> (ok, reason)
| question | what the checks try |
|---|---|
| which input varies each field | throughput, p99 and errors each miss alone (the others met); each bound and the target are varied as arguments on one run |
| boundaries | p99 exactly at the bound (meets), 92 % of the target served (meets), 0.8 % errors under 1 % (meets); 900 ms against 500 and 1000 |
| a shape the notes never show | a tail of 1.9 % (p95 and p98 low, p99 high); 0.6 % very slow (the maximum high, p99 low); offered rate above the target |
| order or ties | - (one result at a time) |
| errors: type and message | not an error path: the reason must be a non-empty str whenever ok is False |
| policy: which item | - |

Wrong answers rejected (each its own class): throughput only; the mean, the median, the p95 or the maximum instead
of p99; errors ignored; bounds hard-coded; the bound itself read as a miss; no slack on throughput; throughput
judged against the offered rate; a bare bool; no reason.

choose_settings() -> dict of server settings (check_service_settings, then check_service_meets_slo live)
| question | what the checks try |
|---|---|
| which input varies each field | each allowed key alone out of range; the live check runs the learner's settings over the server's defaults |
| boundaries | max_batch_size 0, 1 (no batching, live), 16.0; max_wait_ms -1, NaN, 600 (live); bucket width 0, 8.5; max_queue, request_timeout_s, torch_threads 0 |
| a type the notes never show | True for a number (a bool is an int to Python), None and {} for the dict, a function returning the dict |
| order or ties | - |
| errors: type and message | every refusal names the setting and its bound; a misspelt key is named |
| policy: which item | live: padded defaults, no batching and a long wait each rejected with the reason that fits them |
"""

from __future__ import annotations

import re
import warnings

import pytest

from ailab.labs import lab_capstone_slo as lab
from ailab.labs.core import LabCheckFailed


def right_verdict(result, target_rps, p99_bound_ms, max_error_rate):
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append("too slow")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append("p99 over bound")
    if result.error_rate > max_error_rate:
        problems.append("errors")
    return not problems, "; ".join(problems) or "ok"


def stub(*args):
    raise NotImplementedError("judge throughput, p99 and errors")


WRONG_VERDICTS = {
    "throughput only": lambda r, t, b, e: (r.rps >= 0.9 * t, "rate"),
    "mean instead of p99": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.mean_ms <= b and r.error_rate <= e, "m"),
    "ignores errors": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.p99_ms <= b, "no errors checked"),
    "p50 instead of p99": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.p50_ms <= b and r.error_rate <= e, "p50"),
    "returns a bare bool": lambda r, t, b, e: r.rps >= 0.9 * t and r.stats.p99_ms <= b and r.error_rate <= e,
    "max instead of p99": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.max_ms <= b and r.error_rate <= e, "max"),
    "p95 instead of p99": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.p95_ms <= b and r.error_rate <= e, "p95"),
    "hard-coded bounds": lambda r, t, b, e: (r.rps >= 0.9 * t and r.stats.p99_ms <= 500 and r.error_rate <= 0.01, "x"),
    "hard-coded target": lambda r, t, b, e: (r.rps >= 45 and r.stats.p99_ms <= b and r.error_rate <= e, "45 req/s"),
    "the bound itself is a miss": lambda r, t, b, e: (
        r.rps >= 0.9 * t and r.stats.p99_ms < b and r.error_rate < e,
        "strict",
    ),
    "no slack on throughput": lambda r, t, b, e: (r.rps >= t and r.stats.p99_ms <= b and r.error_rate <= e, "rate"),
    "throughput against the offered rate": lambda r, t, b, e: (
        r.rps >= 0.9 * r.rate_rps and r.stats.p99_ms <= b and r.error_rate <= e,
        "offered",
    ),
    "no errors allowed at all": lambda r, t, b, e: (
        r.rps >= 0.9 * t and r.stats.p99_ms <= b and r.error_rate == 0,
        "errors",
    ),
    "no reason when it says no": lambda r, t, b, e: (
        r.rps >= 0.9 * t and r.stats.p99_ms <= b and r.error_rate <= e,
        "",
    ),
}
MESSAGES = {
    "throughput only": r"p99 latency \(result.stats.p99_ms\)",
    "mean instead of p99": r"not the mean",
    "ignores errors": r"error rate",
    "p50 instead of p99": r"not the mean or the median",
    "returns a bare bool": r"should return \(ok: bool, reason: str\)",
    "max instead of p99": r"not the slowest request",
    "p95 instead of p99": r"1 request in 100, not 1 in 20",
    "hard-coded bounds": r"the bound given as p99_bound_ms|the max_error_rate argument",
    "hard-coded target": r"the target_rps argument \(not a number of your own\)",
    "the bound itself is a miss": r"'at most 500 ms' includes 500",
    "no slack on throughput": r"90 % of target_rps is enough",
    "throughput against the offered rate": r"not the rate the load test offered",
    "no errors allowed at all": r"a few failures within it are allowed",
    "no reason when it says no": r"give a reason",
    "stub": r"not implemented",
}


def test_verdict_check_passes_the_right_answer():
    lab.check_slo_verdict(right_verdict)


@pytest.mark.parametrize("name", [*WRONG_VERDICTS, "stub"])
def test_verdict_check_rejects_wrong_answers(name):
    with pytest.raises(LabCheckFailed, match=MESSAGES[name]):
        lab.check_slo_verdict(WRONG_VERDICTS.get(name, stub))


def test_official_verdict_agrees_with_the_cases():
    for name, result, target, bound, max_errors, want, _ in lab._cases():
        assert lab.official_verdict(result, target, bound, max_errors)[0] == want, name


@pytest.mark.parametrize(
    "settings, message",
    [
        (None, "return a dict"),
        ({}, "return a dict"),
        ({"batch_size": 32}, r"unknown setting\(s\) \['batch_size'\]"),
        ({"max_batch_size": 0}, "max_batch_size must be a whole number in 1..256"),
        ({"max_batch_size": True}, "max_batch_size must be a whole number"),
        ({"max_batch_size": 16.0}, "max_batch_size must be a whole number"),
        ({"max_wait_ms": -1}, "max_wait_ms must be a number"),
        ({"max_wait_ms": float("nan")}, "max_wait_ms must be"),
        ({"max_queue": 0}, r"server refuses these settings: max_queue=0: Input should be greater than or equal to 1"),
        ({"request_timeout_s": 0}, "request_timeout_s=0"),
        ({"torch_threads": 0}, "torch_threads=0"),
        ({"max_queue": True}, r"\['max_queue'\] must be numbers"),
    ],
)
def test_settings_check_rejects_malformed(settings, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_service_settings(settings)


@pytest.fixture(scope="module")
def predictor():
    from ailab.server import sentiment_predictor

    return sentiment_predictor()


TUNED = {"max_batch_size": 16, "max_wait_ms": 5, "length_bucket_tokens": 16}


def test_workload_mixes_short_texts_with_long_ones(predictor):
    tokens = [predictor.count_tokens(t) for t in lab.workload_texts()]
    long_share = sum(n >= predictor.max_length for n in tokens) / len(tokens)
    assert abs(long_share - lab.LONG_SHARE) < 0.02 and sorted(tokens)[len(tokens) // 2] <= 16


# That the live check passes a tuned service is proved by nbval over the solution notebook, which runs it
# on the solution's settings; running it here too cost ~20 s of `make test` for nothing new.


@pytest.fixture(scope="module")
def shared_reference(predictor):
    """One reference for the first check of every naive choice below (the check itself measures one afresh
    before each run and again before its second try, ~14 s each: three times per naive choice, 150 s of
    `make test` for the three). Their first checks come within a minute of it; a second check, only where
    the first one met the SLO, measures afresh as a learner's check does."""
    return lab.reference(predictor, fresh=True)


@pytest.mark.parametrize(
    "name, settings, match",
    [
        ("the server's defaults (tunes nothing): batches padded to their longest text", {"max_queue": 256}, "padded"),
        ("no batching", {"max_batch_size": 1}, "several requests"),
        (
            "a long batch wait, even with like lengths together",
            {"max_batch_size": 64, "max_wait_ms": 600, "length_bucket_tokens": 16},
            "p99",
        ),
    ],
)
def test_live_check_rejects_naive_choices(predictor, shared_reference, monkeypatch, name, settings, match):
    # The check judges one live run (retried once on a miss), like a learner's, so its power is statistical:
    # the stated rate sits 1.15x above what the padded defaults serve flat out, measured just before, and
    # a burst of load elsewhere can still blur that. A naive choice must be rejected in one of two checks,
    # the second at rates measured afresh; a rejection must name what is wrong.
    passes = []
    for attempt in range(2):
        with warnings.catch_warnings(record=True) as caught, monkeypatch.context() as m:
            warnings.simplefilter("always")
            if attempt == 0:
                m.setattr(lab, "reference", lambda *a, **k: dict(shared_reference))
            try:
                lab.check_service_meets_slo(settings, predictor)
            except LabCheckFailed as e:
                assert re.search(match, str(e)), str(e)
                return
            passes.append(
                (lab.reference(predictor), any("cannot tell settings apart" in str(w.message) for w in caught))
            )
    if not any(warned for _, warned in passes):
        pytest.fail(f"{name} met the SLO at the stated rate in two checks ({[ref for ref, _ in passes]})")
    pytest.skip(
        f"the check could not tell settings apart by a clear margin here ({passes}) "
        "and said so; the naive choice met the SLO"
    )


def test_stated_rate_sits_above_the_naive_choices_and_within_the_reference():
    assert lab.stated_rate(220.0, 80.0, 100.0) == 132.0  # batching pays well: 0.6 of the reference
    assert lab.stated_rate(220.0, 92.0, 100.0) == 138.0  # 1.5x one text per pass, where that is more
    assert lab.stated_rate(212.0, 52.0, 130.0) == round(1.15 * 130)  # Intel Xeon: 1.15x the padded defaults
    assert lab.stated_rate(160.0, 62.0, 66.0) == 96.0  # beside a busy process: 0.6 again
    assert lab.stated_rate(130.0, 70.0, 60.0) == round(0.75 * 130.0)  # never past 0.75 of the reference
    assert lab.stated_rate(1.0, 0.5) == 5.0


def test_reference_is_separable_only_with_room_above_every_naive_choice(monkeypatch):
    figures = iter([212.0, 130.0, 52.0, 212.0, 150.0, 52.0])  # reference, padded, one per pass; twice
    monkeypatch.setattr(lab, "_served_flat_out", lambda *a, **k: next(figures))
    assert lab.reference(object(), fresh=True)["separable"]
    assert not lab.reference(object(), fresh=True)["separable"]  # 1.15 x 150 > 0.75 x 212


@pytest.mark.parametrize(
    "settings", [{"length_bucket_tokens": 0}, {"length_bucket_tokens": True}, {"length_bucket_tokens": 8.5}]
)
def test_settings_check_rejects_a_malformed_bucket_width(settings):
    with pytest.raises(LabCheckFailed, match="length_bucket_tokens"):
        lab.check_service_settings(settings)


def test_settings_checks_take_the_learners_function():
    lab.check_service_settings(lambda: TUNED)
    with pytest.raises(LabCheckFailed, match="not implemented"):
        lab.check_service_settings(stub)


# --------------------------------------------------------------------------- the differential check (slo_verdict)


def rounds_p99(r, t, b, e):
    """Units and rounding: the p99 rounded to whole ms before it is compared (500.4 ms 'meets' 500)."""
    ok = r.rps >= 0.9 * t and round(r.stats.p99_ms) <= b and r.error_rate <= e
    return ok, "meets the SLO" if ok else "missed"


def whole_rps(r, t, b, e):
    """Units and rounding: served throughput truncated to whole requests per second."""
    ok = int(r.rps) >= 0.9 * t and r.stats.p99_ms <= b and r.error_rate <= e
    return ok, "meets the SLO" if ok else "missed"


def strict_throughput(r, t, b, e):
    """Boundaries: throughput must pass 90 % (>) where reaching it (>=) is enough."""
    ok = r.rps > 0.9 * t and r.stats.p99_ms <= b and r.error_rate <= e
    return ok, "meets the SLO" if ok else "missed"


def zero_error_budget_is_no_limit(r, t, b, e):
    """Boundaries: `if max_error_rate and ...`: a budget of 0 reads as no limit."""
    ok = r.rps >= 0.9 * t and r.stats.p99_ms <= b and not (e and r.error_rate > e)
    return ok, "meets the SLO" if ok else "missed"


def sorts_records_in_place(r, t, b, e):
    """State: sorts the caller's records by latency (to look at the slow ones), changing the result it was given."""
    r.records.sort(key=lambda rec: rec.latency_ms)
    return right_verdict(r, t, b, e)


def p99_from_ok_records_only(r, t, b, e):
    """Parsing: computes its own p99 from the successful records only (the SLO's p99 counts failures too)."""
    import numpy as np

    p99 = float(np.percentile([x.latency_ms for x in r.records if x.ok], 99))
    ok = r.rps >= 0.9 * t and p99 <= b and r.error_rate <= e
    return ok, "meets the SLO" if ok else "missed"


def silent_when_met(r, t, b, e):
    """Boundaries: the reason joins the problems, so a run that meets the SLO gets an empty reason."""
    ok, reason = right_verdict(r, t, b, e)
    return ok, "" if ok else reason


NEW_WRONG_VERDICTS = {
    "silent when met": silent_when_met,
    "rounds p99": rounds_p99,
    "whole rps": whole_rps,
    "strict throughput": strict_throughput,
    "zero error budget is no limit": zero_error_budget_is_no_limit,
    "sorts records in place": sorts_records_in_place,
    "p99 from ok records only": p99_from_ok_records_only,
}


def test_the_differential_check_passes_the_right_answers():
    lab.check_slo_verdict_same_as_reference(right_verdict)
    lab.check_slo_verdict_same_as_reference(lab._reference_slo_verdict)


@pytest.mark.parametrize("name", list(NEW_WRONG_VERDICTS))
def test_new_wrong_verdicts_pass_the_cases_but_not_the_differential_check(name):
    lab.check_slo_verdict(NEW_WRONG_VERDICTS[name])  # the listed cases do not show these
    with pytest.raises(LabCheckFailed, match="where the two differ|changed its input"):
        lab.check_slo_verdict_same_as_reference(NEW_WRONG_VERDICTS[name])


@pytest.mark.parametrize("name", [*WRONG_VERDICTS, "stub"])
def test_the_differential_check_catches_every_old_wrong_verdict(name):
    with pytest.raises(LabCheckFailed, match="where the two differ|not implemented"):
        lab.check_slo_verdict_same_as_reference(WRONG_VERDICTS.get(name, stub))


def test_the_settings_check_never_crashes_and_agrees_with_its_rules():
    """check_service_settings over generated dicts: it passes exactly those its documented rules allow (keys from
    ALLOWED_SETTINGS, whole numbers in range, no bools, what ServerConfig accepts), and refuses the rest with words."""
    import math

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ailab.server.config import ServerConfig

    values = st.one_of(
        st.sampled_from([0, 1, 2, 16, 256, 257, 512, 513, -1, True, False, None, 16.0, 8.5, float("nan"), 1000, 1001]),
        st.integers(-2, 600),
        st.floats(-1, 1100),
    )
    keys = st.sampled_from([*sorted(lab.ALLOWED_SETTINGS), "batch_size", "Max_Batch_Size"])

    def allowed(s):
        if not s or set(s) - lab.ALLOWED_SETTINGS or any(isinstance(v, bool) for v in s.values()):
            return False
        b, w, width = s.get("max_batch_size", 32), s.get("max_wait_ms", 10.0), s.get("length_bucket_tokens")
        if not (isinstance(b, int) and 1 <= b <= 256):
            return False
        if not (isinstance(w, (int, float)) and 0 <= w <= 1000 and not math.isnan(w)):
            return False
        if not (width is None or (isinstance(width, int) and 1 <= width <= 512)):
            return False
        try:
            ServerConfig(**s)
        except ValueError:
            return False
        return True

    @settings(max_examples=150, deadline=None, database=None)
    @given(st.dictionaries(keys, values, max_size=4))
    def run(s):
        try:
            lab.check_service_settings(s)
            passed = True
        except LabCheckFailed as e:
            passed = False
            assert "could not judge your answer" not in str(e), str(e)
        assert passed == allowed(s), (s, passed)

    run()
