"""Checks for labs/1_hardware/lab_find_the_leak.ipynb: the learner writes a slope-based leak detector.

A detector that compares two samples, or that ignores warm-up, or that flags noise, fails here.
"""
from __future__ import annotations

import numpy as np

from ailab.labs.core import check, expect

LAB = "lab_find_the_leak"
KiB = 1024


def _series(slope: float, n: int = 80, noise: float = 20 * KiB, seed: int = 0, base: float = 300e6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return base + slope * np.arange(n) + rng.normal(0, noise, n)


def _warmup(series: np.ndarray, steps: int = 6, grow: float = 1.5 * 2**20) -> np.ndarray:
    """Allocator warm-up: memory climbs over the first few iterations, then a clean loop is flat."""
    out = series.copy()
    ramp = np.minimum(np.arange(len(out)), steps) / steps * grow
    return out + ramp


@check(LAB, "slope_uses_every_sample")
def check_slope(leak_slope) -> None:
    """The slope of a noisy leak whose last reading dips (a GC run): two-point differences get it wrong."""
    for true, seed in ((50 * KiB, 1), (8 * KiB, 2)):
        s = _series(true, seed=seed)
        s[-1] -= 0.5 * 2**20  # a late dip (a GC run)
        s[0] += 0.5 * 2**20  # and an early bump
        got = leak_slope(list(s))
        expect(isinstance(got, (int, float, np.floating)), f"leak_slope should return bytes per iteration, got {got!r}")
        expect(abs(got - true) <= 0.2 * true,
               f"this series grows {true / KiB:.0f} KiB per iteration; your slope is {got / KiB:.1f} KiB. "
               "Fit a line through all the samples (np.polyfit(x, y, 1)) instead of comparing two of them.")


@check(LAB, "finds_leaks")
def check_finds_leaks(is_leaking, planted: list[float] | None = None) -> None:
    """Flag a measured planted leak and synthetic slow leaks hidden in noise."""
    if planted is not None:
        expect(is_leaking(list(planted)) is True, "the planted leak (measured in this notebook) was not flagged")
    for slope, seed in ((8 * KiB, 3), (64 * KiB, 4)):
        s = _warmup(_series(slope, seed=seed))
        s[-1] -= 1 * 2**20  # the last reading happens to be low
        expect(is_leaking(list(s)) is True,
               f"a loop leaking {slope / KiB:.0f} KiB per iteration (last reading low) was not flagged")


@check(LAB, "clean_loop_not_flagged")
def check_clean_loop(is_leaking, clean: list[float] | None = None) -> None:
    """A clean loop - noise, allocator warm-up, a late spike - must not be flagged."""
    if clean is not None:
        expect(is_leaking(list(clean)) is False, "the fixed loop (measured in this notebook) was flagged as leaking")
    for seed in (5, 6, 7):
        s = _warmup(_series(0.0, seed=seed))
        s[-1] += 1 * 2**20  # one late spike
        expect(is_leaking(list(s)) is False,
               "a clean loop (flat after warm-up, one late spike) was flagged. Skip the warm-up iterations "
               "and judge the fitted slope over all the others, against a threshold.")
