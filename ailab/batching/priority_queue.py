"""The DynamicBatcher's waiting room: one FIFO per priority level, a bound per level and in total, and the
order the collector takes requests in (batcher.py drives it; it knows no model and no HTTP).

Aging: a waiting request's effective priority is `priority + wait_s / age_s_per_level`, so a low level
is never starved. Between two waiting requests the difference of effective priorities does not change
with time (both waits grow alike), so the order is a fixed key per request: its "virtual arrival"
`arrived - priority * age_s_per_level`, smallest first, FIFO (submission order) among equals. A request
of priority p + k is served ahead of one of priority p only if it arrived less than k * age_s_per_level
seconds after it. Each level's FIFO is already sorted by that key, so the dispatch order is a k-way merge
of the levels: O(queue) to walk, no re-sorting as time passes. age_s_per_level=None: strict priority.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Any, Iterator


def check_queue_args(max_queue: int, max_queue_per_priority: int | None, age_s_per_level: float | None) -> None:
    if max_queue < 1:
        raise ValueError(f"max_queue must be at least 1 (got {max_queue})")
    if max_queue_per_priority is not None and (
        not isinstance(max_queue_per_priority, int) or max_queue_per_priority < 1
    ):
        raise ValueError(
            f"max_queue_per_priority must be None (= max_queue) or an integer >= 1 (got {max_queue_per_priority!r})"
        )
    if age_s_per_level is not None and not (
        isinstance(age_s_per_level, (int, float)) and math.isfinite(age_s_per_level) and age_s_per_level > 0
    ):
        raise ValueError(
            f"age_s_per_level must be None (no aging: strict priority) or a finite number of "
            f"seconds > 0 (got {age_s_per_level!r})"
        )


class PriorityLevels:
    """Queued requests by level. A request needs `.priority`, `.arrived` (monotonic s), `.seq` (submission
    order) and `.state` ("queued" while it waits); this class sets `.rank`, its dispatch key."""

    def __init__(self, max_queue: int, max_queue_per_priority: int | None = None, age_s_per_level: float | None = 1.0):
        check_queue_args(max_queue, max_queue_per_priority, age_s_per_level)
        self.max_queue = max_queue
        self.max_per_level = max_queue if max_queue_per_priority is None else max_queue_per_priority
        self.age_s_per_level = None if age_s_per_level is None else float(age_s_per_level)
        self._levels: dict[int, deque] = {}  # priority -> FIFO (may hold requests that already left)
        self._count: dict[int, int] = {}  # priority -> live requests waiting at that level
        self.total = 0  # live requests waiting, all levels

    def refusal(self, priority: int) -> str | None:
        """Why a new request at `priority` cannot be queued now (None: it can)."""
        if self._count.get(priority, 0) >= self.max_per_level:
            return (
                f"queue full at priority {priority} ({self._count[priority]} requests waiting at that level, "
                f"its bound max_queue_per_priority={self.max_per_level})"
            )
        if self.total >= self.max_queue:
            return f"queue full ({self.total} requests waiting, the total bound max_queue={self.max_queue})"
        return None

    def room(self, priority: int = 0) -> int:
        """How many more requests at `priority` would be queued now."""
        return max(0, min(self.max_per_level - self._count.get(priority, 0), self.max_queue - self.total))

    def push(self, req: Any) -> None:
        age = self.age_s_per_level
        req.rank = (-req.priority, req.seq) if age is None else (req.arrived - req.priority * age, req.seq)
        self._levels.setdefault(req.priority, deque()).append(req)
        self._count[req.priority] = self._count.get(req.priority, 0) + 1
        self.total += 1

    def left(self, req: Any) -> None:
        """A queued request left the queue (taken for a batch, dropped, failed); call once, before its state
        changes from "queued"."""
        n = self._count[req.priority] - 1
        if n:
            self._count[req.priority] = n
        else:
            del self._count[req.priority]
        self.total -= 1

    def __iter__(self) -> Iterator[Any]:
        """Queued requests in dispatch order: highest effective priority first, FIFO among equals."""
        if self.age_s_per_level is None:
            levels = (self._levels[p] for p in sorted(self._levels, reverse=True))
            ordered = (req for dq in levels for req in dq)
        elif len(self._levels) == 1:
            ordered = iter(next(iter(self._levels.values())))
        else:
            ordered = heapq.merge(*self._levels.values(), key=lambda r: r.rank)
        return (req for req in ordered if req.state == "queued")

    def compact(self) -> None:
        """Forget requests that left the queue."""
        for prio in list(self._levels):
            dq = self._levels[prio]
            while dq and dq[0].state != "queued":
                dq.popleft()
            if len(dq) > 2 * max(self._count.get(prio, 0), 16):
                self._levels[prio] = dq = deque(r for r in dq if r.state == "queued")
            if not dq:
                del self._levels[prio]

    def clear(self) -> None:
        self._levels.clear()
        self._count.clear()
        self.total = 0
