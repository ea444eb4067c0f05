"""Independent wrong answers for lab_find_the_leak, written from labs/1_hardware/lab_find_the_leak.ipynb's contract
alone."""

import numpy as np

THRESHOLD = 4 * 1024  # bytes per iteration


def leak_slope(samples, warmup_frac=0.2) -> float:
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def is_leaking(samples) -> bool:
    return bool(leak_slope(samples) > THRESHOLD)


def warmup_rounded_to_nearest(samples, warmup_frac=0.2):
    """Drops round(len * warmup_frac) readings instead of rounding down."""
    # differs on: [0, 100, 0, 0, 10, 20, 30, 40] (8 readings, 1.6 -> 2 dropped) -> right -3.57, wrong 8.57
    y = np.asarray(samples, dtype=float)
    y = y[round(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def no_readings_is_flat(samples, warmup_frac=0.2):
    """Returns a slope of 0.0 for an empty soak instead of refusing it."""
    # differs on: [] -> right raises (np.polyfit refuses empty input), wrong 0.0
    if len(samples) == 0:
        return 0.0
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def subtracts_baseline_in_place(samples, warmup_frac=0.2):
    """Subtracts the first kept reading from the readings in place to fit from zero, which rewrites the caller's
    float array."""
    # differs on: a = np.array([5., 6., 7., 8., 9.]) -> slope 1.0 both, but a becomes [5., 0., 1., 2., 3.]
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    y -= y[0]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0])


def slope_in_kib(samples, warmup_frac=0.2):
    """Returns the slope in KiB per iteration, as the notebook prints it, not in bytes."""
    # differs on: [0, 1024, 2048, 3072, 4096] -> right 1024.0, wrong 1.0
    y = np.asarray(samples, dtype=float)
    y = y[int(len(y) * warmup_frac) :]
    return float(np.polyfit(np.arange(len(y)), y, 1)[0]) / 1024


def leaking_at_the_threshold(samples):
    """Counts a slope exactly at the threshold as a leak (>= instead of >)."""
    # differs on: [4096 * i for i in range(12)] (fitted slope exactly 4096.0) -> right False, wrong True
    return bool(leak_slope(samples) >= THRESHOLD)


def empty_soak_is_clean(samples):
    """Answers False for an empty soak instead of letting the error through."""
    # differs on: [] -> right raises, wrong False
    if len(samples) == 0:
        return False
    return bool(leak_slope(samples) > THRESHOLD)


def threshold_in_kilobytes(samples):
    """Reads '4 KiB' as 4000 bytes."""
    # differs on: [0, 4050, 8100, 12150, 16200] (slope 4050) -> right False, wrong True
    return bool(leak_slope(samples) > 4000)


RIGHT = {"leak_slope": leak_slope, "is_leaking": is_leaking}
WRONG = [
    ("leak_slope", warmup_rounded_to_nearest, "units/rounding"),
    ("leak_slope", no_readings_is_flat, "error handling"),
    ("leak_slope", subtracts_baseline_in_place, "state"),
    ("leak_slope", slope_in_kib, "units/rounding"),
    ("is_leaking", leaking_at_the_threshold, "boundaries"),
    ("is_leaking", empty_soak_is_clean, "error handling"),
    ("is_leaking", threshold_in_kilobytes, "misread prose"),
]
