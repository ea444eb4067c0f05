"""Independent wrong answers for lab_admission_control, written from labs/3_serving/lab_admission_control.ipynb's contract alone."""

import asyncio
import time

from ailab.batching import QueueFullError


def admit(queue, request, max_queue):
    if len(queue) >= max_queue:
        raise QueueFullError(f"queue full: {max_queue} requests already wait")
    queue.append(request)


def take_batch(queue, now, max_batch_size):
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def admit_one_too_many(queue, request, max_queue):
    """Refuses when the queue holds more than max_queue."""
    # differs on deque of 4 requests, max_queue 4: appends a fifth instead of raising QueueFullError
    if len(queue) > max_queue:
        raise QueueFullError(f"queue full: more than {max_queue} requests wait")
    queue.append(request)


def admit_then_check(queue, request, max_queue):
    """Appends first, then raises if the queue is now over its bound."""
    # differs on deque of 4 requests, max_queue 4: raises, but the refused request stays queued (length 5)
    queue.append(request)
    if len(queue) > max_queue:
        raise QueueFullError(f"queue full: bound {max_queue}")


def admit_zero_is_unbounded(queue, request, max_queue):
    """Treats max_queue=0 (falsy) as 'no bound', like the server's config options."""
    # differs on empty deque, max_queue 0: appends instead of raising QueueFullError
    if max_queue and len(queue) >= max_queue:
        raise QueueFullError(f"queue full: {max_queue} requests already wait")
    queue.append(request)


def admit_asyncio_queue_full(queue, request, max_queue):
    """Raises asyncio.QueueFull, the standard library's 'queue is full' exception."""
    # differs on deque of 1 request, max_queue 1: asyncio.QueueFull instead of QueueFullError
    if len(queue) >= max_queue:
        raise asyncio.QueueFull(f"queue full: {max_queue} requests already wait")
    queue.append(request)


def take_deadline_equal_is_live(queue, now, max_batch_size):
    """Expires a request only once its deadline is strictly in the past."""
    # differs on deque([Request(0, 5.0)]), now=5.0, 4: ([req], []) instead of ([], [req])
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline >= now else expired).append(r)
    return batch, expired


def take_expired_use_slots(queue, now, max_batch_size):
    """Pops at most max_batch_size requests in all, expired or not."""
    # differs on deque([Request(0, 1.0), Request(1, 9.0)]), now=5.0, 1: ([], [r0]) leaving r1 queued,
    # instead of ([r1], [r0])
    batch, expired = [], []
    for _ in range(min(max_batch_size, len(queue))):
        r = queue.popleft()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def take_snapshot_then_clear(queue, now, max_batch_size):
    """Walks a copy of the queue, then clears it once the batch is taken."""
    # differs on deque([Request(i, 9.0) for i in range(3)]), now=0.0, 2: the queue is left empty
    # instead of holding Request(2, 9.0)
    batch, expired = [], []
    for r in list(queue):
        if len(batch) >= max_batch_size:
            break
        (batch if r.deadline > now else expired).append(r)
    queue.clear()
    return batch, expired


def take_wall_clock(queue, now, max_batch_size):
    """Compares deadlines with the monotonic clock read here rather than the `now` passed in."""
    # differs on deque([Request(0, 1e12)]), now=2e12, 4: ([req], []) instead of ([], [req])
    batch, expired = [], []
    current = time.monotonic()
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline > current else expired).append(r)
    return batch, expired


RIGHT = {"admit": admit, "take_batch": take_batch}
WRONG = [
    ("admit", admit_one_too_many, "boundaries"),
    ("admit", admit_then_check, "order"),
    ("admit", admit_zero_is_unbounded, "boundaries: parameter at 0"),
    ("admit", admit_asyncio_queue_full, "error handling"),
    ("take_batch", take_deadline_equal_is_live, "boundaries"),
    ("take_batch", take_expired_use_slots, "misread prose"),
    ("take_batch", take_snapshot_then_clear, "state"),
    ("take_batch", take_wall_clock, "misread prose: ignores now"),
]
