"""The length-bucketing exercise's checks pass the right answer and reject plausible wrong ones.

bucket_batches(lengths, width, max_batch) -> list[list[int]]
| question | what the checks try |
|---|---|
| which input varies each field | lengths alone (mixed, equal, alternating), width alone (1, 5, wider than every length), max_batch alone (1, 2, 3, more than queued) |
| boundaries | length == width (shares a bucket with 1) and width + 1 (does not); empty input; a single request; max_batch 1 |
| a shape or type the notes never show | lengths as a tuple and as a numpy array |
| order or ties | arrival order inside a batch; the oldest waiting request leads the next batch, whatever its bucket; equal lengths |
| errors: type and message | - (nothing to refuse); every index exactly once, as ints; the lengths left as they were |
| policy: which item | which requests join a batch: the leader's bucket, in arrival order, at most max_batch; random workloads against the oracle |

padding_waste(batches, lengths) -> float
| question | what the checks try |
|---|---|
| which input varies each field | the batches alone (each padded to its own longest) on fixed lengths |
| boundaries | equal lengths (exactly 0); a single batch; no batches (0.0, not an error); an index in no batch |
| a shape the notes never show | batches of different sizes pooled together |
| order or ties | - |
| errors: type and message | - ; a share in [0, 1), not a percentage or an efficiency |
| policy: which item | - |


Each wrong answer is one class of mistake (floor instead of ceil, a bucket's batches before the leader's,
a constant instead of the argument, padding to the global longest, a mean of per-batch shares, ...).
"""

import math

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_bucket_batches as L


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


def bucket_batches_alt(lengths, width, max_batch):
    """Also right: queues per bucket (ailab's (length - 1) // width), the oldest head leads."""
    from collections import OrderedDict, deque

    queues = OrderedDict()
    for i, n in enumerate(lengths):
        queues.setdefault((int(n) - 1) // width if n > 0 else -1, deque()).append(i)
    out = []
    while queues:
        key = min(queues, key=lambda k: queues[k][0])
        q = queues[key]
        out.append([q.popleft() for _ in range(min(max_batch, len(q)))])
        if not q:
            del queues[key]
    return out


def floor_bucket(lengths, width, max_batch):
    waiting = list(range(len(lengths)))
    out = []
    while waiting:
        b = lengths[waiting[0]] // width
        batch = [i for i in waiting if lengths[i] // width == b][:max_batch]
        out.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return out


def bucket_by_bucket(lengths, width, max_batch):
    """All of the first bucket's batches, then the next bucket's: a rare length waits behind a popular one."""
    groups = {}
    for i, n in enumerate(lengths):
        groups.setdefault(math.ceil(n / width), []).append(i)
    return [g[k : k + max_batch] for g in groups.values() for k in range(0, len(g), max_batch)]


def sorted_by_bucket(lengths, width, max_batch):
    groups = {}
    for i, n in enumerate(lengths):
        groups.setdefault(math.ceil(n / width), []).append(i)
    return [groups[b][k : k + max_batch] for b in sorted(groups) for k in range(0, len(groups[b]), max_batch)]


def no_max_batch(lengths, width, max_batch):
    return bucket_batches(lengths, width, len(lengths) or 1)


def fixed_width(lengths, width, max_batch):
    return bucket_batches(lengths, 16, max_batch)


def sorts_by_length(lengths, width, max_batch):
    """Sorts by length and cuts into chunks: not FIFO, and ignores the buckets."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k : k + max_batch] for k in range(0, len(order), max_batch)]


def lifo_in_bucket(lengths, width, max_batch):
    return [list(reversed(b)) for b in bucket_batches(lengths, width, max_batch)]


def sorts_in_place(lengths, width, max_batch):
    out = bucket_batches(list(lengths), width, max_batch)
    if isinstance(lengths, list):
        lengths.sort()
    return out


def global_max_waste(batches, lengths):
    longest = max(lengths) if lengths else 0
    slots = sum(len(b) * longest for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / slots if slots else 0.0


def mean_of_ratios(batches, lengths):
    if not batches:
        return 0.0
    shares = [1 - sum(lengths[i] for i in b) / (len(b) * max(lengths[i] for i in b)) for b in batches]
    return sum(shares) / len(shares)


def over_real_tokens(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / real if real else 0.0


def efficiency(batches, lengths):
    return 1 - padding_waste(batches, lengths) if batches else 0.0


def all_lengths_real(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return (slots - sum(lengths)) / slots if slots else 0.0


def percent(batches, lengths):
    return 100 * padding_waste(batches, lengths)


def no_empty_guard(batches, lengths):
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return (slots - sum(lengths[i] for b in batches for i in b)) / slots


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (bucket_batches, bucket_batches_alt):
        L.check_buckets(fn)
        L.check_order_and_size(fn)
        L.check_arguments_and_edges(fn)
        res = L.check_bucketing_pays(fn, padding_waste)
        assert res["buckets of 16"] < 0.5 * res["no buckets"]
    L.check_waste(padding_waste)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_buckets, floor_bucket, r"a batch mixes buckets.*\[16, 17, 30\].*lengths 1..16 share one"),
        (L.check_buckets, sorts_by_length, "a batch mixes buckets"),
        (
            L.check_order_and_size,
            bucket_by_bucket,
            r"the oldest waiting request leads each batch.*got \[\[0, 2, 5\], \[7\]",
        ),
        (L.check_order_and_size, sorted_by_bucket, "the oldest waiting request leads each batch"),
        (L.check_order_and_size, no_max_batch, "max_batch=3 but a batch holds more"),
        (L.check_order_and_size, lifo_in_bucket, "keep their arrival order"),
        (
            L.check_arguments_and_edges,
            fixed_width,
            r"width=5, max_batch=8: the batches should be.*the width you are given",
        ),
        (L.check_arguments_and_edges, sorts_in_place, "changed the lengths it was given"),
        (L.check_waste, global_max_waste, r"2 of 11 slots are padding, 0.1818; got 0.2500"),
        (L.check_waste, mean_of_ratios, r"0.1818; got 0.1250.*don't average per-batch shares"),
        (L.check_waste, over_real_tokens, r"0.1818; got 0.2222.*not real tokens"),
        (L.check_waste, efficiency, r"0.1818; got 0.8182"),
        (L.check_waste, all_lengths_real, "request 1 is in no batch"),
        (L.check_waste, percent, "not a percentage"),
        (L.check_waste, no_empty_guard, "no batches.*ZeroDivisionError"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_bucketing_check_fails_without_buckets():
    with pytest.raises(LabCheckFailed, match="should cut it to under half"):
        L.check_bucketing_pays(
            lambda lengths, width, max_batch: bucket_batches(lengths, 10_000, max_batch), padding_waste
        )
    with pytest.raises(LabCheckFailed, match="without buckets the padding share should be"):
        L.check_bucketing_pays(bucket_batches, mean_of_ratios)


@pytest.mark.parametrize("chk", [L.check_buckets, L.check_order_and_size, L.check_arguments_and_edges, L.check_waste])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def test_stub_fails_together():
    with pytest.raises(LabCheckFailed):
        L.check_bucketing_pays(stub, stub)


# --------------------------------------------------------------------------- the differential checks


def nearest_bucket(lengths, width, max_batch):
    """Units: round(length / width) instead of rounding up: 1..8 and 9..24 share buckets with width 16."""
    return _by_key(lengths, max_batch, lambda n: round(n / width))


def floor_plus_one(lengths, width, max_batch):
    """Units: length // width + 1, which sends an exact multiple of width (16 with width 16) to the next bucket."""
    return _by_key(lengths, max_batch, lambda n: n // width + 1)


def truncates_at_64(lengths, width, max_batch):
    """Boundary: clamps every length to the chapter model's 64 tokens first, so 70 and 100 share 64's bucket."""
    return _by_key(lengths, max_batch, lambda n: math.ceil(min(n, 64) / width))


def zero_joins_first_bucket(lengths, width, max_batch):
    """Boundary: max(1, ...) so that an empty text 'has a bucket': 0 tokens joins lengths 1..width."""
    return _by_key(lengths, max_batch, lambda n: max(1, math.ceil(n / width)))


def buckets_in_place(lengths, width, max_batch):
    """State: replaces the caller's lengths by their buckets to save a list."""
    if isinstance(lengths, list):
        for i, n in enumerate(lengths):
            lengths[i] = math.ceil(n / width)
        return _by_key(lengths, max_batch, lambda b: b)
    return bucket_batches(lengths, width, max_batch)


def cached_by_shape(lengths, width, max_batch, _seen={}):
    """State: caches the plan by (number of requests, width, max_batch): another queue of the same size is not seen."""
    key = (len(lengths), width, max_batch)
    if key not in _seen:
        _seen[key] = bucket_batches(lengths, width, max_batch)
    return [list(b) for b in _seen[key]]


def consecutive_runs(lengths, width, max_batch):
    """Order: a batch takes only the run of same-bucket requests right after the leader, stopping at another bucket."""
    out, i = [], 0
    while i < len(lengths):
        bucket, batch = math.ceil(lengths[i] / width), [i]
        i += 1
        while i < len(lengths) and len(batch) < max_batch and math.ceil(lengths[i] / width) == bucket:
            batch.append(i)
            i += 1
        out.append(batch)
    return out


def shortest_of_the_bucket(lengths, width, max_batch):
    """Order: the leader's batch takes the shortest of its bucket (tighter padding), not the oldest."""
    waiting, out = list(range(len(lengths))), []
    while waiting:
        bucket = math.ceil(lengths[waiting[0]] / width)
        same = [i for i in waiting if math.ceil(lengths[i] / width) == bucket]
        batch = sorted([waiting[0], *sorted(same[1:], key=lambda i: lengths[i])[: max_batch - 1]])
        out.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return out


def _by_key(lengths, max_batch, key):
    waiting, out = list(range(len(lengths))), []
    while waiting:
        bucket = key(lengths[waiting[0]])
        batch = [i for i in waiting if key(lengths[i]) == bucket][:max_batch]
        out.append(batch)
        waiting = [i for i in waiting if i not in batch]
    return out


def rounded_share(batches, lengths):
    """Units: the share rounded to two decimals before it is returned."""
    return round(padding_waste(batches, lengths), 2)


def whole_percent(batches, lengths):
    """Units: whole percent by integer division, then back to a share."""
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) * 100 // slots / 100 if slots else 0.0


def guards_on_lengths(batches, lengths):
    """Boundary: guards 'no lengths' instead of 'no slots': no batches over some lengths divide by zero."""
    if len(lengths) == 0:
        return 0.0
    slots = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return (slots - sum(lengths[i] for b in batches for i in b)) / slots


def guards_on_first_batch(batches, lengths):
    """Boundary: looks at batches[0] to decide whether there is anything, which fails on no batches."""
    if not batches[0]:
        return 0.0
    return padding_waste(batches, lengths)


def running_totals(batches, lengths, _totals=[0, 0]):
    """State: keeps the slot and token totals between calls, as a dashboard counter would."""
    _totals[0] += sum(len(b) * max(lengths[i] for i in b) for b in batches)
    _totals[1] += sum(lengths[i] for b in batches for i in b)
    return (_totals[0] - _totals[1]) / _totals[0] if _totals[0] else 0.0


def sorts_each_batch(batches, lengths):
    """State: sorts each of the caller's batches by length to read the longest off its end."""
    slots = real = 0
    for b in batches:
        b.sort(key=lambda i: lengths[i])
        slots += len(b) * lengths[b[-1]]
        real += sum(lengths[i] for i in b)
    return (slots - real) / slots if slots else 0.0


def last_is_longest(batches, lengths):
    """Order: takes a batch's last member as its longest, as if batches were sorted by length."""
    slots = sum(len(b) * lengths[b[-1]] for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / slots if slots else 0.0


def leader_is_longest(batches, lengths):
    """Order: pads each batch to its first member (its leader), not its longest."""
    slots = sum(len(b) * lengths[b[0]] for b in batches)
    real = sum(lengths[i] for b in batches for i in b)
    return (slots - real) / slots if slots else 0.0


OLD_WRONG_BATCHES = [
    floor_bucket,
    bucket_by_bucket,
    sorted_by_bucket,
    no_max_batch,
    fixed_width,
    sorts_by_length,
    lifo_in_bucket,
    sorts_in_place,
]
NEW_WRONG_BATCHES = [
    nearest_bucket,
    floor_plus_one,
    truncates_at_64,
    zero_joins_first_bucket,
    buckets_in_place,
    cached_by_shape,
    consecutive_runs,
    shortest_of_the_bucket,
]
OLD_WRONG_WASTE = [
    global_max_waste,
    mean_of_ratios,
    over_real_tokens,
    efficiency,
    all_lengths_real,
    percent,
    no_empty_guard,
]
NEW_WRONG_WASTE = [
    rounded_share,
    whole_percent,
    guards_on_lengths,
    guards_on_first_batch,
    running_totals,
    sorts_each_batch,
    last_is_longest,
    leader_is_longest,
]


def test_right_answers_agree_with_the_reference():
    for fn in (bucket_batches, bucket_batches_alt, L.reference_batches):
        L.check_batches_same_as_reference(fn)
    L.check_waste_same_as_reference(padding_waste)
    L.check_waste_same_as_reference(L._waste)


@pytest.mark.parametrize("wrong", OLD_WRONG_BATCHES + NEW_WRONG_BATCHES)
def test_the_batches_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"^bucket_batches: the same batches .*: on lengths="):
        L.check_batches_same_as_reference(wrong)


@pytest.mark.parametrize("wrong", OLD_WRONG_WASTE + NEW_WRONG_WASTE)
def test_the_waste_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"^padding_waste: the same share .*: on batches="):
        L.check_waste_same_as_reference(wrong)


def test_the_differential_checks_name_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed, match=r"lengths=\[70, 100, 65, 5\].*should be \[\[0, 2\], \[1\], \[3\]\]"):
        L.check_batches_same_as_reference(truncates_at_64)
    with pytest.raises(LabCheckFailed, match=r"changed its input `lengths`"):
        L.check_batches_same_as_reference(buckets_in_place)
    with pytest.raises(LabCheckFailed, match=r"changed its input `batches`"):
        L.check_waste_same_as_reference(sorts_each_batch)
    with pytest.raises(LabCheckFailed, match=r"on batches=\[\], lengths=\[\d.*ZeroDivisionError.*returns 0.0"):
        L.check_waste_same_as_reference(guards_on_lengths)


@pytest.mark.parametrize("chk", [L.check_batches_same_as_reference, L.check_waste_same_as_reference])
def test_the_differential_checks_fail_a_stub(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)
