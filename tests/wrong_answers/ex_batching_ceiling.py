"""Independent wrong answers for ex_batching_ceiling, written from labs/3_serving/ex_batching_ceiling.ipynb's contract alone."""


def batching_ceiling(batch_ms):
    if 1 not in batch_ms:
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sorted(batch_ms)})")
    per_item = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per_item), key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


def floor_div_per_item(batch_ms):
    """Per-item time with floor division: whole milliseconds are enough for a ratio."""
    # differs on {1: 4.0, 3: 10.0}: per_item[3] = 3.0 instead of 3.333.., ceiling 1.333 instead of 1.2
    if 1 not in batch_ms:
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sorted(batch_ms)})")
    per_item = {b: ms // b for b, ms in batch_ms.items()}
    best = min(sorted(per_item), key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


def batch_1_not_a_candidate(batch_ms):
    """Looks for the best batch among the real batches only (size > 1), since batch 1 is the baseline."""
    # differs on {1: 2.0, 4: 12.0} (batching never helps): best 4, ceiling 0.667 instead of best 1, ceiling 1.0
    if 1 not in batch_ms:
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sorted(batch_ms)})")
    per_item = {b: ms / b for b, ms in batch_ms.items()}
    candidates = [b for b in sorted(per_item) if b > 1] or [1]
    best = min(candidates, key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


def overwrites_argument(batch_ms):
    """Turns the batch times into per-item times in place and returns the same dict."""
    # differs on {1: 4.0, 8: 12.0}: the caller's dict now holds {1: 4.0, 8: 1.5} (argument mutated)
    if 1 not in batch_ms:
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sorted(batch_ms)})")
    for b in list(batch_ms):
        batch_ms[b] = batch_ms[b] / b
    per_item = batch_ms
    best = min(sorted(per_item), key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


def only_empty_refused(batch_ms):
    """Refuses only an empty dict; a dict without batch 1 falls through to a lookup."""
    # differs on {4: 8.0, 8: 12.0}: raises TypeError (None / float) instead of ValueError
    if not batch_ms:
        raise ValueError("no measurements")
    per_item = {b: ms / b for b, ms in batch_ms.items()}
    best = min(sorted(per_item), key=per_item.get)
    return {"per_item_ms": per_item, "ceiling": per_item.get(1) / per_item[best], "best_batch": best}


def tie_goes_to_larger(batch_ms):
    """Walks the sizes in ascending order keeping the best so far with <=, so an equal later size replaces it."""
    # differs on {1: 4.0, 2: 4.0, 4: 8.0}: best_batch 4 instead of 2 (2 and 4 tie at 2.0 ms per item)
    if 1 not in batch_ms:
        raise ValueError(f"the ceiling is measured against batch 1, which is missing (batch sizes: {sorted(batch_ms)})")
    per_item = {b: ms / b for b, ms in batch_ms.items()}
    best = None
    for b in sorted(per_item):
        if best is None or per_item[b] <= per_item[best]:
            best = b
    return {"per_item_ms": per_item, "ceiling": per_item[1] / per_item[best], "best_batch": best}


RIGHT = {"batching_ceiling": batching_ceiling}
WRONG = [
    ("batching_ceiling", floor_div_per_item, "units/rounding"),
    ("batching_ceiling", batch_1_not_a_candidate, "misread prose"),
    ("batching_ceiling", overwrites_argument, "state: mutated argument"),
    ("batching_ceiling", only_empty_refused, "error handling"),
    ("batching_ceiling", tie_goes_to_larger, "boundaries"),
]
