"""Dynamic batching (topics S1-S4, S6): gather concurrent requests into one forward pass. Knows no model and
no HTTP.

- batcher.py         DynamicBatcher: the collector loop, its one worker thread, admission control, close/health
- types.py           what it promises its callers: typed errors, the priority range, statistics, length buckets
- priority_queue.py  the waiting room: one FIFO per priority level, bounds, aging, the dispatch order
- isolation.py       a failing batch is bisected, so one poisoned item fails alone

`from ailab.batching import DynamicBatcher, QueueFullError, run_sync` is the whole public surface.
"""

from ailab.aio import run_sync  # notebooks drive the batcher from sync code
from ailab.batching.batcher import DynamicBatcher
from ailab.batching.isolation import run_isolated
from ailab.batching.priority_queue import PriorityLevels
from ailab.batching.types import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    BatcherClosedError,
    BatcherDeadError,
    BatcherError,
    BatcherStats,
    DeadlineExceededError,
    QueueFullError,
    length_bucket,
)

__all__ = [
    "BatcherClosedError",
    "BatcherDeadError",
    "BatcherError",
    "BatcherStats",
    "DeadlineExceededError",
    "DynamicBatcher",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "PriorityLevels",
    "QueueFullError",
    "length_bucket",
    "run_isolated",
    "run_sync",
]
