"""The swap-plan exercise's checks pass the right answer and reject plausible wrong ones.

swap_plan(loaded, swapping, new_bytes, budget) -> list[str]
| question | what the checks try |
|---|---|
| which input varies each field | loaded (order, sizes), swapping (first, middle, last, not loaded), new_bytes (smaller, equal, bigger than old), budget each alone |
| boundaries | total == budget and one byte under; old + new == budget (fits after evicting all others) and one byte over; nothing loaded; a first load bigger than the whole budget |
| a shape the notes never show | swapping at the LRU end; GiB sizes; a model list that is only the swapped one |
| order or ties | LRU order against size order (a big model second); several equal sizes (100, 100, 100) |
| errors: type and message | SwapRefusedError (not ValueError, not a returned list), also for a first load; its message gives old, new and budget |
| policy: which item | which models are evicted (least recently used first, never swapping, only as many as needed) and in what order |

Each wrong answer is one class of mistake (the old version not counted, the new one not counted, the swapped
model evicted, most recently used first, biggest first, an off-by-one at the budget, a refusal returned or of the
wrong type, a constant budget, the caller's list mutated, a first load that crashes, ...).
"""

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_swap_plan as L
from ailab.server.registry import SwapRefusedError


def swap_plan(loaded, swapping, new_bytes, budget):
    sizes = dict(loaded)
    if sizes.get(swapping, 0) + new_bytes > budget:
        raise SwapRefusedError(
            f"{swapping}: old ({sizes.get(swapping, 0)} bytes) and new ({new_bytes} bytes) "
            f"versions exceed the budget of {budget} bytes"
        )
    used = sum(sizes.values()) + new_bytes
    evict = []
    for name, n in loaded:
        if used <= budget:
            break
        if name != swapping:
            evict.append(name)
            used -= n
    return evict


def swap_plan_alt(loaded, swapping, new_bytes, budget):
    """Also right: counts what is kept instead of what is evicted."""
    others = [(n, b) for n, b in loaded if n != swapping]
    old = sum(b for n, b in loaded if n == swapping)
    for k in range(len(others) + 1):
        if old + new_bytes + sum(b for _, b in others[k:]) <= budget:
            return [n for n, _ in others[:k]]
    raise SwapRefusedError(
        f"{old / 2**20:g} MiB old + {new_bytes / 2**20:g} MiB new do not fit in {budget / 2**20:g} MiB"
    )


def forgets_old(loaded, swapping, new_bytes, budget):
    """Counts the new version instead of the old one: the arithmetic of a plain reload, not a hot swap."""
    return swap_plan([(n, b) for n, b in loaded if n != swapping], swapping, new_bytes, budget)


def forgets_new(loaded, swapping, new_bytes, budget):
    return (
        swap_plan(loaded, swapping, 0, budget)
        if dict(loaded).get(swapping, 0) + new_bytes <= budget
        else swap_plan(loaded, swapping, new_bytes, budget)
    )


def evicts_swapping(loaded, swapping, new_bytes, budget):
    used, evict = sum(b for _, b in loaded) + new_bytes, []
    if dict(loaded).get(swapping, 0) + new_bytes > budget:
        raise SwapRefusedError("too big")
    for name, n in loaded:
        if used <= budget:
            break
        evict.append(name)
        used -= n
    return evict


def most_recent_first(loaded, swapping, new_bytes, budget):
    return swap_plan(list(reversed(loaded)), swapping, new_bytes, budget)


def biggest_first(loaded, swapping, new_bytes, budget):
    return swap_plan(sorted(loaded, key=lambda nb: -nb[1]), swapping, new_bytes, budget)


def strict_budget(loaded, swapping, new_bytes, budget):
    """Needs strictly less than the budget: a plan that exactly fills it evicts one model too many."""
    return swap_plan(loaded, swapping, new_bytes, budget - 1)


def evicts_all_others(loaded, swapping, new_bytes, budget):
    plan = swap_plan(loaded, swapping, new_bytes, budget)
    return [n for n, _ in loaded if n != swapping] if plan else []


def returns_everything_instead_of_refusing(loaded, swapping, new_bytes, budget):
    try:
        return swap_plan(loaded, swapping, new_bytes, budget)
    except SwapRefusedError:
        return [n for n, _ in loaded if n != swapping]


def raises_value_error(loaded, swapping, new_bytes, budget):
    try:
        return swap_plan(loaded, swapping, new_bytes, budget)
    except SwapRefusedError as e:
        raise ValueError(str(e)) from None


def refuses_when_everything_is_over(loaded, swapping, new_bytes, budget):
    """Refuses whenever the total is over the budget, instead of evicting first."""
    if sum(b for _, b in loaded) + new_bytes > budget:
        raise SwapRefusedError("over budget")
    return []


def fixed_budget(loaded, swapping, new_bytes, budget):
    return swap_plan(loaded, swapping, new_bytes, 1000 * L.MB)


def pops_from_loaded(loaded, swapping, new_bytes, budget):
    plan = swap_plan(loaded, swapping, new_bytes, budget)
    for name in plan:
        loaded.remove(next(x for x in loaded if x[0] == name))
    return plan


def first_load_crashes(loaded, swapping, new_bytes, budget):
    old = dict(loaded)[swapping]
    return swap_plan(loaded, swapping, new_bytes, budget) if old >= 0 else []


def returns_pairs(loaded, swapping, new_bytes, budget):
    plan = swap_plan(loaded, swapping, new_bytes, budget)
    return [x for x in loaded if x[0] in plan]


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (swap_plan, swap_plan_alt):
        L.check_fits(fn)
        L.check_lru(fn)
        L.check_refuses(fn)
        L.check_first_load_and_sizes(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_fits, forgets_old, r"budget 800 MiB minus 1 byte: 800 MiB does not fit.*got \[\]"),
        (L.check_fits, forgets_new, r"one byte under 800 MiB"),
        (L.check_fits, strict_budget, r"800 MiB fits; evict nothing, got \['a'\]"),
        (L.check_fits, fixed_budget, r"minus 1 byte: 800 MiB does not fit one byte under 800 MiB.*got \[\]"),
        (L.check_fits, pops_from_loaded, "changed the `loaded` list it was given"),
        (L.check_fits, returns_pairs, "should return a list of model names"),
        (L.check_lru, evicts_swapping, r"the plan evicts 'x', the model being swapped \(least recently used or not\)"),
        (L.check_lru, most_recent_first, r"the plan is \['old', 'big'\]; got \['new', 'mid', 'big'\]"),
        (L.check_lru, biggest_first, r"the plan is \['old', 'big'\]; got \['big'\]"),
        (L.check_lru, evicts_all_others, r"stop as soon as it fits"),
        (L.check_lru, forgets_old, r"so the plan is \['old', 'big'\]; got \[\]"),
        (
            L.check_lru,
            refuses_when_everything_is_over,
            "swap_plan refused .* refuse only when the old and new versions",
        ),
        (
            L.check_refuses,
            returns_everything_instead_of_refusing,
            "raise ailab.server.registry.SwapRefusedError.*; it returned",
        ),
        (
            L.check_refuses,
            raises_value_error,
            r"raise ailab.server.registry.SwapRefusedError.*your code raised ValueError",
        ),
        (
            L.check_refuses,
            strict_budget,
            r"swap_plan refused .*exactly the budget|refuse only when|does not give the budget",
        ),
        (L.check_first_load_and_sizes, first_load_crashes, r"swapping 'c'.*your code raised KeyError"),
        (L.check_first_load_and_sizes, strict_budget, r"29 GiB fits exactly"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", [L.check_fits, L.check_lru, L.check_refuses, L.check_first_load_and_sizes])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def first_load_never_refused(loaded, swapping, new_bytes, budget):
    """Refuses only a model already loaded: a first load bigger than the budget evicts everything and goes ahead."""
    if swapping in dict(loaded):
        return swap_plan(loaded, swapping, new_bytes, budget)
    return [name for name, _ in loaded]


def refusal_without_sizes(loaded, swapping, new_bytes, budget):
    try:
        return swap_plan(loaded, swapping, new_bytes, budget)
    except SwapRefusedError:
        raise SwapRefusedError("swap refused: not enough memory") from None


def refusal_names_the_budget_only(loaded, swapping, new_bytes, budget):
    try:
        return swap_plan(loaded, swapping, new_bytes, budget)
    except SwapRefusedError:
        raise SwapRefusedError(f"{swapping}: does not fit in {budget} bytes") from None


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_refuses,
            first_load_never_refused,
            r"swapping 'c' to a 900 MiB version.*a first load of 900 MiB is more "
            r"than the whole budget.*it returned \['a', 'b'\]",
        ),
        (L.check_refuses, refusal_without_sizes, r"does not give the new version and the budget and the old version"),
        (L.check_refuses, refusal_names_the_budget_only, r"does not give the new version and the old version"),
    ],
)
def test_boundaries_and_messages_nobody_listed(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check


def _evict_lru(loaded, swapping, total, budget, same=lambda a, b: a == b):
    evict = []
    for name, n in loaded:
        if total <= budget:
            break
        if not same(name, swapping):
            evict.append(name)
            total -= n
    return evict


def whole_mib(loaded, swapping, new_bytes, budget):
    """Units: works in whole MiB (bytes // 2**20), so sizes and budgets a few bytes apart look equal."""
    mib = {n: b // L.MB for n, b in loaded}
    new, cap = new_bytes // L.MB, budget // L.MB
    if mib.get(swapping, 0) + new > cap:
        raise SwapRefusedError(f"old {mib.get(swapping, 0)} MiB + new {new} MiB > budget {cap} MiB")
    return _evict_lru([(n, mib[n]) for n, _ in loaded], swapping, sum(mib.values()) + new, cap)


def gib_to_one_decimal(loaded, swapping, new_bytes, budget):
    """Units: sizes in GiB rounded to one decimal, as a dashboard shows them, before comparing."""

    def gib(b):
        return round(b / 2**30, 1)

    sizes = {n: gib(b) for n, b in loaded}
    new, cap = gib(new_bytes), gib(budget)
    if sizes.get(swapping, 0) + new > cap:
        raise SwapRefusedError(f"old {sizes.get(swapping, 0)} GiB + new {new} GiB > budget {cap} GiB")
    return _evict_lru([(n, sizes[n]) for n, _ in loaded], swapping, sum(sizes.values()) + new, cap)


def index_zero_falsy(loaded, swapping, new_bytes, budget):
    """Boundary: finds the swapped model's index and tests it for truth: at index 0 (the LRU end) old counts as 0."""
    idx = next((i for i, (n, _) in enumerate(loaded) if n == swapping), None)
    old = loaded[idx][1] if idx else 0
    if old + new_bytes > budget:
        raise SwapRefusedError(f"old ({old} bytes) and new ({new_bytes} bytes) exceed the budget of {budget} bytes")
    return _evict_lru(loaded, swapping, sum(b for _, b in loaded) + new_bytes, budget)


def int32_sizes(loaded, swapping, new_bytes, budget):
    """Boundary: sizes in an int32 numpy array: a model past 2**31 bytes overflows."""
    import numpy as np

    sizes = np.array([b for _, b in loaded], dtype=np.int32)
    old = int(sum(s for (n, _), s in zip(loaded, sizes) if n == swapping))
    if old + new_bytes > budget:
        raise SwapRefusedError(f"old ({old} bytes) and new ({new_bytes} bytes) exceed the budget of {budget} bytes")
    return _evict_lru(loaded, swapping, int(sizes.sum()) + new_bytes, budget)


def mutable_default(loaded, swapping, new_bytes, budget, evict=[]):
    """State: the plan is a mutable default argument, so every call adds to the names of the calls before it."""
    sizes = dict(loaded)
    if sizes.get(swapping, 0) + new_bytes > budget:
        raise SwapRefusedError(f"old ({sizes.get(swapping, 0)}) + new ({new_bytes}) > budget ({budget}) bytes")
    total = sum(sizes.values()) + new_bytes
    for name, n in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n
    return evict


def removes_swapping(loaded, swapping, new_bytes, budget):
    """State: takes the swapped model out of the caller's list first, to walk only the others."""
    old = dict(loaded).get(swapping, 0)
    if swapping in dict(loaded):
        loaded.remove((swapping, old))
    if old + new_bytes > budget:
        raise SwapRefusedError(f"old ({old} bytes) and new ({new_bytes} bytes) exceed the budget of {budget} bytes")
    return _evict_lru(loaded, swapping, sum(b for _, b in loaded) + old + new_bytes, budget)


def case_insensitive(loaded, swapping, new_bytes, budget):
    """Parsing: matches the swapped model's name ignoring case, so 'bert' is never evicted while 'BERT' swaps."""
    sizes = dict(loaded)
    if sizes.get(swapping, 0) + new_bytes > budget:
        raise SwapRefusedError(f"old ({sizes.get(swapping, 0)}) + new ({new_bytes}) > budget ({budget}) bytes")
    total = sum(sizes.values()) + new_bytes
    return _evict_lru(loaded, swapping, total, budget, same=lambda a, b: a.lower() == b.lower())


def alphabetical(loaded, swapping, new_bytes, budget):
    """Order: walks dict(loaded) sorted by name, not the list's least-recently-used order."""
    return swap_plan(sorted(dict(loaded).items()), swapping, new_bytes, budget)


def evicted_newest_first(loaded, swapping, new_bytes, budget):
    """Order: the right models, but listed from the most recently used of them."""
    return list(reversed(swap_plan(loaded, swapping, new_bytes, budget)))


OLD_WRONG = [
    forgets_old,
    forgets_new,
    evicts_swapping,
    most_recent_first,
    biggest_first,
    strict_budget,
    evicts_all_others,
    returns_everything_instead_of_refusing,
    raises_value_error,
    refuses_when_everything_is_over,
    fixed_budget,
    pops_from_loaded,
    first_load_crashes,
    returns_pairs,
    first_load_never_refused,
]
NEW_WRONG = [
    whole_mib,
    gib_to_one_decimal,
    index_zero_falsy,
    int32_sizes,
    mutable_default,
    removes_swapping,
    case_insensitive,
    alphabetical,
    evicted_newest_first,
]


def test_right_answers_agree_with_the_reference():
    for fn in (swap_plan, swap_plan_alt, L._reference_swap_plan):
        L.check_same_as_reference(fn)
    for chk in (L.check_fits, L.check_lru, L.check_refuses, L.check_first_load_and_sizes):
        chk(L._reference_swap_plan)


@pytest.mark.parametrize("wrong", OLD_WRONG + NEW_WRONG)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"^agrees with the contract on every swap tried: on loaded="):
        L.check_same_as_reference(wrong)


@pytest.mark.parametrize("wrong", [refusal_without_sizes, refusal_names_the_budget_only])
def test_the_refusals_words_are_left_to_check_refuses(wrong):
    """The differential check compares the refusal's type, not its message: check_refuses says what it must name."""
    L.check_same_as_reference(wrong)
    with pytest.raises(LabCheckFailed, match="does not give"):
        L.check_refuses(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(
        LabCheckFailed, match=r"\('bert', 100\), \('BERT', 100\)\].*should be \['bert'\]; yours is \[\]"
    ):
        L.check_same_as_reference(case_insensitive)
    with pytest.raises(LabCheckFailed, match=r"changed its input `loaded`"):
        L.check_same_as_reference(removes_swapping)
    with pytest.raises(LabCheckFailed, match=r"3221225472.*your code raised OverflowError"):
        L.check_same_as_reference(int32_sizes)


def test_the_differential_check_fails_a_stub():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
