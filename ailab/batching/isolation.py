"""Error isolation for a batch function: find the bad items of a failing batch by bisection (topic S3).

One poisoned input (too long, malformed, a shape the model chokes on) must not fail the other
requests that happened to share its batch. Retrying every item alone finds it, but costs N+1
forward passes for one bad item in N, and runs the good items at batch size 1. Bisection splits
the failing batch in halves and splits again only the halves that fail: one bad item in 32 costs
1 + 2*log2(32) = 11 passes, and the good items are still answered in batches (16, 8, 4, 2, 1).

The price is the opposite case: when *every* item fails, bisection pays 2N-1 passes instead of
N+1. That is a model failing on everything, which isolation cannot fix anyway (health checks and
alerts have to say so); the common case, one bad input in a busy batch, is the one to make cheap.

Only `Exception` is isolated. A BaseException (KeyboardInterrupt, SystemExit, a crash signalled
that way) is not any item's fault, so it propagates and stops the caller.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

Outcome = tuple[bool, Any]  # (True, result) or (False, the exception that fails this item)


def check_results(results, n: int) -> list[Outcome]:
    """Turn what the batch function returned into one outcome per item.

    A returned Exception instance fails only its item (e.g. "input too long") without a retry;
    returning the wrong number of results is an error of the whole call.
    """
    results = list(results)
    if len(results) != n:
        raise RuntimeError(f"the batch function returned {len(results)} results for {n} items")
    return [(False, r) if isinstance(r, BaseException) else (True, r) for r in results]


def run_isolated(fn: Callable[[list], Sequence], items: list) -> tuple[list[Outcome], int]:
    """Run `fn(items)`; if it raises, bisect so only the items that fail on their own fail.

    Returns (one outcome per item, in order; the number of forward passes it took).
    Each failed item carries the exception that `fn([item])` raised for it alone.
    """
    passes = 0

    def run(part: list) -> list[Outcome]:
        nonlocal passes
        passes += 1
        try:
            return check_results(fn(part), len(part))
        except Exception as e:  # noqa: BLE001 - any model error: look for the item(s) that cause it
            if len(part) == 1:
                return [(False, e)]  # found one: it fails alone, with its own error
        mid = len(part) // 2  # the good half comes back in one pass, still batched
        return run(part[:mid]) + run(part[mid:])

    return run(list(items)), passes
