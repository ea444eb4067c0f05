"""The leak lab's checks pass a right detector and fail plausible wrong ones, with a message naming what is wrong:
two-reading estimates (plain or dressed up as a fit), a fixed warm-up, the cut rounded the wrong way, the sign
dropped, a list-only implementation, a threshold in the wrong unit or compared the wrong way, errors swallowed.

leak_slope(samples, warmup_frac=0.2) -> float (bytes per iteration)
| question | what the checks try |
|---|---|
| which input varies each field | warmup_frac alone (several fractions on one series whose slope changes after its first half), the series alone (rising, falling, flat, GC dips) |
| boundaries | 13 readings at 0.2 (2.6 rounds down to 2); 20 equal readings (slope 0); a short series; no readings (an error) |
| a type the notes never show | a list of ints, a numpy array, a tuple |
| order or ties | every reading counts (one GC dip throws a two-point estimate off) |
| errors: type and message | no readings raises rather than returning a slope |
| policy: which item | which readings: all of them after int(n * warmup_frac) |

is_leaking(samples) -> bool
| question | what the checks try |
|---|---|
| which input varies each field | the slope alone around 4 KiB/iteration, the noise and spikes alone |
| boundaries | just above and just below 4 KiB per iteration; 10 readings; no readings (an error, not "clean") |
| a type the notes never show | ints, a numpy array; a numpy bool is refused (True or False) |
| order or ties | allocator warm-up first, one late spike, falling memory |
| errors: type and message | an empty soak raises |
| policy: which item | - |
"""

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab_find_the_leak as lab

KiB = 1024
THRESHOLD = 4 * KiB


def good_slope(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def good_is_leaking(samples, threshold=THRESHOLD):
    return bool(good_slope(samples) > threshold)


def stub(*args, **kwargs):
    raise NotImplementedError("fit a line")


# --- other right answers: a hand-written least-squares fit, original x positions ----------------------------------


def manual_least_squares(samples, warmup_frac=0.2):
    y = [float(v) for v in samples][int(len(samples) * warmup_frac) :]
    x = list(range(len(y)))
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def original_positions(samples, warmup_frac=0.2):
    k = int(len(samples) * warmup_frac)
    y = np.asarray(samples, dtype=float)
    return float(np.polyfit(np.arange(k, len(y)), y[k:], 1)[0])


def test_right_answers_pass():
    for slope in (good_slope, manual_least_squares, original_positions):
        lab.check_slope(slope)
        lab.check_slope_edges(slope)
    lab.check_finds_leaks(good_is_leaking)
    lab.check_clean_loop(good_is_leaking)
    lab.check_no_readings(good_is_leaking)


# --- leak_slope --------------------------------------------------------------------------------------------------


def two_point_slope(samples, warmup_frac=0.2):
    return (samples[-1] - samples[0]) / (len(samples) - 1)


def two_points_dressed_as_a_fit(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return float(np.polyfit([0, len(y) - 1], [y[0], y[-1]], 1)[0])


def mean_of_differences(samples, warmup_frac=0.2):  # the two-point slope in disguise
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return float(np.mean(np.diff(y)))


def median_of_differences(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return float(np.median(np.diff(y)))


def no_warmup_slope(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def fixed_fraction(samples, warmup_frac=0.2):  # a constant where the argument belongs
    return good_slope(samples, 0.2)


def fixed_count(samples, warmup_frac=0.2):  # "skip the first 16" (20 % of the notes' 80 readings)
    y = np.asarray(samples, dtype=float)[16:]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def rounds_the_cut(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[round(len(samples) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def ceils_the_cut(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[int(np.ceil(len(samples) * warmup_frac)) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def keeps_the_size(samples, warmup_frac=0.2):
    return abs(good_slope(samples, warmup_frac))


def coefficients(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return np.polyfit(np.arange(len(y)), y, 1)


def intercept(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[1])


def list_only(samples, warmup_frac=0.2):  # `samples[k:] + ...`-style code that only works on a list
    y = samples[int(len(samples) * warmup_frac) :] + []
    return good_slope(y, 0.0)


def zero_for_empty(samples, warmup_frac=0.2):
    if len(samples) == 0:
        return 0.0
    return good_slope(samples, warmup_frac)


def x_in_fractions(samples, warmup_frac=0.2):  # x from 0 to 1, not one step per iteration
    y = np.asarray(samples, dtype=float)[int(len(samples) * warmup_frac) :]
    return float(np.polyfit(np.linspace(0, 1, len(y)), y, 1)[0])


def last_half_only(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)[len(samples) // 2 :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


WRONG_SLOPES = [
    (lab.check_slope, two_point_slope, r"the least-squares slope after the warm-up is .* not two of them"),
    (lab.check_slope, two_points_dressed_as_a_fit, r"not two of them"),
    (lab.check_slope, mean_of_differences, r"not two of them"),
    (lab.check_slope, median_of_differences, r"least-squares slope after the warm-up is"),
    (lab.check_slope, no_warmup_slope, r"least-squares slope after the warm-up is"),
    (lab.check_slope, x_in_fractions, r"least-squares slope after the warm-up is"),
    (lab.check_slope, intercept, r"least-squares slope after the warm-up is"),
    (lab.check_slope, lambda s: 0.0, r"least-squares slope after the warm-up is"),
    (lab.check_slope, coefficients, r"return the slope alone"),
    (lab.check_slope, stub, r"not implemented yet"),
    (lab.check_slope_edges, fixed_fraction, r"with warmup_frac=0.5, .* Use the warmup_frac argument"),
    (lab.check_slope_edges, fixed_count, r"with warmup_frac=0.5, .* Use the warmup_frac argument"),
    (lab.check_slope_edges, last_half_only, r"with warmup_frac=0.0, .* Use the warmup_frac argument"),
    (lab.check_slope_edges, no_warmup_slope, r"with warmup_frac=0.5"),
    (lab.check_slope_edges, rounds_the_cut, r"skip the first int\(13 x 0.2\) = 2 readings \(rounded down\)"),
    (lab.check_slope_edges, ceils_the_cut, r"with warmup_frac=0.3, 80 readings|rounded down"),
    (lab.check_slope_edges, keeps_the_size, r"memory falling 16 KiB per iteration has a negative slope"),
    (lab.check_slope_edges, list_only, r"given a numpy int64 array \(not a list of floats\), your leak_slope raised"),
    (lab.check_slope_edges, zero_for_empty, r"leak_slope\(\[\]\) returned 0.0: with no readings there is no slope"),
    (lab.check_slope_edges, two_point_slope, r"with warmup_frac=0.5"),
]


@pytest.mark.parametrize(
    "check, fn, message",
    WRONG_SLOPES,
    ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}" for c, f, _ in WRONG_SLOPES],
)
def test_wrong_slopes_fail(check, fn, message):
    with pytest.raises(LabCheckFailed, match=message):
        check(fn)


# --- is_leaking --------------------------------------------------------------------------------------------------


def two_point_is_leaking(samples, threshold=THRESHOLD):
    return bool(two_point_slope(samples) > threshold)


def no_warmup_is_leaking(samples, threshold=THRESHOLD):
    return bool(no_warmup_slope(samples) > threshold)


def zero_threshold_is_leaking(samples):
    return bool(good_slope(samples) > 0)  # any positive noise is a "leak"


def kb_threshold(samples):
    return bool(good_slope(samples) > 4000)  # 4 KB, not 4 KiB


def mib_threshold(samples):
    return bool(good_slope(samples) > 4 * 2**20)  # 4 MiB per iteration


def abs_slope_is_leaking(samples):
    return bool(abs(good_slope(samples)) > THRESHOLD)  # freed memory counts as a leak


def numpy_bool(samples):
    return good_slope(samples) > np.float64(THRESHOLD)


def swallows_errors(samples):
    try:
        return good_is_leaking(samples)
    except Exception:  # the mistake under test
        return False


def empty_is_clean(samples):
    return bool(len(samples)) and good_is_leaking(samples)


def wrong_direction(samples):
    return bool(good_slope(samples) < THRESHOLD)


def mean_growth_is_leaking(samples):  # the average reading above the first one, not a slope
    y = np.asarray(samples, dtype=float)
    return bool(np.mean(y - y[0]) > THRESHOLD)


def last_minus_max_warmup(samples):  # compares the last reading with the warm-up's peak
    y = np.asarray(samples, dtype=float)
    k = int(len(y) * 0.2)
    return bool((y[-1] - y[:k].max()) / (len(y) - k) > THRESHOLD)


WRONG_DETECTORS = [
    (lab.check_clean_loop, two_point_is_leaking, r"one late spike\) was flagged"),
    (lab.check_clean_loop, no_warmup_is_leaking, r"one late spike\) was flagged"),
    (lab.check_clean_loop, zero_threshold_is_leaking, r"was flagged"),
    (lab.check_clean_loop, kb_threshold, r"4014 bytes per iteration \(2 % below .*\) was flagged"),
    (lab.check_clean_loop, abs_slope_is_leaking, r"memory falling 64 KiB per iteration .* was flagged as a leak"),
    (lab.check_clean_loop, lambda s: True, r"was flagged"),
    (lab.check_clean_loop, numpy_bool, r"is_leaking returned np.False_, a numpy bool, .*convert it with bool"),
    (lab.check_clean_loop, mean_growth_is_leaking, r"was flagged"),
    (lab.check_clean_loop, stub, r"not implemented yet"),
    (lab.check_finds_leaks, lambda s: False, r"leaking 8 KiB per iteration \(last reading low\) was not flagged"),
    (lab.check_finds_leaks, lambda s: good_slope(s) > 100 * KiB, r"8 KiB per iteration .* was not flagged"),
    (lab.check_finds_leaks, mib_threshold, r"was not flagged"),
    (lab.check_finds_leaks, wrong_direction, r"was not flagged"),
    (
        lab.check_finds_leaks,
        lambda s: bool(good_slope(s) > 1.05 * THRESHOLD),
        r"a steady leak of 4178 bytes per iteration \(2 % above",
    ),
    (lab.check_finds_leaks, last_minus_max_warmup, r"was not flagged"),
    (lab.check_finds_leaks, stub, r"not implemented yet"),
    (lab.check_no_readings, swallows_errors, r"is_leaking\(\[\]\) returned False"),
    (lab.check_no_readings, empty_is_clean, r"is_leaking\(\[\]\) returned False"),
    (lab.check_no_readings, stub, r"not implemented yet"),
]


@pytest.mark.parametrize(
    "check, fn, message",
    WRONG_DETECTORS,
    ids=[f"{c.__name__}-{getattr(f, '__name__', 'lambda')}" for c, f, _ in WRONG_DETECTORS],
)
def test_wrong_detectors_fail(check, fn, message):
    with pytest.raises(LabCheckFailed, match=message):
        check(fn)


def test_measured_series_are_used():
    leak = list(300e6 + 384 * KiB * np.arange(30))
    flat = [300e6] * 30
    lab.check_finds_leaks(good_is_leaking, planted=leak)
    lab.check_clean_loop(good_is_leaking, clean=flat)
    with pytest.raises(LabCheckFailed, match="planted leak"):
        lab.check_finds_leaks(lambda s: len(s) != 30 and good_is_leaking(s), planted=leak)  # misses the measured one
    with pytest.raises(LabCheckFailed, match="fixed loop"):
        lab.check_clean_loop(lambda s: len(s) == 30 or good_is_leaking(s), clean=flat)


# --- the differential checks (issue 42) --------------------------------------------------------------------------


def slope_whole_bytes(samples, warmup_frac=0.2):
    """Units and rounding: the slope rounded to whole bytes per iteration ("nobody leaks half a byte")."""
    return float(round(good_slope(samples, warmup_frac)))


def slope_float32(samples, warmup_frac=0.2):
    """Units and rounding: readings held as float32, which rounds 300 MB readings to 32 bytes."""
    y = np.asarray(samples, dtype=np.float32)[int(len(samples) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y), dtype=np.float32), y, 1)[0])


def is_leaking_whole_kib(samples):
    """Units and rounding: the slope rounded to whole KiB before it is compared (4.4 KiB reads as 4)."""
    return bool(round(good_slope(samples) / KiB) > THRESHOLD // KiB)


def zero_frac_means_default(samples, warmup_frac=0.2):
    """Boundaries: `warmup_frac or 0.2`, so warmup_frac=0 (keep every reading) skips 20 %."""
    return good_slope(samples, warmup_frac or 0.2)


def always_drops_one(samples, warmup_frac=0.2):
    """Boundaries: skips at least one reading ("the first reading is always the import"), even at warmup_frac=0."""
    y = np.asarray(samples, dtype=float)
    y = y[max(1, int(len(y) * warmup_frac)) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def deletes_the_warmup(samples, warmup_frac=0.2):
    """State: drops the warm-up from the caller's list with del, so the soak it was given loses its readings."""
    k = int(len(samples) * warmup_frac)
    if isinstance(samples, list):
        del samples[:k]
        return good_slope(samples, 0.0)
    return good_slope(samples, warmup_frac)


def subtracts_the_baseline_in_place(samples, warmup_frac=0.2):
    """State: makes the readings relative to the first one in place (same slope, but the caller's data changed)."""
    if isinstance(samples, np.ndarray):
        samples -= samples[0]
    elif isinstance(samples, list):
        samples[:] = [x - samples[0] for x in samples]
    return good_slope(samples, warmup_frac)


NEW_SLOPES = [slope_whole_bytes, slope_float32, zero_frac_means_default, always_drops_one, deletes_the_warmup]
NEW_SLOPES += [subtracts_the_baseline_in_place]


def test_right_answers_agree_with_the_reference():
    for slope in (good_slope, manual_least_squares, original_positions):
        lab.check_slope_same_as_reference(slope)
    lab.check_is_leaking_same_as_reference(good_is_leaking)


@pytest.mark.parametrize(
    "fn", [f for _, f, _ in WRONG_SLOPES] + NEW_SLOPES, ids=lambda f: getattr(f, "__name__", "lambda")
)
def test_the_slope_differential_check_catches_every_wrong_slope(fn):
    with pytest.raises(LabCheckFailed, match=r"leak_slope\(|not implemented yet"):
        lab.check_slope_same_as_reference(fn)


@pytest.mark.parametrize(
    "fn", [f for _, f, _ in WRONG_DETECTORS] + [is_leaking_whole_kib], ids=lambda f: getattr(f, "__name__", "lambda")
)
def test_the_is_leaking_differential_check_catches_every_wrong_detector(fn):
    with pytest.raises(LabCheckFailed, match=r"is_leaking\(|not implemented yet"):
        lab.check_is_leaking_same_as_reference(fn)


def test_the_differential_checks_name_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        lab.check_slope_same_as_reference(slope_whole_bytes)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "yours is" in str(e.value) and "where the reference's is" in str(e.value)
    with pytest.raises(LabCheckFailed, match=r"changed its input `samples`"):
        lab.check_slope_same_as_reference(deletes_the_warmup)
    with pytest.raises(LabCheckFailed, match=r"a fitted slope of .* the fitted slope after the warm-up says True"):
        lab.check_is_leaking_same_as_reference(is_leaking_whole_kib)


def leaking_at_the_threshold(samples):
    """Boundaries: a slope exactly at 4 KiB per iteration counts as a leak (>= where the contract says above)."""
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * 0.2) :]
    if len(y) < 2:
        raise ValueError("no readings to fit")
    return bool(np.polyfit(np.arange(len(y)), y, 1)[0] >= 4096)


def test_a_slope_exactly_at_the_threshold_is_not_a_leak():
    with pytest.raises(LabCheckFailed, match="yours says True"):
        lab.check_is_leaking_same_as_reference(leaking_at_the_threshold)
