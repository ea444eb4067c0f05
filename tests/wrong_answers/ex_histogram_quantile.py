"""Independent wrong answers for ex_histogram_quantile, written from labs/3_serving/ex_histogram_quantile.ipynb's contract alone."""

import math


def histogram_quantile(q, buckets):
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def total_from_last_inserted(q, buckets):
    """Takes the total from the last entry of the dict, where /metrics puts +Inf."""
    # differs on q=0.5, {inf: 40, 0.1: 10, 0.2: 30, 0.5: 40}: total 40 is right here, but on
    # {0.5: 40, inf: 40, 0.1: 10, 0.2: 30}: total 30, rank 15, answer 0.125 instead of 0.15
    if not buckets:
        return math.nan
    bounds = sorted(buckets)
    total = list(buckets.values())[-1]
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def strictly_above_rank(q, buckets):
    """Stops at the first bucket whose count is above the rank."""
    # differs on q=0.5, {0.1: 10, 0.2: 10, 0.5: 20, inf: 20}: 0.2 instead of 0.1
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count > rank or bound == bounds[-1]:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def inf_bucket_gives_inf(q, buckets):
    """A rank in the +Inf bucket answers +Inf: the observation is above every finite bound."""
    # differs on q=0.99, {0.1: 10, 0.2: 30, inf: 40}: inf instead of 0.2
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return math.inf
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def only_empty_dict_is_nan(q, buckets):
    """Returns NaN for an empty dict only; all-zero counts go through the walk."""
    # differs on q=0.5, {0.1: 0, 0.2: 0, inf: 0}: 0.1 instead of nan
    if not buckets:
        return math.nan
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def whole_observation_rank(q, buckets):
    """Rounds the rank up to a whole observation (observation 20 of 40), since counts are whole."""
    # differs on q=0.51, {0.1: 10, 0.2: 30, 0.5: 40, inf: 40}: rank 21 -> 0.155 instead of rank 20.4 -> 0.152
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return math.nan
    rank = math.ceil(q * total)
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def pops_inf_for_total(q, buckets):
    """Pops the +Inf entry out of the dict to get the total, then walks the finite bounds."""
    # differs on calling twice with the same dict {0.1: 10, 0.2: 30, inf: 40}, q=0.5: the second call
    # finds no +Inf (KeyError); the caller's dict has lost its +Inf entry after the first
    if not buckets:
        return math.nan
    total = buckets.pop(math.inf)
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in sorted(buckets):
        count = buckets[bound]
        if count >= rank:
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


RIGHT = {"histogram_quantile": histogram_quantile}
WRONG = [
    ("histogram_quantile", total_from_last_inserted, "order/parsing"),
    ("histogram_quantile", strictly_above_rank, "boundaries"),
    ("histogram_quantile", inf_bucket_gives_inf, "misread prose"),
    ("histogram_quantile", only_empty_dict_is_nan, "boundaries: empty input"),
    ("histogram_quantile", whole_observation_rank, "units/rounding"),
    ("histogram_quantile", pops_inf_for_total, "state: mutated argument"),
]
