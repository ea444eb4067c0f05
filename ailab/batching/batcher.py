"""DynamicBatcher: gather concurrent requests into one forward pass (topics S1-S4, S6).

Each caller does `result = await batcher.submit(item)`. A collector coroutine on the event loop
opens a window at the oldest waiting request and sends a batch when it holds `max_batch_size`
items (or `max_batch_cost` units, e.g. tokens) or when `max_wait_ms` has passed. The batch runs
on ONE dedicated worker thread that owns the only model copy, so the event loop never blocks
and memory is not multiplied by worker processes (torch releases the GIL inside its kernels).

Admission control lives here too: a bounded queue (QueueFullError at once, not after a wait),
per-request deadlines (DeadlineExceededError; expired requests are dropped before compute),
priorities (higher first, FIFO among equals; each level has its own bound, and a waiting request
ages, so no level starves: priority_queue.py) and optional length bucketing.

Failure paths stay bounded: a poisoned item fails alone, found by bisection (isolation.py);
an error in a hook or in the loop fails only the batch it hit; a caller that goes away leaves the
queue; and if the collector dies anyway, or close() gives up on a stuck batch, every pending
request fails at once with a typed error instead of hanging (`healthy` says which happened).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from ailab.batching.isolation import run_isolated
from ailab.batching.priority_queue import PriorityLevels
from ailab.batching.types import (
    BatcherClosedError,
    BatcherDeadError,
    BatcherError,
    BatcherStats,
    DeadlineExceededError,
    QueueFullError,
    _check_priority,
)

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Request:
    item: Any
    future: asyncio.Future
    priority: int
    deadline: float  # time.monotonic() seconds; math.inf = none
    arrived: float
    cost: float
    bucket: Hashable
    seq: int  # submission order: FIFO among equal effective priorities
    state: str = "queued"  # queued -> running -> done | dropped
    rank: tuple = ()  # dispatch key, set by PriorityLevels.push


class DynamicBatcher:
    """Batch `fn(list_of_items) -> list_of_results` over concurrent `await submit(item)` calls.

    fn runs on one worker thread. It must return one result per item, in order; a result that is
    an Exception instance fails only that item (e.g. "input too long"). If fn raises, the batch is
    bisected, so one poisoned input fails alone and its neighbours still succeed, in batches.

    max_queue bounds all waiting requests; max_queue_per_priority (default: max_queue) bounds each
    priority level, so a flood at one level cannot refuse another. age_s_per_level: a request's
    effective priority grows by one level per that many seconds of waiting (None: strict priority).
    """

    def __init__(
        self,
        fn: Callable[[list], Sequence],
        max_batch_size: int = 32,
        max_wait_ms: float = 10.0,
        max_queue: int = 1024,
        size_fn: Callable[[Any], float] | None = None,
        max_batch_cost: float | None = None,
        bucket_fn: Callable[[Any], Hashable] | None = None,
        worker_init: Callable[[], None] | None = None,
        on_batch: Callable[[int, list, float], None] | None = None,
        name: str = "batcher",
        max_queue_per_priority: int | None = None,
        age_s_per_level: float | None = 1.0,
        executor: ThreadPoolExecutor | None = None,
    ):
        if not callable(fn):
            raise TypeError(f"DynamicBatcher(fn=...) needs a callable taking a list of items, got {type(fn).__name__}")
        self._queue = PriorityLevels(max_queue, max_queue_per_priority, age_s_per_level)  # checks them
        if max_batch_cost is not None and size_fn is None:
            raise ValueError("max_batch_cost needs size_fn: say how much each item costs (e.g. its token count)")
        self.fn, self.name = fn, name
        self.max_queue, self.size_fn, self.max_batch_cost, self.bucket_fn = (
            max_queue,
            size_fn,
            max_batch_cost,
            bucket_fn,
        )
        self.max_queue_per_priority, self.age_s_per_level = self._queue.max_per_level, self._queue.age_s_per_level
        self.on_batch = on_batch
        self.max_batch_size, self.max_wait_ms = 1, 0.0
        self.configure(max_batch_size=max_batch_size, max_wait_ms=max_wait_ms)
        self.stats = BatcherStats()
        self._running = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._batch: list[_Request] = []  # the batch being run (failed too if we die)
        self._dead: str | None = None  # why the collector stopped, once it has
        self._stop_reason: str | None = None  # set when close() stops the collector itself
        self._seq = itertools.count()
        # One thread, one model copy: the batcher never runs two batches at once. `executor`, when given, is
        # that thread (one worker), already made: the one that loaded the model (see ModelRegistry._build).
        # The batcher shuts it down on close().
        if executor is not None and worker_init is not None:
            raise ValueError("give worker_init to the executor you pass (ThreadPoolExecutor(initializer=...))")
        self._executor = executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{name}-worker", initializer=worker_init
        )

    # ---- configuration -------------------------------------------------------------------------
    def configure(self, max_batch_size: int | None = None, max_wait_ms: float | None = None) -> None:
        """Change the window while running; the next batch uses the new values."""
        if max_batch_size is not None:
            if not isinstance(max_batch_size, int) or max_batch_size < 1:
                raise ValueError(f"max_batch_size must be a positive integer (got {max_batch_size!r})")
            self.max_batch_size = max_batch_size
        if max_wait_ms is not None:
            if not (max_wait_ms >= 0 and math.isfinite(max_wait_ms)):
                raise ValueError(f"max_wait_ms must be a finite number >= 0 (got {max_wait_ms!r})")
            self.max_wait_ms = float(max_wait_ms)
        if getattr(self, "_wake", None) is not None:
            self._wake.set()

    @property
    def _queued(self) -> int:  # live requests waiting (not running, not dropped)
        return self._queue.total

    @property
    def queue_depth(self) -> int:
        return self._queued

    def room(self, priority: int = 0) -> int:
        """How many more requests at `priority` would be queued now (an all-or-nothing check)."""
        return self._queue.room(_check_priority(priority))

    @property
    def in_flight(self) -> int:
        return self._queued + self._running

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def healthy(self) -> bool:
        """False once the collector has died: every request then fails at once with BatcherDeadError."""
        return self._dead is None

    @property
    def dead_reason(self) -> str | None:
        """Why the collector stopped (None while it serves): for a readiness probe or a log line."""
        return self._dead

    # ---- submitting ----------------------------------------------------------------------------
    async def submit(
        self, item: Any, priority: int = 0, deadline: float | None = None, timeout: float | None = None
    ) -> Any:
        """Queue `item` and return its result.

        deadline: absolute time.monotonic() seconds; timeout: seconds from now (the earlier wins).
        Raises QueueFullError at once when its priority level or the whole queue is full (the
        message names which bound), DeadlineExceededError when the
        deadline passes before the item was computed, BatcherDeadError when the collector has
        died, or whatever fn raised for this item. A cancelled caller leaves the queue.
        """
        priority = _check_priority(priority)
        if self._dead is not None:
            raise BatcherDeadError(
                f"{self.name} cannot serve: {self._dead}. It must be replaced by a new DynamicBatcher"
            )
        if self._closing:
            raise BatcherClosedError(f"{self.name} is closed and takes no new requests")
        if (full := self._queue.refusal(priority)) is not None:
            self.stats.rejected += 1
            raise QueueFullError(f"{self.name}: {full}; retry later")
        now = time.monotonic()
        limit = math.inf if deadline is None else float(deadline)
        if timeout is not None:
            limit = min(limit, now + float(timeout))
        if limit <= now:
            self.stats.expired += 1
            raise DeadlineExceededError(f"{self.name}: the request's deadline had already passed")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._collect_forever(), name=f"{self.name}-collector")
            self._task.add_done_callback(self._collector_ended)
        req = _Request(
            item,
            loop.create_future(),
            priority,
            limit,
            now,
            float(self.size_fn(item)) if self.size_fn else 1.0,
            self.bucket_fn(item) if self.bucket_fn else None,
            next(self._seq),
        )
        self._queue.push(req)
        self._wake.set()
        try:
            if limit == math.inf:
                return await req.future
            # shield: a timeout here must not cancel a batch that is already computing.
            return await asyncio.wait_for(asyncio.shield(req.future), timeout=max(0.0, limit - time.monotonic()))
        except asyncio.TimeoutError:
            if req.state == "queued":  # never reached compute: drop it, answer 504
                self._drop(req)
                self.stats.expired += 1
                raise DeadlineExceededError(
                    f"{self.name}: deadline passed after {(time.monotonic() - now) * 1e3:.0f} ms in the queue"
                ) from None
            return await req.future  # already computing: a bounded wait for its result
        except asyncio.CancelledError:  # the caller went away (client disconnected, a sibling failed)
            if req.state == "queued":  # leave the queue: free the slot, never reach the model
                self._drop(req)
            req.future.cancel()  # if already running, its result is simply not delivered
            raise

    def _drop(self, req: _Request) -> None:
        self._queue.left(req)
        req.state = "dropped"

    # ---- collecting ----------------------------------------------------------------------------
    def _live(self):
        """Queued requests in dispatch order: highest effective priority first, FIFO among equals."""
        return iter(self._queue)

    def _head(self) -> _Request | None:
        return next(self._live(), None)

    def _ready_count(self, head: _Request) -> float:
        """How full the batch that `head` would lead is, as a fraction of the limit (>= 1: send now)."""
        if self.bucket_fn is None and self.max_batch_cost is None:
            return self._queued / self.max_batch_size
        n, cost = 0, 0.0
        for req in self._live():
            if req.bucket == head.bucket:
                n, cost = n + 1, cost + req.cost
                if n >= self.max_batch_size or (self.max_batch_cost and cost >= self.max_batch_cost):
                    return 1.0
        return n / self.max_batch_size

    def _take_batch(self) -> list[_Request]:
        head = self._head()
        batch, cost = [], 0.0
        for req in self._live():
            if len(batch) >= self.max_batch_size:
                break
            if self.bucket_fn is not None and req.bucket != head.bucket:
                continue
            if self.max_batch_cost is not None and batch and cost + req.cost > self.max_batch_cost:
                break
            batch.append(req)
            cost += req.cost
        for req in batch:
            self._queue.left(req)
            req.state = "running"
        self._queue.compact()  # forget requests that left the queue
        return batch

    async def _collect_forever(self) -> None:
        """The collector: take the next batch, run it, repeat until closed and drained.

        An Exception while handling one batch (the on_batch hook, the executor, bookkeeping) fails
        only that batch's unanswered requests, with BatcherError, and the loop goes on. Whatever
        still ends this task (a BaseException from the model, a bug before a batch is taken,
        cancellation) reaches _collector_ended, which fails every pending request at once.
        """
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if batch is None:
                return  # closing, and nothing is left
            self._batch = batch
            try:
                now = time.monotonic()
                live = []
                for req in batch:  # drop the expired before paying for compute
                    if req.deadline <= now:
                        req.state = "dropped"
                        self.stats.expired += 1
                        if not req.future.done():
                            req.future.set_exception(
                                DeadlineExceededError(f"{self.name}: deadline passed in the queue")
                            )
                    else:
                        live.append(req)
                if live:
                    await self._run_batch(loop, live, now)
            except Exception as e:  # one batch's trouble must not stop the collector
                self.stats.loop_errors += 1
                log.error(
                    "%s: the collector failed on a batch of %d; failing only those", self.name, len(batch), exc_info=e
                )
                self._fail(
                    batch,
                    BatcherError,
                    f"{self.name}: the batcher failed while running this request's "
                    f"batch ({type(e).__name__}: {e}); other requests are not affected",
                    e,
                )
            self._batch = []

    async def _next_batch(self) -> list[_Request] | None:
        """Wait until a batch is full or its window has passed, then take it. None: closing, queue empty."""
        while True:
            head = self._head()
            if head is None:
                if self._closing:
                    return None
                self._wake.clear()
                await self._wake.wait()
                continue
            # The window opened when the oldest waiting request arrived.
            opened = min(r.arrived for r in self._live())
            while not self._closing:
                remaining = opened + self.max_wait_ms / 1e3 - time.monotonic()
                head = self._head()
                if head is None or self._ready_count(head) >= 1 or remaining <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=remaining)
                except asyncio.TimeoutError:
                    pass
            if self._head() is not None:
                return self._take_batch()

    async def _run_batch(self, loop, batch: list[_Request], started: float) -> None:
        self._running = len(batch)
        items = [r.item for r in batch]
        waits = [(started - r.arrived) * 1e3 for r in batch]
        t0 = time.perf_counter()
        try:
            results, passes = await loop.run_in_executor(self._executor, run_isolated, self.fn, items)
        finally:
            self._running = 0
        compute_s = time.perf_counter() - t0
        if not self.stats.batches:
            self.stats.first_start = time.monotonic() - compute_s
        self.stats.last_end = time.monotonic()
        self.stats.busy_s += compute_s
        self.stats.batches += 1
        self.stats.items += len(batch)
        self.stats.batch_sizes[len(batch)] += 1
        if passes > 1:
            self.stats.retried_batches += 1
            self.stats.isolation_passes += passes - 1
        for w in waits:
            self.stats._add(self.stats.queue_wait_ms, w)
        self.stats._add(self.stats.compute_ms, compute_s * 1e3)
        for req, (ok, value) in zip(batch, results):
            req.state = "done"
            if not ok:
                self.stats.failed += 1
            if not req.future.done():
                req.future.set_result(value) if ok else req.future.set_exception(value)
        if self.on_batch is not None:
            try:
                self.on_batch(len(batch), waits, compute_s)
            except Exception as e:  # a metrics hook must not stop serving; answers are out
                self.stats.hook_errors += 1
                log.error(
                    "%s: the on_batch hook raised (the batch was answered; serving goes on)", self.name, exc_info=e
                )

    # ---- failing what is pending -------------------------------------------------------------
    def _fail(self, reqs, error_type: type, message: str, cause: BaseException | None = None) -> None:
        """Answer every still-unanswered request in `reqs` with a fresh error_type(message)."""
        for req in reqs:
            if req.state == "queued":
                self._queue.left(req)
            req.state = "dropped" if req.state == "queued" else "done"
            if not req.future.done():
                err = error_type(message)
                err.__cause__ = cause
                req.future.set_exception(err)

    def _fail_pending(self, error_type: type, message: str, cause: BaseException | None = None) -> None:
        """Fail everything queued or running: nobody may be left awaiting a future no one will resolve."""
        self._fail([*self._live(), *self._batch], error_type, message, cause)
        self._queue.clear()
        self._batch, self._running = [], 0

    def _collector_ended(self, task: asyncio.Task) -> None:
        """Done-callback of the collector task: however it ended, fail what it held, at once."""
        error = None if task.cancelled() else task.exception()  # reading it also marks it retrieved
        if error is None and not task.cancelled():
            return  # it returned: closed and drained, nothing is pending
        if self._stop_reason is not None and error is None:  # close() stopped it on purpose
            self._fail_pending(
                BatcherClosedError, f"{self.name} was closed before this request was answered ({self._stop_reason})"
            )
            return
        self._dead = (
            f"its collector stopped ({type(error).__name__}: {error})"
            if error is not None
            else "its collector task was cancelled"
        )
        if error is not None or self.in_flight:  # not worth an error when an idle loop just shut down
            log.error(
                "%s: %s; failing %d pending requests, refusing new ones",
                self.name,
                self._dead,
                self.in_flight,
                exc_info=error,
            )
        self._fail_pending(
            BatcherDeadError, f"{self.name} cannot serve: {self._dead}; this request was not answered", error
        )

    # ---- shutdown ------------------------------------------------------------------------------
    async def close(self, drain: bool = True, timeout: float = 30.0) -> None:
        """Stop taking requests. drain=True finishes everything queued; False fails it at once.

        Returns after about `timeout` seconds at most, and leaves no caller waiting: whatever is
        not answered by then (a batch stuck in the model included) fails with BatcherClosedError.
        A collector that died earlier does not make close() raise; `dead_reason` says why it died.
        """
        self._closing = True
        if not drain:
            self._fail(list(self._live()), BatcherClosedError, f"{self.name} closed before this request ran")
        task = self._task
        if task is not None and not task.done():
            self._wake.set()
            done, _ = await asyncio.wait({task}, timeout=timeout)  # wait() neither raises nor cancels
            if not done:
                self._stop_reason = f"close() gave up after {timeout:g} s waiting for the batch in the model"
                task.cancel()
                await asyncio.wait({task})  # let it unwind; _collector_ended fails what it held
        self._fail_pending(BatcherClosedError, f"{self.name} closed before this request was answered")
        self._executor.shutdown(wait=False)

    def run_in_worker(self, fn: Callable, *args):
        """Run fn(*args) on the model's own thread (warm-up, probes) and return an awaitable."""
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
