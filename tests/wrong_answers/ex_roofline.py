"""Independent wrong answers for ex_roofline, written from labs/1_hardware/ex_roofline.ipynb's contract alone."""

import numpy as np


def attainable_gflops(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s):
    return np.minimum(peak_gflops, bandwidth_gb_s * intensity_flop_per_byte)


def bound(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    intensity = flops / bytes_moved
    ridge = peak_gflops / bandwidth_gb_s
    return "memory" if intensity < ridge else "compute"


def scales_array_in_place(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s):
    """Turns the intensity into the memory roof with an in-place multiply on np.asarray(...), which is the caller's
    own array when it is already a numpy array."""
    # differs on: x = np.array([1.0, 10.0]); f(x, 100.0, 20.0) -> x becomes [20., 100.] (right leaves [1., 10.])
    roof = np.asarray(intensity_flop_per_byte)
    if roof.ndim == 0:
        return min(peak_gflops, bandwidth_gb_s * intensity_flop_per_byte)
    roof *= bandwidth_gb_s
    np.minimum(roof, peak_gflops, out=roof)
    return roof


def loops_over_elements(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s):
    """Handles an array by looping over its flattened elements with the built-in min, returning a flat array whatever
    the input's shape."""
    # differs on: np.ones((2, 3)) -> right shape (2, 3), wrong shape (6,)
    if np.isscalar(intensity_flop_per_byte):
        return min(peak_gflops, bandwidth_gb_s * intensity_flop_per_byte)
    flat = np.ravel(intensity_flop_per_byte)
    return np.array([min(peak_gflops, bandwidth_gb_s * x) for x in flat], dtype=float)


def bandwidth_in_gib(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s):
    """Converts the bandwidth as if a GB were 2**30 bytes, so the memory roof is 7 % too high."""
    # differs on: f(1.0, 1000.0, 100.0) -> right 100.0, wrong 107.37
    bytes_per_s = bandwidth_gb_s * 2**30
    return np.minimum(peak_gflops, bytes_per_s * intensity_flop_per_byte / 1e9)


def memory_up_to_the_ridge(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    """Calls an operation exactly at the ridge point memory-bound (<= instead of <)."""
    # differs on: bound(300, 1, 300.0, 1.0) -> right "compute", wrong "memory"
    intensity = flops / bytes_moved
    ridge = peak_gflops / bandwidth_gb_s
    return "memory" if intensity <= ridge else "compute"


def compares_the_roofs(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    """Decides by which roof is lower, bandwidth x intensity < peak, whose float product can land just under the peak
    at the ridge itself."""
    # differs on: bound(222528, 9942, 222528.0, 9942.0) -> right "compute", wrong "memory"
    intensity = flops / bytes_moved
    return "memory" if bandwidth_gb_s * intensity < peak_gflops else "compute"


def rounds_the_intensity(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    """Rounds the intensity to one decimal (as it is printed) before comparing it with the ridge."""
    # differs on: bound(29504, 100, 295.02, 1.0) -> right "compute" (295.04 >= 295.02), wrong "memory" (295.0)
    intensity = round(flops / bytes_moved, 1)
    ridge = peak_gflops / bandwidth_gb_s
    return "memory" if intensity < ridge else "compute"


RIGHT = {"attainable_gflops": attainable_gflops, "bound": bound}
WRONG = [
    ("attainable_gflops", scales_array_in_place, "state"),
    ("attainable_gflops", loops_over_elements, "order/parsing"),
    ("attainable_gflops", bandwidth_in_gib, "units/rounding"),
    ("bound", memory_up_to_the_ridge, "boundaries"),
    ("bound", compares_the_roofs, "units/rounding"),
    ("bound", rounds_the_intensity, "units/rounding"),
]
