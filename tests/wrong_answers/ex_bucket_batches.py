"""Independent wrong answers for ex_bucket_batches, written from labs/3_serving/ex_bucket_batches.ipynb's contract alone."""

import math


def bucket_batches(lengths, width, max_batch):
    waiting = list(range(len(lengths)))
    batches = []
    while waiting:
        bucket = math.ceil(lengths[waiting[0]] / width)
        batch = [i for i in waiting if math.ceil(lengths[i] / width) == bucket][:max_batch]
        batches.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return batches


def padding_waste(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / slots if slots else 0.0


def leader_plus_max_batch(lengths, width, max_batch):
    """The leader, then up to max_batch more of its bucket."""
    # differs on lengths [3, 4, 5], width 16, max_batch 2: [[0, 1, 2]] instead of [[0, 1], [2]]
    waiting = list(range(len(lengths)))
    batches = []
    while waiting:
        leader = waiting[0]
        bucket = math.ceil(lengths[leader] / width)
        others = [i for i in waiting[1:] if math.ceil(lengths[i] / width) == bucket][:max_batch]
        batch = [leader] + others
        batches.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return batches


def grouped_by_bucket(lengths, width, max_batch):
    """Groups the requests by bucket first, then cuts each bucket into batches, smallest bucket first."""
    # differs on lengths [20, 5, 20, 5], width 16, max_batch 1: [[1], [3], [0], [2]] instead of [[0], [1], [2], [3]]
    groups = {}
    for i, n in enumerate(lengths):
        groups.setdefault(math.ceil(n / width), []).append(i)
    batches = []
    for bucket in sorted(groups):
        ids = groups[bucket]
        for s in range(0, len(ids), max_batch):
            batches.append(ids[s : s + max_batch])
    return batches


_bucket_of_length = {}


def cached_bucket(lengths, width, max_batch):
    """Memoises each length's bucket in a module-level dict to avoid recomputing ceil."""

    # differs on bucket_batches([10, 20], 16, 4) then bucket_batches([10, 20], 100, 4):
    # second call gives [[0], [1]] instead of [[0, 1]] (buckets cached from width 16)
    def bucket(n):
        if n not in _bucket_of_length:
            _bucket_of_length[n] = math.ceil(n / width)
        return _bucket_of_length[n]

    waiting = list(range(len(lengths)))
    batches = []
    while waiting:
        b = bucket(lengths[waiting[0]])
        batch = [i for i in waiting if bucket(lengths[i]) == b][:max_batch]
        batches.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return batches


def truthiness_empty_check(lengths, width, max_batch):
    """Returns [] early with `if not lengths`, which a numpy array refuses."""
    # differs on np.array([3, 40]), 16, 2: raises ValueError (truth value of an array is ambiguous) instead of [[0], [1]]
    if not lengths:
        return []
    waiting = list(range(len(lengths)))
    batches = []
    while waiting:
        bucket = math.ceil(lengths[waiting[0]] / width)
        batch = [i for i in waiting if math.ceil(lengths[i] / width) == bucket][:max_batch]
        batches.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return batches


def waste_as_percent(batches, lengths):
    """Returns the padding share in percent, as the chapter printed it."""
    # differs on [[0, 1]], [2, 4]: 25.0 instead of 0.25
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return 100 * (slots - real) / slots if slots else 0.0


def waste_counts_every_length(batches, lengths):
    """Counts the real tokens of every request in `lengths`, not only those placed in a batch."""
    # differs on [[0, 1]], [2, 4, 3]: (8 - 9) / 8 = -0.125 instead of 0.25
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths)
    return (slots - real) / slots if slots else 0.0


RIGHT = {"bucket_batches": bucket_batches, "padding_waste": padding_waste}
WRONG = [
    ("bucket_batches", leader_plus_max_batch, "boundaries"),
    ("bucket_batches", grouped_by_bucket, "order"),
    ("bucket_batches", cached_bucket, "state: module-level cache"),
    ("bucket_batches", truthiness_empty_check, "parsing/arguments"),
    ("padding_waste", waste_as_percent, "units/rounding"),
    ("padding_waste", waste_counts_every_length, "misread prose"),
]
