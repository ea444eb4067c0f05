"""Independent wrong answers for ex_swap_plan, written from labs/3_serving/ex_swap_plan.ipynb's contract alone."""

from ailab.server.registry import SwapRefusedError


def swap_plan(loaded, swapping, new_bytes, budget):
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes > budget:
        raise SwapRefusedError(
            f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) versions side "
            f"by side exceed the budget of {budget} bytes"
        )
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


def full_budget_does_not_fit(loaded, swapping, new_bytes, budget):
    """Treats a total equal to the budget as full: it must stay strictly below."""
    # differs on [("a", 3), ("b", 2)], "b", 5, 10: ["a"] instead of []
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes >= budget:
        raise SwapRefusedError(f"{swapping!r}: {old_bytes} + {new_bytes} bytes do not fit in {budget} bytes")
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total < budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


def refuses_on_new_only(loaded, swapping, new_bytes, budget):
    """Refuses only when the new version alone exceeds the budget (the old one is being replaced)."""
    # differs on [("b", 6)], "b", 5, 10: [] instead of SwapRefusedError
    sizes = dict(loaded)
    if new_bytes > budget:
        raise SwapRefusedError(f"{swapping!r}: new version ({new_bytes} bytes) exceeds the budget of {budget} bytes")
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


def removes_from_loaded(loaded, swapping, new_bytes, budget):
    """Removes each evicted model from `loaded` as it goes, so the list reflects the plan."""
    # differs on L = [("a", 4), ("b", 4), ("c", 4)], "b", 4, 12: returns ["a"] but L is now [("b", 4), ("c", 4)]
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes > budget:
        raise SwapRefusedError(f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) exceed {budget}")
    evict = []
    for name, n_bytes in list(loaded):
        if sum(b for _, b in loaded) + new_bytes <= budget:
            break
        if name != swapping:
            evict.append(name)
            loaded.remove((name, n_bytes))
    return evict


def evicts_from_the_back(loaded, swapping, new_bytes, budget):
    """Walks the list from its end, taking the last entry as the least recently used."""
    # differs on [("a", 4), ("b", 4), ("c", 4)], "b", 4, 12: ["c"] instead of ["a"]
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes > budget:
        raise SwapRefusedError(f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) exceed {budget}")
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in reversed(loaded):
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


def refuses_with_value_error(loaded, swapping, new_bytes, budget):
    """Signals the impossible swap with a ValueError."""
    # differs on [("b", 6)], "b", 5, 10: ValueError instead of SwapRefusedError
    sizes = dict(loaded)
    old_bytes = sizes.get(swapping, 0)
    if old_bytes + new_bytes > budget:
        raise ValueError(f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) exceed {budget} bytes")
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


def assumes_swapping_loaded(loaded, swapping, new_bytes, budget):
    """Looks the old version's size up directly: a swap always replaces a loaded model."""
    # differs on [("a", 4)], "z", 4, 6: KeyError instead of ["a"]
    sizes = dict(loaded)
    old_bytes = sizes[swapping]
    if old_bytes + new_bytes > budget:
        raise SwapRefusedError(f"{swapping!r}: old ({old_bytes} bytes) and new ({new_bytes} bytes) exceed {budget}")
    total = sum(sizes.values()) + new_bytes
    evict = []
    for name, n_bytes in loaded:
        if total <= budget:
            break
        if name != swapping:
            evict.append(name)
            total -= n_bytes
    return evict


RIGHT = {"swap_plan": swap_plan}
WRONG = [
    ("swap_plan", full_budget_does_not_fit, "boundaries"),
    ("swap_plan", refuses_on_new_only, "misread prose"),
    ("swap_plan", removes_from_loaded, "state: mutated argument"),
    ("swap_plan", evicts_from_the_back, "order"),
    ("swap_plan", refuses_with_value_error, "error handling"),
    ("swap_plan", assumes_swapping_loaded, "boundaries: first load"),
]
