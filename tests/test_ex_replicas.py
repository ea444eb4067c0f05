"""The replicas exercise's checks pass the right answer and reject plausible wrong ones.

replicas_needed(target_rps, per_replica_rps, headroom=0.3, max_replicas=None) -> int
| question | what the checks try |
|---|---|
| which input varies each field | target (0 to 1e6, fractional), per-replica rate (2.5 to 10,000), headroom (0, 0.1-0.9, default), max_replicas (0, n - 1, n, well above, None) each alone |
| boundaries | target 0 and 0.001; capacity met exactly (also where float division lands a hair above: 21/10/0.7); a hair more; max_replicas == need and need - 1; max_replicas 0; headroom 0 and 1; NaN and inf in every number |
| a type the notes never show | np.float64 / np.int64 arguments; the result must be an int, not a float or np.float64 |
| order or ties | monotone: 13 loads and 7 headrooms in increasing order never need fewer replicas |
| errors: type and message | ValueError (not ZeroDivisionError, OverflowError, TypeError) naming the argument; beyond the limit, naming how many replicas are needed; a call that never returns fails after 2 s |
| policy: which item | - |

Each wrong answer is one class of mistake (truncating or rounding instead of rounding up, always adding one,
float noise adding a replica, zero replicas for no load, headroom ignored or applied the wrong way, a float
result, a silent clamp at max_replicas, no validation); each is rejected with the message that names it.
"""

import math
import re

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_replicas as L


def _validate(target_rps, per_replica_rps, headroom):
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a finite number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a finite number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be in [0, 1); got {headroom!r}")


def _limit(n, max_replicas):
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"the target needs {n} replicas but max_replicas={max_replicas}")
    return n


def replicas_needed(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    n = max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9)))
    return _limit(n, max_replicas)


def truncates(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, int(target_rps / (per_replica_rps * (1 - headroom)))), max_replicas)


def rounds(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, round(target_rps / (per_replica_rps * (1 - headroom)))), max_replicas)


def plus_one(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """int(x) + 1 'to round up': one too many whenever the division is exact."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(int(target_rps / (per_replica_rps * (1 - headroom))) + 1, max_replicas)


def float_noise(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Divides twice, and rounds up float noise: 21 / 10 / 0.7 = 3.0000000000000004 -> 4."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(target_rps / per_replica_rps / (1 - headroom))), max_replicas)


def zero_for_no_load(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9)), max_replicas)


def headroom_ignored(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * 0.7), 9))), max_replicas)


def headroom_on_target(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Adds 30 % to the load instead of keeping 30 % of each replica free: 1.3 x is not 1 / 0.7 x."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(round(target_rps * (1 + headroom) / per_replica_rps, 9))), max_replicas)


def headroom_as_usable(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Reads headroom as the share to use (0.3 -> 30 % of each replica)."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * headroom), 9))), max_replicas)


def numpy_float(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1.0, np.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9))), max_replicas)


def clamps(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    return n if max_replicas is None else min(n, max_replicas)


def none_beyond_max(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    return None if max_replicas is not None and n > max_replicas else n


def max_off_by_one(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    if max_replicas is not None and n >= max_replicas:
        raise ValueError(f"the target needs {n} replicas but max_replicas={max_replicas}")
    return n


def vague_limit_error(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    if max_replicas is not None and n > max_replicas:
        raise ValueError("too many replicas")
    return n


def no_validation(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    n = max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9)))
    return _limit(n, max_replicas)


def validation_misses_nan(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    if target_rps < 0:
        raise ValueError("target_rps must be >= 0")
    if per_replica_rps <= 0:
        raise ValueError("per_replica_rps must be > 0")
    if not 0 <= headroom < 1:
        raise ValueError("headroom must be in [0, 1)")
    return replicas_needed(
        target_rps if target_rps == target_rps else 0,
        per_replica_rps if per_replica_rps == per_replica_rps else 1,
        headroom,
        max_replicas,
    )


def unnamed_errors(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    try:
        _validate(target_rps, per_replica_rps, headroom)
    except ValueError:
        raise ValueError("invalid input") from None
    return replicas_needed(target_rps, per_replica_rps, headroom, max_replicas)


def headroom_up_to_one(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Accepts headroom == 1 and divides by zero."""
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError("target_rps must be >= 0")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError("per_replica_rps must be > 0")
    if not 0 <= headroom <= 1:
        raise ValueError("headroom must be in [0, 1]")
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9))), max_replicas)


def stub(*a, **k):
    raise NotImplementedError("replicas_needed() is not implemented yet")


CHECKS = [L.check_formula, L.check_exact_boundaries, L.check_max_replicas, L.check_nonsense, L.check_direction]


def test_float_noise_is_caught_on_its_own():
    """21 / 10 / 0.7 lands a hair above 3 even where 210 / 100 / 0.7 does not trip first."""
    assert float_noise(21, 10, 0.3) == 4 and replicas_needed(21, 10, 0.3) == 3
    with pytest.raises(LabCheckFailed, match=r"replicas_needed\(21, 10, 0.3\) should be 3; got 4.*rounding noise"):
        L.check_exact_boundaries(
            lambda t, p, h=0.3, m=None: 3 if (t, p, h) == (210, 100, 0.3) else float_noise(t, p, h, m)
        )


def test_right_answer_passes():
    for chk in CHECKS:
        chk(replicas_needed)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_formula, truncates, r"replicas_needed\(1000, 100\) should be 15; got 14"),
        (L.check_formula, rounds, r"replicas_needed\(1000, 100\) should be 15; got 14"),
        (L.check_exact_boundaries, plus_one, r"replicas_needed\(210, 100, 0.3\) should be 3; got 4.*do not add a 4th"),
        (L.check_exact_boundaries, float_noise, r"replicas_needed\(210, 100, 0.3\) should be 3; got 4"),
        (L.check_exact_boundaries, zero_for_no_load, r"replicas_needed\(0, 100\) should be 1; got 0"),
        (L.check_formula, headroom_ignored, r"replicas_needed\(1000, 100, 0.0\) should be 10; got 15.*headroom 0"),
        (L.check_formula, headroom_on_target, r"replicas_needed\(1000, 100\) should be 15; got 13"),
        (L.check_formula, headroom_as_usable, r"replicas_needed\(1000, 100\) should be 15; got 34"),
        (L.check_formula, numpy_float, r"should return an int .*got np.float64\(15.0\) \(float64\)"),
        (L.check_max_replicas, clamps, r"max_replicas=14\) returned 14: the target needs 15 replicas"),
        (L.check_max_replicas, none_beyond_max, r"returned None: the target needs 15 replicas"),
        (L.check_max_replicas, max_off_by_one, r"raised ValueError: .*max_replicas=15"),
        (L.check_max_replicas, vague_limit_error, r"should say how many replicas the target needs \(15\)"),
        (L.check_nonsense, no_validation, r"replicas_needed\(-5, 100\) returned 1"),
        (L.check_nonsense, validation_misses_nan, r"replicas_needed\(nan, 100\) returned 1.*NaN compares False"),
        (L.check_nonsense, unnamed_errors, r"message should name 'target_rps'"),
        (L.check_nonsense, headroom_up_to_one, r"replicas_needed\(100, 50, 1.0\) raised ZeroDivisionError"),
        (L.check_direction, truncates, r"replicas_needed\(69, 100\) should be 1; got 0|should be 2; got 1"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def replicas_needed_alt(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Also right: count up until the capacity covers the target, with a relative tolerance."""
    if math.isnan(target_rps) or target_rps < 0 or math.isinf(target_rps):
        raise ValueError(f"target_rps={target_rps} must be >= 0")
    if not 0 < per_replica_rps < math.inf:
        raise ValueError(f"per_replica_rps={per_replica_rps} must be > 0")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom={headroom} must be at least 0 and below 1")
    usable, n = per_replica_rps * (1 - headroom), 1
    while n * usable < target_rps and not math.isclose(n * usable, target_rps, rel_tol=1e-12):
        n += 1
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"need {n} replicas, more than max_replicas={max_replicas}")
    return n


def test_other_right_answer_passes():
    for chk in CHECKS:
        chk(replicas_needed_alt)


def limit_zero_is_no_limit(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """`if max_replicas and ...`: a limit of 0 is falsy, so it reads as no limit."""
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    if max_replicas and n > max_replicas:
        raise ValueError(f"the target needs {n} replicas but max_replicas={max_replicas}")
    return n


def headroom_range_misses_nan(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Checks headroom with `< 0 or >= 1`, which NaN slips through; ceil(NaN) then raises a message naming nothing."""
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError("target_rps must be a finite number >= 0")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError("per_replica_rps must be a finite number > 0")
    if headroom < 0 or headroom >= 1:
        raise ValueError("headroom must be in [0, 1)")
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9))), max_replicas)


def infinite_target_overflows(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Tests NaN and the sign but not infinity: ceil(inf) raises OverflowError."""
    if target_rps != target_rps or target_rps < 0:
        raise ValueError("target_rps must be >= 0")
    if per_replica_rps != per_replica_rps or per_replica_rps <= 0:
        raise ValueError("per_replica_rps must be > 0")
    if not 0 <= headroom < 1:
        raise ValueError("headroom must be in [0, 1)")
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9))), max_replicas)


def infinite_capacity_is_one(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError("target_rps must be a finite number >= 0")
    if per_replica_rps != per_replica_rps or per_replica_rps <= 0:
        raise ValueError("per_replica_rps must be > 0")
    if not 0 <= headroom < 1:
        raise ValueError("headroom must be in [0, 1)")
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 9))), max_replicas)


def python_numbers_only(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Validates by exact type: a rate numpy measured (np.int64) is refused."""
    for name, value in (("target_rps", target_rps), ("per_replica_rps", per_replica_rps)):
        if type(value) not in (int, float):
            raise TypeError(f"{name} must be an int or a float")
    return replicas_needed(target_rps, per_replica_rps, headroom, max_replicas)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_max_replicas, limit_zero_is_no_limit, r"max_replicas=0\) returned 1.*0 is a limit, not 'no limit'"),
        (
            L.check_nonsense,
            headroom_range_misses_nan,
            r"replicas_needed\(100, 50, nan\) raised ValueError.*should name "
            r"'headroom'",
        ),
        (
            L.check_nonsense,
            infinite_target_overflows,
            r"replicas_needed\(inf, 100\) raised OverflowError.*names "
            r"'target_rps'",
        ),
        (L.check_nonsense, infinite_capacity_is_one, r"replicas_needed\(100, inf\) returned 1"),
        (L.check_max_replicas, python_numbers_only, r"np.int64\(100\).* raised TypeError.*numpy"),
    ],
)
def test_boundaries_and_types_nobody_listed(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check


def usable_rounded(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Units and rounding: one replica's usable capacity rounded to whole req/s (3.3 x 0.7 = 2.31 -> 2)."""
    _validate(target_rps, per_replica_rps, headroom)
    usable = round(per_replica_rps * (1 - headroom))
    return _limit(max(1, math.ceil(round(target_rps / usable, 9))), max_replicas)


def noise_rounded_to_4(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Units and rounding: trims float noise with round(x, 4), which also drops a real hair above n."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(round(target_rps / (per_replica_rps * (1 - headroom)), 4))), max_replicas)


def epsilon_before_ceil(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Boundaries: ceil(x - 1e-4) 'for float noise': a load up to 1e-4 replicas above n is served by n."""
    _validate(target_rps, per_replica_rps, headroom)
    return _limit(max(1, math.ceil(target_rps / (per_replica_rps * (1 - headroom)) - 1e-4)), max_replicas)


def limit_as_int32(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Boundaries: compares against np.int32(max_replicas), which a limit of 2**31 or more overflows."""
    n = replicas_needed(target_rps, per_replica_rps, headroom)
    if max_replicas is not None and n > np.int32(max_replicas):
        raise ValueError(f"the target needs {n} replicas but max_replicas={max_replicas}")
    return n


NEW_WRONG = [usable_rounded, noise_rounded_to_4, epsilon_before_ceil, limit_as_int32]


def test_right_answers_agree_with_the_reference():
    for fn in (replicas_needed, replicas_needed_alt):
        L.check_same_as_reference(fn)


@pytest.mark.parametrize("wrong", NEW_WRONG)
def test_new_wrong_answers_pass_the_listed_checks_but_not_the_differential_one(wrong):
    for chk in CHECKS:
        chk(wrong)  # the hand-picked cases do not show these
    with pytest.raises(LabCheckFailed, match="where the two differ|the answer is|should raise|should name"):
        L.check_same_as_reference(wrong)


@pytest.mark.parametrize(
    "wrong",
    [
        truncates,
        rounds,
        plus_one,
        float_noise,
        zero_for_no_load,
        headroom_ignored,
        headroom_on_target,
        headroom_as_usable,
        numpy_float,
        clamps,
        none_beyond_max,
        max_off_by_one,
        vague_limit_error,
        no_validation,
        validation_misses_nan,
        unnamed_errors,
        headroom_up_to_one,
        limit_zero_is_no_limit,
        headroom_range_misses_nan,
        infinite_target_overflows,
        infinite_capacity_is_one,
        python_numbers_only,
    ],
)
def test_the_differential_check_catches_every_old_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match="replicas_needed\\("):
        L.check_same_as_reference(wrong)


def test_the_differential_check_names_the_call_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(epsilon_before_ceil)
    assert "the smallest input found where the two differ" in str(e.value)
    assert re.search(r"yours returned \d+; the answer is \d+ replica", str(e.value))


def test_stub_fails_the_differential_check():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
