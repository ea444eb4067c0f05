"""Independent wrong answers for ex_replicas, written from labs/4_application/ex_replicas.ipynb's contract alone."""

import math


def replicas_needed(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = max(1, math.ceil(round(target_rps / usable, 9)))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(
            f"{target_rps} req/s needs {n} replicas of {usable:g} usable req/s, more than max_replicas={max_replicas}"
        )
    return n


def headroom_is_usable_share(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Takes headroom as the share of each replica that may be used."""
    # differs on 100, 100, 0.3: 4 (usable 30) instead of 2 (usable 70)
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * headroom if headroom else per_replica_rps
    n = max(1, math.ceil(round(target_rps / usable, 9)))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, more than max_replicas={max_replicas}")
    return n


def zero_target_zero_replicas(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """A target of 0 needs ceil(0) = 0 replicas."""
    # differs on 0, 100: 0 instead of 1
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = math.ceil(round(target_rps / usable, 9))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, more than max_replicas={max_replicas}")
    return n


def max_replicas_exclusive(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Raises once the plan reaches max_replicas."""
    # differs on 140, 100, 0.3, max_replicas=2: ValueError instead of 2
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = max(1, math.ceil(round(target_rps / usable, 9)))
    if max_replicas is not None and n >= max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, reaching max_replicas={max_replicas}")
    return n


def headroom_zero_refused(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Requires headroom strictly between 0 and 1."""
    # differs on 100, 100, 0.0: ValueError instead of 1
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 < headroom < 1:
        raise ValueError(f"headroom must be between 0 and 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = max(1, math.ceil(round(target_rps / usable, 9)))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, more than max_replicas={max_replicas}")
    return n


def zero_capacity_not_checked(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Refuses a negative per-replica throughput, but lets 0 through."""
    # differs on 100, 0: ZeroDivisionError instead of ValueError
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not math.isfinite(per_replica_rps) or per_replica_rps < 0:
        raise ValueError(f"per_replica_rps must not be negative; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = max(1, math.ceil(round(target_rps / usable, 9)))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, more than max_replicas={max_replicas}")
    return n


def noise_trimmed_to_cents(target_rps, per_replica_rps, headroom=0.3, max_replicas=None):
    """Rounds the ratio to 2 decimals before rounding up, to be safe against float noise."""
    # differs on 210.3, 100, 0.3: ratio 3.0043 -> 3 instead of 4
    if not (math.isfinite(target_rps) and target_rps >= 0):
        raise ValueError(f"target_rps must be a number >= 0; got {target_rps!r}")
    if not (math.isfinite(per_replica_rps) and per_replica_rps > 0):
        raise ValueError(f"per_replica_rps must be a number > 0; got {per_replica_rps!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be at least 0 and below 1; got {headroom!r}")
    usable = per_replica_rps * (1 - headroom)
    n = max(1, math.ceil(round(target_rps / usable, 2)))
    if max_replicas is not None and n > max_replicas:
        raise ValueError(f"{target_rps} req/s needs {n} replicas, more than max_replicas={max_replicas}")
    return n


RIGHT = {"replicas_needed": replicas_needed}
WRONG = [
    ("replicas_needed", headroom_is_usable_share, "misread prose"),
    ("replicas_needed", zero_target_zero_replicas, "boundaries: parameter at 0"),
    ("replicas_needed", max_replicas_exclusive, "boundaries"),
    ("replicas_needed", headroom_zero_refused, "boundaries: parameter at its limit"),
    ("replicas_needed", zero_capacity_not_checked, "error handling"),
    ("replicas_needed", noise_trimmed_to_cents, "units/rounding"),
]
