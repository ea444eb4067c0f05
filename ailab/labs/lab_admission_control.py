"""Lab checks: admission control - a bounded queue and per-request deadlines (topic S6).

The learner writes two functions over a collections.deque of Request(id, deadline):
  admit(queue, request, max_queue) -> None
      append the request, or raise QueueFullError (from ailab.batching) at once when the queue
      already holds max_queue requests. Never block, never grow past the bound.
  take_batch(queue, now, max_batch_size) -> (batch, expired)
      pop requests from the front in FIFO order; those whose deadline <= now go to `expired`
      (answered 504, never computed); at most max_batch_size live ones go to `batch`.
The last check replays an overload (requests arrive twice as fast as they are served) and fails
a version that lets the queue, and with it every request's wait, grow without bound.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from ailab.batching import QueueFullError
from ailab.labs.core import check, expect

LAB = "lab_admission_control"


class Request(NamedTuple):
    id: int
    deadline: float   # seconds on the same clock as `now`


def _admit_all(admit, queue, requests, max_queue):
    accepted, rejected = [], []
    for r in requests:
        try:
            out = admit(queue, r, max_queue)
        except QueueFullError:
            rejected.append(r)
            continue
        expect(out is None or out is True, "admit() should return nothing when it accepts and raise QueueFullError "
                                           f"when it refuses; it returned {out!r}")
        accepted.append(r)
    return accepted, rejected


@check(LAB, "the queue never grows past max_queue")
def check_bound(admit):
    queue = deque()
    accepted, rejected = _admit_all(admit, queue, [Request(i, 100.0) for i in range(10)], max_queue=4)
    expect(len(queue) <= 4, f"max_queue=4 but the queue now holds {len(queue)} requests: refuse the 5th")
    expect([r.id for r in accepted] == [0, 1, 2, 3] and len(rejected) == 6,
           f"the first 4 should be accepted and the other 6 refused; accepted {[r.id for r in accepted]}")
    expect([r.id for r in queue] == [0, 1, 2, 3], "accepted requests go to the back of the queue, in order")


@check(LAB, "refuses with QueueFullError, and admits again once there is room")
def check_typed_error_and_recovery(admit):
    queue = deque()
    _admit_all(admit, queue, [Request(i, 100.0) for i in range(3)], max_queue=3)
    try:
        admit(queue, Request(99, 100.0), 3)
    except QueueFullError:
        pass
    else:
        expect(False, "admit() into a full queue must raise QueueFullError (the server turns it into 503 + "
                      "Retry-After); it returned instead")
    queue.popleft()
    admit(queue, Request(100, 100.0), 3)
    expect(queue[-1].id == 100, "after one request left the queue, the next admit() must succeed")


@check(LAB, "drops expired requests before compute, FIFO, at most max_batch_size")
def check_deadlines(take_batch):
    queue = deque([Request(0, 5.0), Request(1, 1.0), Request(2, 9.0), Request(3, 2.0), Request(4, 9.0),
                   Request(5, 9.0), Request(6, 9.0)])
    out = take_batch(queue, 3.0, 3)
    expect(isinstance(out, tuple) and len(out) == 2, f"take_batch should return (batch, expired); got {out!r}")
    batch, expired = out
    expect(all(r.deadline > 3.0 for r in batch), "a request whose deadline has passed reached the batch: it would "
                                                 "be computed for a client that already gave up")
    expect([r.id for r in batch] == [0, 2, 4], f"at now=3 with max_batch_size=3 the batch should be requests "
                                               f"[0, 2, 4] (FIFO, live only); got {[r.id for r in batch]}")
    expect(sorted(r.id for r in expired) == [1, 3], f"requests 1 and 3 expired (deadlines 1 and 2 < now=3) and must "
                                                    f"be returned as expired; got {[r.id for r in expired]}")
    expect([r.id for r in queue] == [5, 6], f"requests 5 and 6 should stay queued; left {[r.id for r in queue]}")
    expect(take_batch(deque(), 0.0, 4) == ([], []), "an empty queue gives ([], [])")


def simulate(admit, take_batch, arrivals_per_tick: float = 2.0, served_per_tick: int = 1, ticks: int = 3000,
             max_queue: int = 20, timeouts: tuple = (5.0, 500.0), short_share: float = 0.2, seed: int = 0) -> dict:
    """Overload: Poisson arrivals at 2x the service rate; a `short_share` of clients give up after
    timeouts[0] ticks, the rest (batch jobs) after timeouts[1]. Returns queue length, waits, outcomes."""
    rng = np.random.default_rng(seed)
    queue, waits, max_len = deque(), [], 0
    outcome = {"served": 0, "rejected": 0, "expired": 0, "late_served": 0}
    arrived_at, next_id = {}, 0
    for t in range(ticks):
        for _ in range(rng.poisson(arrivals_per_tick)):
            try:
                timeout = timeouts[0] if rng.random() < short_share else timeouts[1]
                admit(queue, Request(next_id, t + timeout), max_queue)
                arrived_at[next_id] = t
            except QueueFullError:
                outcome["rejected"] += 1
            next_id += 1
        max_len = max(max_len, len(queue))
        batch, expired = take_batch(queue, float(t), served_per_tick)
        outcome["expired"] += len(expired)
        for r in batch:
            outcome["served"] += 1
            waits.append(t - arrived_at[r.id])
            outcome["late_served"] += int(r.deadline <= t)
    return {"max_queue_len": max_len, "p99_wait_ticks": float(np.percentile(waits, 99)) if waits else 0.0,
            **outcome}


@check(LAB, "under 2x overload the queue and the wait stay bounded")
def check_overload(admit, take_batch):
    res = simulate(admit, take_batch)
    expect(res["max_queue_len"] <= 20, f"under overload the queue reached {res['max_queue_len']} requests (bound 20): "
                                       "without a bound it grows for as long as the overload lasts")
    expect(res["p99_wait_ticks"] <= 21, f"p99 wait was {res['p99_wait_ticks']:.0f} ticks; with at most 20 queued and "
                                        "1 served per tick nobody should wait more than ~20")
    expect(res["served"] >= 2800, f"only {res['served']} of 3000 service slots were used: keep the worker busy")
    expect(res["late_served"] == 0, f"{res['late_served']} requests were computed after their deadline had passed: "
                                    "drop expired requests in take_batch, before compute")
    expect(res["rejected"] > 2000, f"2x overload should turn away about half the arrivals; only {res['rejected']} "
                                   "were refused")
    return res
