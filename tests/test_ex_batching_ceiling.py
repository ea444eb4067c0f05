"""The batching-ceiling exercise's checks pass the right answer and reject plausible wrong ones.

batching_ceiling(batch_ms) -> {"per_item_ms", "ceiling", "best_batch"}
| question | what the checks try |
|---|---|
| which input varies each field | per_item_ms by sizes alone (1, 3, 8, 32, 48, 128), best_batch and ceiling by the times alone (monotone, non-monotone, flat) |
| boundaries | batch 1 alone (ceiling 1.0); batching that never helps (ceiling 1.0, not below); no batch 1; an empty dict |
| a type the notes never show | sizes and times straight from numpy arrays (np.int64 keys, np.float64 values) |
| order or ties | keys out of order (batch 1 not first); a tie at the best per-item time with the larger batch listed first; a tie with batch 1 |
| errors: type and message | ValueError (not KeyError, not a ceiling from another size) that names batch 1 |
| policy: which item | which batch is best: the lowest per-item time, the smaller on a tie, not the largest |

Each wrong answer is one class of mistake (the largest batch taken as the best, batch times compared instead of
per-item times, throughput for per-item time, the larger batch on a tie, the first key as the baseline, a
ceiling below 1, a KeyError for a missing batch 1, a ceiling taken from another size, ...).
"""

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_batching_ceiling as E


def batching_ceiling(batch_ms):
    if 1 not in batch_ms:
        raise ValueError(f"batch 1 is missing from {sorted(batch_ms)}")
    per = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=per.get)
    return {"per_item_ms": per, "ceiling": per[1] / per[best], "best_batch": best}


def batching_ceiling_alt(batch_ms):
    """Also right: an explicit loop in ascending order with a strict comparison."""
    if not batch_ms or 1 not in batch_ms:
        raise ValueError("need a measurement at batch size 1")
    per, best = {}, None
    for b in sorted(batch_ms):
        per[b] = batch_ms[b] / b
        if best is None or per[b] < per[best]:
            best = b
    return {"per_item_ms": per, "ceiling": float(per[1] / per[best]), "best_batch": best}


def _finish(per, best, baseline=1):
    return {"per_item_ms": per, "ceiling": per[baseline] / per[best], "best_batch": best}


def _need1(batch_ms):
    if 1 not in batch_ms:
        raise ValueError("batch 1 missing")


def largest_batch(batch_ms):
    """The chapter's formula: batch 1 against the largest batch measured."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    return _finish(per, max(per))


def batch_times(batch_ms):
    """Ranks and divides whole-batch times."""
    _need1(batch_ms)
    best = min(sorted(batch_ms), key=batch_ms.get)
    return {
        "per_item_ms": {b: ms / b for b, ms in batch_ms.items()},
        "ceiling": batch_ms[1] / batch_ms[best],
        "best_batch": best,
    }


def throughput(batch_ms):
    """Items per ms instead of ms per item."""
    _need1(batch_ms)
    per = {b: b / ms for b, ms in batch_ms.items()}
    best = max(sorted(per), key=per.get)
    return {"per_item_ms": per, "ceiling": per[best] / per[1], "best_batch": best}


def tie_larger(batch_ms):
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    return _finish(per, min(sorted(per, reverse=True), key=per.get))


def tie_dict_order(batch_ms):
    """min over the dict as given: the first listed wins a tie."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    return _finish(per, min(per, key=per.get))


def best_excludes_1(batch_ms):
    """Looks for the best among the batched sizes only: batching that never helps gives a ceiling below 1."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    others = sorted(b for b in per if b != 1) or [1]
    return _finish(per, min(others, key=per.get))


def first_key_baseline(batch_ms):
    """Takes the first key as one-at-a-time."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=per.get)
    return _finish(per, best, baseline=next(iter(per)))


def inverted(batch_ms):
    out = batching_ceiling(batch_ms)
    out["ceiling"] = 1 / out["ceiling"]
    return out


def key_error(batch_ms):
    per = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=per.get) if per else None
    return _finish(per, best)


def smallest_as_baseline(batch_ms):
    """No batch 1? Use the smallest batch measured."""
    if not batch_ms:
        raise ValueError("no batches")
    per = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=per.get)
    return _finish(per, best, baseline=min(per))


def fixed_sizes(batch_ms):
    """The example's sizes, whatever the input holds."""
    _need1(batch_ms)
    per = {b: batch_ms[b] / b for b in (1, 8, 32) if b in batch_ms}
    best = min(sorted(per), key=per.get)
    return _finish(per, best)


def per_item_by_position(batch_ms):
    """Divides by the position in sorted order instead of the batch size."""
    _need1(batch_ms)
    per = {b: batch_ms[b] / (i + 1) for i, b in enumerate(sorted(batch_ms))}
    best = min(sorted(per), key=per.get)
    return _finish(per, best)


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (batching_ceiling, batching_ceiling_alt):
        E.check_per_item(fn)
        E.check_ceiling_and_best(fn)
        E.check_needs_batch_1(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (E.check_per_item, throughput, r"should be \{1: 4.0, 8: 1.5, 32: 1.25\}"),
        (E.check_per_item, fixed_sizes, "one entry per batch size of the input"),
        (E.check_per_item, per_item_by_position, r"should be \{1: 4.0, 8: 1.5, 32: 1.25\}"),
        (E.check_ceiling_and_best, largest_batch, "best_batch should be 8 .the lowest per-item time, not the largest"),
        (E.check_ceiling_and_best, batch_times, "best_batch should be 8"),
        (E.check_ceiling_and_best, tie_larger, "best_batch should be the smaller, 8"),
        (E.check_ceiling_and_best, tie_dict_order, "best_batch should be the smaller, 8"),
        (E.check_ceiling_and_best, best_excludes_1, "nothing beats batch 1"),
        (E.check_ceiling_and_best, first_key_baseline, "the baseline is batch 1"),
        (E.check_ceiling_and_best, inverted, "ceiling should be 10 / 3"),
        (E.check_needs_batch_1, key_error, "raise ValueError saying so; your code raised KeyError"),
        (E.check_needs_batch_1, smallest_as_baseline, "has no batch 1: .*raise ValueError saying so; it returned"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", [E.check_per_item, E.check_ceiling_and_best, E.check_needs_batch_1])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def names_a_chapter_not_batch_1(batch_ms):
    """Refuses a missing batch 1 with a message whose only 1 is in a chapter number: it never names batch 1."""
    if 1 not in batch_ms:
        raise ValueError(f"no baseline among the {len(batch_ms)} sizes (see chapter 3.1)")
    return batching_ceiling(batch_ms)


def test_a_message_whose_only_1_is_another_number_does_not_name_batch_1():
    with pytest.raises(LabCheckFailed, match="should say that batch 1 is missing"):
        E.check_needs_batch_1(names_a_chapter_not_batch_1)


def python_ints_only(batch_ms):
    """Validates sizes with isinstance(b, int): numpy's np.int64 keys are refused."""
    for b in batch_ms:
        if not isinstance(b, int):
            raise TypeError(f"batch sizes must be ints; got {b!r}")
    return batching_ceiling(batch_ms)


def ceiling_in_percent(batch_ms):
    out = batching_ceiling(batch_ms)
    return {**out, "ceiling": 100 * (out["ceiling"] - 1)}


def test_numpy_sizes_and_a_ceiling_in_percent():
    with pytest.raises(LabCheckFailed, match=r"from numpy arrays.*your code raised TypeError|numbers like any other"):
        E.check_per_item(python_ints_only)
    with pytest.raises(LabCheckFailed, match=r"ceiling should be 10 / 3 = 3.33"):
        E.check_ceiling_and_best(ceiling_in_percent)


# --------------------------------------------------------------------------- the differential check


def integer_division(batch_ms):
    """Units: ms // b - whole ms per item, so 12 ms over a batch of 8 is 1, not 1.5."""
    _need1(batch_ms)
    per = {b: ms // b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=per.get)
    return {"per_item_ms": per, "ceiling": per[1] / per[best] if per[best] else float("inf"), "best_batch": best}


def rounded_before_compared(batch_ms):
    """Units: picks the best on per-item times rounded to 0.01 ms (0.999 and 1.0 tie, so batch 1 wins)."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per), key=lambda b: round(per[b], 2))
    return _finish(per, best)


def float32_arrays(batch_ms):
    """Units: vectorised in float32, so per-item times and the ceiling are off in the 8th digit."""
    import numpy as np

    _need1(batch_ms)
    sizes = np.array(list(batch_ms), dtype=np.int64)
    per_arr = np.array(list(batch_ms.values()), dtype=np.float32) / sizes.astype(np.float32)
    per = {b: float(p) for b, p in zip(batch_ms, per_arr)}
    return _finish(per, min(sorted(per), key=per.get))


def loop_le(batch_ms):
    """Boundary: an ascending loop with <= where the contract wants a strict improvement: a tie goes to the larger."""
    _need1(batch_ms)
    per, best = {}, None
    for b in sorted(batch_ms):
        per[b] = batch_ms[b] / b
        if best is None or per[b] <= per[best]:
            best = b
    return _finish(per, best)


def lone_batch_refused(batch_ms):
    """Boundary: with batch 1 alone there is 'nothing to compare', so it refuses instead of answering 1.0."""
    if len(batch_ms) < 2:
        raise ValueError("need batch 1 and at least one other batch size")
    return batching_ceiling(batch_ms)


def int32_sizes(batch_ms):
    """Boundary: batch sizes in an int32 array; a size beyond 2**31 overflows."""
    import numpy as np

    _need1(batch_ms)
    sizes = np.array(list(batch_ms), dtype=np.int32)
    times = np.array(list(batch_ms.values()), dtype=np.float64)
    per = {b: float(t / s) for b, s, t in zip(batch_ms, sizes, times)}
    return _finish(per, min(sorted(per), key=per.get))


def divides_in_place(batch_ms):
    """State: turns the caller's batch times into per-item times."""
    _need1(batch_ms)
    for b in batch_ms:
        batch_ms[b] = batch_ms[b] / b
    best = min(sorted(batch_ms), key=batch_ms.get)
    return _finish(dict(batch_ms), best)


def keeps_per_item(batch_ms, _per={}):
    """State: a mutable default collects per-item times across calls, so old batch sizes come back."""
    _need1(batch_ms)
    for b, ms in batch_ms.items():
        _per[b] = ms / b
    best = min(sorted(_per), key=_per.get)
    return {"per_item_ms": dict(_per), "ceiling": _per[1] / _per[best], "best_batch": best}


def cached_by_sizes(batch_ms, _seen={}):
    """State: caches the report by the set of batch sizes, so new measurements of the same sizes are not seen."""
    key = frozenset(int(b) for b in batch_ms)
    if key not in _seen:
        _seen[key] = batching_ceiling(batch_ms)
    return _seen[key]


def sort_desc_take_last(batch_ms):
    """Order: sorts by per-item time, slowest first, and takes the last; equal times keep the dict's order."""
    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    return _finish(per, sorted(per, key=per.get, reverse=True)[-1])


def argmin_in_dict_order(batch_ms):
    """Order: numpy's argmin over the values in the dict's order: the first listed wins a tie."""
    import numpy as np

    _need1(batch_ms)
    per = {b: ms / b for b, ms in batch_ms.items()}
    sizes = list(per)
    return _finish(per, sizes[int(np.argmin(list(per.values())))])


OLD_WRONG = [
    largest_batch,
    batch_times,
    throughput,
    tie_larger,
    tie_dict_order,
    best_excludes_1,
    first_key_baseline,
    inverted,
    key_error,
    smallest_as_baseline,
    fixed_sizes,
    per_item_by_position,
    python_ints_only,
    ceiling_in_percent,
]
NEW_WRONG = [
    integer_division,
    rounded_before_compared,
    float32_arrays,
    loop_le,
    lone_batch_refused,
    int32_sizes,
    divides_in_place,
    keeps_per_item,
    cached_by_sizes,
    sort_desc_take_last,
    argmin_in_dict_order,
]


def test_right_answers_agree_with_the_reference():
    for fn in (batching_ceiling, batching_ceiling_alt, E._reference_batching_ceiling):
        E.check_same_as_reference(fn)
    for chk in (E.check_per_item, E.check_ceiling_and_best, E.check_needs_batch_1):
        chk(E._reference_batching_ceiling)


@pytest.mark.parametrize("wrong", OLD_WRONG + NEW_WRONG)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(
        LabCheckFailed, match=r"^agrees with the contract on every set of measurements tried: on batch_ms="
    ):
        E.check_same_as_reference(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        E.check_same_as_reference(rounded_before_compared)
    assert "on batch_ms={1: 1.0, 8: 7.992}: best_batch should be 8" in str(e.value)
    assert "yours is 1" in str(e.value)
    with pytest.raises(LabCheckFailed, match=r"changed its input `batch_ms`"):
        E.check_same_as_reference(divides_in_place)
    with pytest.raises(LabCheckFailed, match=r"2147483656.*your code raised OverflowError"):
        E.check_same_as_reference(int32_sizes)


def test_the_differential_check_fails_a_stub():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        E.check_same_as_reference(stub)
