"""Independent wrong answers for ex_alert_states, written from labs/4_application/ex_alert_states.ipynb's contract alone."""

import math


def alert_states(series, threshold, for_s):
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            if since is None:
                since = ts
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def threshold_inclusive(series, threshold, for_s):
    """The condition holds from the threshold up (value >= threshold)."""
    # differs on [(0, 200.0)], 200.0, 0: ["firing"] instead of ["inactive"]
    states, since = [], None
    for ts, value in series:
        if value >= threshold:
            if since is None:
                since = ts
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def first_holding_always_pending(series, threshold, for_s):
    """The first holding sample starts the clock and is pending; the state is judged from the next sample on."""
    # differs on [(0, 5.0), (10, 5.0)], 1.0, 0: ["pending", "firing"] instead of ["firing", "firing"]
    states, since = [], None
    for ts, value in series:
        if value > threshold:
            if since is None:
                since = ts
                states.append("pending")
                continue
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


def clock_from_last_quiet_sample(series, threshold, for_s):
    """Measures the hold from the last sample where the condition did not hold (when it was last known fine)."""
    # differs on [(0, 1.0), (10, 5.0), (20, 5.0)], 2.0, 20: ["inactive", "pending", "firing"]
    # instead of ["inactive", "pending", "pending"]
    states, since, last_quiet = [], None, None
    for ts, value in series:
        if value > threshold:
            if since is None:
                since = last_quiet if last_quiet is not None else ts
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            last_quiet = ts
            states.append("inactive")
    return states


def nan_keeps_clock(series, threshold, for_s):
    """A NaN sample is a missing scrape: inactive, but it does not restart the clock."""
    # differs on [(0, 5.0), (10, nan), (20, 5.0)], 1.0, 15: ["pending", "inactive", "firing"]
    # instead of ["pending", "inactive", "pending"]
    states, since = [], None
    for ts, value in series:
        if math.isnan(value):
            states.append("inactive")
            continue
        if value > threshold:
            if since is None:
                since = ts
            states.append("firing" if ts - since >= for_s else "pending")
        else:
            since = None
            states.append("inactive")
    return states


_since = None


def clock_in_module_state(series, threshold, for_s):
    """Keeps the start of the hold in a module-level variable, as an alert manager keeps it between evaluations."""
    # differs on a first call [(0, 5.0)], 1.0, 10 followed by [(100, 5.0)], 1.0, 10: the second gives ["firing"]
    # instead of ["pending"]
    global _since
    states = []
    for ts, value in series:
        if value > threshold:
            if _since is None:
                _since = ts
            states.append("firing" if ts - _since >= for_s else "pending")
        else:
            _since = None
            states.append("inactive")
    return states


RIGHT = {"alert_states": alert_states}
WRONG = [
    ("alert_states", threshold_inclusive, "boundaries"),
    ("alert_states", first_holding_always_pending, "boundaries: for_s at 0"),
    ("alert_states", clock_from_last_quiet_sample, "misread prose"),
    ("alert_states", nan_keeps_clock, "order/parsing: NaN"),
    ("alert_states", clock_in_module_state, "state: module-level variable"),
]
