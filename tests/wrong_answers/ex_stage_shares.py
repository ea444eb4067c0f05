"""Independent wrong answers for ex_stage_shares, written from labs/2_engine/ex_stage_shares.ipynb's contract alone."""

import numpy as np


def stage_report(samples):
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples: did its timer run?")
        p50[stage] = float(np.median(np.asarray(values, dtype=np.float64)))
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in p50.items()}, "dominant": max(p50, key=p50.get)}


def sorts_samples_in_place(samples):
    """Sorts each stage's list in place with .sort() to find its middle, reordering the caller's timings (and failing
    on a tuple)."""
    # differs on: {"a": [3.0, 1.0, 2.0]} -> same medians, but the caller's list becomes [1.0, 2.0, 3.0]
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples")
        values.sort()
        n = len(values)
        mid = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        p50[stage] = float(mid)
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in p50.items()}, "dominant": max(p50, key=p50.get)}


def tie_broken_by_name(samples):
    """Picks the dominant stage from the stage names in sorted order, so a tie goes to the alphabetically first
    stage, not the first in the input."""
    # differs on: {"tokenize": [1.0], "forward": [1.0]} -> right "tokenize", wrong "forward"
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples")
        p50[stage] = float(np.median(np.asarray(values, dtype=np.float64)))
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in p50.items()}, "dominant": max(sorted(p50), key=p50.get)}


def empty_input_empty_report(samples):
    """Returns an empty report for a dict with no stages instead of refusing it."""
    # differs on: {} -> right ValueError, wrong {"p50_ms": {}, "share": {}, "dominant": None}
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples")
        p50[stage] = float(np.median(np.asarray(values, dtype=np.float64)))
    if not p50:
        return {"p50_ms": {}, "share": {}, "dominant": None}
    total = sum(p50.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in p50.items()}, "dominant": max(p50, key=p50.get)}


def shares_of_the_mean(samples):
    """Reports medians under p50_ms but computes the shares from each stage's mean time ('share of the total time')."""
    # differs on: {"a": [1.0, 1.0, 10.0], "b": [2.0, 2.0, 2.0]} -> right share a 1/3, wrong 0.667
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50, means = {}, {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples")
        arr = np.asarray(values, dtype=np.float64)
        p50[stage] = float(np.median(arr))
        means[stage] = float(arr.mean())
    total = sum(means.values())
    return {"p50_ms": p50, "share": {s: v / total for s, v in means.items()}, "dominant": max(p50, key=p50.get)}


def dominant_from_rounded_shares(samples):
    """Rounds the shares to two decimals (as they are displayed) and picks the dominant stage from those, so nearly
    equal stages tie and the first wins."""
    # differs on: {"a": [1.0], "b": [1.003]} -> right "b", wrong "a" (both shares round to 0.5)
    if not samples:
        raise ValueError("stage_report needs at least one stage")
    p50 = {}
    for stage, values in samples.items():
        if len(values) == 0:
            raise ValueError(f"stage {stage!r} has no samples")
        p50[stage] = float(np.median(np.asarray(values, dtype=np.float64)))
    total = sum(p50.values())
    share = {s: v / total for s, v in p50.items()}
    shown = {s: round(v, 2) for s, v in share.items()}
    return {"p50_ms": p50, "share": share, "dominant": max(shown, key=shown.get)}


RIGHT = {"stage_report": stage_report}
WRONG = [
    ("stage_report", sorts_samples_in_place, "state"),
    ("stage_report", tie_broken_by_name, "order/parsing"),
    ("stage_report", empty_input_empty_report, "error handling"),
    ("stage_report", shares_of_the_mean, "misread prose"),
    ("stage_report", dominant_from_rounded_shares, "units/rounding"),
]
