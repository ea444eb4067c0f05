"""What the DynamicBatcher promises its callers: its errors, its priority range, its statistics, and
bucket functions. Kept apart from the batcher's machinery (batcher.py; the package re-exports all of it)
so each file reads in one sitting.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Priorities are plain integers in this range (the server's X-Priority, 4 characters, fits inside).
# The bound catches caller bugs early (a timestamp or a float passed as priority) with a clear message.
MIN_PRIORITY, MAX_PRIORITY = -9_999, 9_999


def _check_priority(priority) -> int:
    try:
        value = operator.index(priority)  # ints (and numpy ints); not floats, strings or None
    except TypeError:
        value = None
    if value is None or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, higher served first (got {priority!r})"
        )
    return value


class QueueFullError(RuntimeError):
    """The batcher's queue holds max_queue requests: shed load now (HTTP 503 + Retry-After)."""


class DeadlineExceededError(TimeoutError):
    """The request's deadline passed before its batch was computed (HTTP 504)."""


class BatcherClosedError(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


class BatcherError(RuntimeError):
    """The batcher itself (not the model's answer for this item) failed while handling this request."""


class BatcherDeadError(BatcherError):
    """The batcher's collector has stopped: nothing is computed until the batcher is replaced."""


@dataclass
class BatcherStats:
    """Counters since start. Lists are bounded to the most recent `window` samples."""

    window: int = 10_000
    batches: int = 0
    items: int = 0
    rejected: int = 0  # queue full
    expired: int = 0  # deadline passed before compute
    failed: int = 0  # items whose computation raised
    retried_batches: int = 0  # batches that raised and were bisected to find the bad items
    isolation_passes: int = 0  # extra forward passes that bisection cost
    hook_errors: int = 0  # on_batch raised (the batch was answered anyway)
    loop_errors: int = 0  # the collector failed on a batch (its requests got BatcherError)
    busy_s: float = 0.0  # worker time spent computing batches
    first_start: float = 0.0  # monotonic time the first batch started
    last_end: float = 0.0  # ... and the latest batch ended
    batch_sizes: Counter = field(default_factory=Counter)
    queue_wait_ms: deque = field(default_factory=deque)
    compute_ms: deque = field(default_factory=deque)

    def _add(self, dq: deque, value: float) -> None:
        dq.append(value)
        if len(dq) > self.window:
            dq.popleft()

    def as_dict(self) -> dict:
        def pct(dq, q):  # numpy's percentile, as latency_stats uses: one definition across the course
            return float(np.percentile(dq, 100 * q)) if dq else math.nan

        return {
            "batches": self.batches,
            "items": self.items,
            "rejected": self.rejected,
            "expired": self.expired,
            "failed": self.failed,
            "retried_batches": self.retried_batches,
            "isolation_passes": self.isolation_passes,
            "hook_errors": self.hook_errors,
            "loop_errors": self.loop_errors,
            "mean_batch_size": self.items / self.batches if self.batches else 0.0,
            "worker_utilization": self.busy_s / span if (span := self.last_end - self.first_start) > 0 else 0.0,
            "batch_size_hist": dict(sorted(self.batch_sizes.items())),
            "queue_wait_p50_ms": pct(self.queue_wait_ms, 0.5),
            "queue_wait_p99_ms": pct(self.queue_wait_ms, 0.99),
            "compute_p50_ms": pct(self.compute_ms, 0.5),
            "compute_p99_ms": pct(self.compute_ms, 0.99),
        }


def length_bucket(width: int = 16, length: Callable[[Any], int] = len) -> Callable[[Any], int]:
    """A bucket function: items whose length falls in the same `width`-wide band batch together."""
    if width < 1:
        raise ValueError(f"length_bucket(width={width}): width must be at least 1")
    return lambda item: (length(item) - 1) // width if length(item) > 0 else 0
