"""The leak lab's checks pass a right detector and fail plausible wrong ones."""
import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab_find_the_leak as lab

KiB = 1024


def good_slope(samples, warmup_frac=0.2):
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac):]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def good_is_leaking(samples, threshold=4 * KiB):
    return bool(good_slope(samples) > threshold)


def two_point_slope(samples):
    return (samples[-1] - samples[0]) / (len(samples) - 1)


def two_point_is_leaking(samples, threshold=4 * KiB):
    return bool(two_point_slope(samples) > threshold)


def no_warmup_is_leaking(samples, threshold=4 * KiB):
    y = np.asarray(samples, dtype=float)
    return bool(np.polyfit(np.arange(len(y)), y, 1)[0] > threshold)


def zero_threshold_is_leaking(samples):
    return bool(good_slope(samples) > 0)  # any positive noise is a "leak"


def stub(*args, **kwargs):
    raise NotImplementedError("fit a line")


def test_right_answers_pass():
    lab.check_slope(good_slope)
    lab.check_finds_leaks(good_is_leaking)
    lab.check_clean_loop(good_is_leaking)


@pytest.mark.parametrize("fn", [two_point_slope, stub, lambda s: 0.0])
def test_wrong_slopes_fail(fn):
    with pytest.raises(LabCheckFailed):
        lab.check_slope(fn)


@pytest.mark.parametrize("fn", [two_point_is_leaking, no_warmup_is_leaking, zero_threshold_is_leaking,
                                lambda s: True, stub])
def test_detectors_that_flag_clean_loops_fail(fn):
    with pytest.raises(LabCheckFailed):
        lab.check_clean_loop(fn)


@pytest.mark.parametrize("fn", [lambda s: False, stub, lambda s: good_slope(s) > 100 * KiB])
def test_detectors_that_miss_leaks_fail(fn):
    with pytest.raises(LabCheckFailed):
        lab.check_finds_leaks(fn)


def test_measured_series_are_used():
    leak = list(300e6 + 384 * KiB * np.arange(30))
    flat = [300e6] * 30
    lab.check_finds_leaks(good_is_leaking, planted=leak)
    lab.check_clean_loop(good_is_leaking, clean=flat)
    with pytest.raises(LabCheckFailed):
        lab.check_finds_leaks(lambda s: len(s) != 30 and good_is_leaking(s), planted=leak)  # misses the measured one
    with pytest.raises(LabCheckFailed):
        lab.check_clean_loop(lambda s: len(s) == 30 or good_is_leaking(s), clean=flat)
