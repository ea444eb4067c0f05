"""DynamicBatcher priorities (issue 11): each level has its own queue bound, and a waiting request ages
(effective priority = priority + wait_s / age_s_per_level), so a flood at one level cannot get another
refused and a steady high-priority stream cannot starve a low one. With aging off, strict priority.

Before: one bound for all levels (a flood of low-priority requests got high-priority ones refused with
503) and strict priority only (a low-priority request waited as long as any high one was queued)."""

import asyncio
import math
import threading
import time
from types import SimpleNamespace

import pytest

from ailab.batching import PriorityLevels
from ailab.batching import DynamicBatcher, QueueFullError


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


class Model:
    """Records what it computes; sleeps per batch, or waits at a gate until the test opens it."""

    def __init__(self, sleep=0.0, gate=None):
        self.seen, self.sleep, self.gate = [], sleep, gate

    def __call__(self, items):
        if self.gate is not None:
            self.gate.wait(5)
        if self.sleep:
            time.sleep(self.sleep)
        self.seen.extend(items)
        return list(items)


async def start_busy(b):
    """Submit one request and let it reach the model, so what follows queues behind it."""
    busy = asyncio.ensure_future(b.submit("busy", priority=0))
    for _ in range(200):
        await asyncio.sleep(0.005)
        if b.queue_depth == 0 and b.in_flight == 1:
            return busy
    raise AssertionError("the first request never reached the model")


# ---- 1. each level its own bound ---------------------------------------------------------------------
def test_a_flood_at_the_low_levels_bound_does_not_refuse_a_high_priority_request():
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, max_queue=64, max_queue_per_priority=8)
        busy = await start_busy(b)
        lows = [asyncio.ensure_future(b.submit(("low", i), priority=0)) for i in range(8)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError) as refused:  # the low level is at its bound ...
            await b.submit(("low", 8), priority=0)
        room = b.room(0), b.room(5)
        high = asyncio.ensure_future(b.submit("high", priority=5))  # ... the high one is still queued
        await asyncio.sleep(0)
        depth = b.queue_depth
        gate.set()
        out = await asyncio.gather(busy, high, *lows)
        await b.close()
        return str(refused.value), room, depth, out, b.stats.rejected

    message, room, depth, out, rejected = run(main())
    assert "priority 0" in message and "max_queue_per_priority=8" in message, message
    assert room == (0, 8) and depth == 9 and rejected == 1
    assert out == ["busy", "high", *[("low", i) for i in range(8)]]
    assert model.seen == out, "the high-priority request must be served before the flood"


def test_unset_the_level_bound_is_max_queue_as_before():
    gate = threading.Event()

    async def main():
        b = DynamicBatcher(Model(gate=gate), max_batch_size=1, max_wait_ms=0, max_queue=4)
        busy = await start_busy(b)
        lows = [asyncio.ensure_future(b.submit(i, priority=0)) for i in range(4)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError) as refused:  # one level may fill the whole queue
            await b.submit("high", priority=5)
        gate.set()
        await asyncio.gather(busy, *lows)
        await b.close()
        return str(refused.value), b.max_queue_per_priority

    message, per_level = run(main())
    assert per_level == 4 and "priority 5" not in message and "max_queue=4" in message, message


def test_the_total_bound_still_applies():
    gate = threading.Event()

    async def main():
        b = DynamicBatcher(Model(gate=gate), max_batch_size=1, max_wait_ms=0, max_queue=10, max_queue_per_priority=8)
        busy = await start_busy(b)
        waiting = [asyncio.ensure_future(b.submit(i, priority=0)) for i in range(8)]
        waiting += [asyncio.ensure_future(b.submit(i, priority=3)) for i in range(2)]
        await asyncio.sleep(0)
        errors = []
        for prio in (3, 0):
            with pytest.raises(QueueFullError) as refused:
                await b.submit("one more", priority=prio)
            errors.append(str(refused.value))
        gate.set()
        await asyncio.gather(busy, *waiting)
        await b.close()
        return errors, b.stats.rejected

    (total, level), rejected = run(main())
    assert "max_queue=10" in total and "priority" not in total, total
    assert "priority 0" in level and "max_queue_per_priority=8" in level, level
    assert rejected == 2


# ---- 2. aging: no level starves ---------------------------------------------------------------------
CLIENTS, HIGH, AGE_S = 8, 10, 0.05  # a priority-0 request passes new priority-10 ones after 10 * 0.05 s


async def with_high_stream(b, body):
    """Run `body()` while CLIENTS closed-loop clients keep priority-HIGH requests queued; then stop them."""
    stop, served = asyncio.Event(), []

    async def client(c):
        i = 0
        while not stop.is_set():
            served.append(await b.submit(("high", c, i), priority=HIGH))
            i += 1

    clients = [asyncio.ensure_future(client(c)) for c in range(CLIENTS)]
    await asyncio.sleep(0.05)  # the stream is flowing: highs are always queued
    try:
        return await body(), served
    finally:
        stop.set()
        await asyncio.gather(*clients)


def test_a_steady_high_priority_stream_does_not_starve_a_low_priority_request():
    """The bound: the low request is overtaken only by highs that arrive less than HIGH * AGE_S = 0.5 s
    after it; after that it is ahead of every new one, and at most CLIENTS highs (closed loop) are still
    ahead of it: 0.5 s + 8 batches of 10 ms on an idle machine. Asserted with 3 s to spare for a loaded
    one, against a stream that would starve it forever under strict priority (the next test)."""
    model = Model(sleep=0.01)

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, age_s_per_level=AGE_S)

        async def low():
            t0 = time.monotonic()
            await b.submit("low", priority=0)
            return time.monotonic() - t0, b.queue_depth

        (waited, highs_waiting), served = await with_high_stream(b, low)
        await b.close()
        return waited, highs_waiting, served

    waited, highs_waiting, served = run(main())
    crossover = HIGH * AGE_S
    assert waited >= crossover - 0.05, f"served after {waited:.2f} s: it passed highs that came after it"
    assert waited <= crossover + 3.0, f"the low-priority request waited {waited:.2f} s"
    assert highs_waiting > 0, "it must be served while high-priority requests are still waiting"
    assert len(served) > CLIENTS


def test_with_aging_off_priority_is_strict():
    model = Model(sleep=0.01)

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, age_s_per_level=None)
        low = asyncio.ensure_future(b.submit("low", priority=0))

        async def watch():  # twice the time aging would have let it through in
            await asyncio.sleep(2 * HIGH * AGE_S)
            return low.done()

        done_during_stream, served = await with_high_stream(b, watch)
        await asyncio.wait_for(low, timeout=10)  # the stream stopped: now it is served, last
        await b.close()
        return done_during_stream, served

    done_during_stream, served = run(main())
    assert not done_during_stream and len(served) > CLIENTS
    assert model.seen[-1] == "low" and model.seen.count("low") == 1


@pytest.mark.parametrize(
    "age, expected",
    [
        (0.1, ["high100", "low", "high1"]),  # low waited >= 3 levels
        (None, ["high100", "high1", "low"]),
    ],
)  # strict priority
def test_a_request_that_waited_passes_a_slightly_higher_newer_one(age, expected):
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, age_s_per_level=age)
        busy = await start_busy(b)
        low = asyncio.ensure_future(b.submit("low", priority=0))
        await asyncio.sleep(0.3)  # low ages 0.3 s (more on a loaded machine: still < 10 s)
        highs = [asyncio.ensure_future(b.submit(name, priority=p)) for name, p in [("high1", 1), ("high100", 100)]]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(busy, low, *highs)
        await b.close()

    run(main())
    assert model.seen == ["busy", *expected]


# ---- 3. FIFO among equals ---------------------------------------------------------------------------
@pytest.mark.parametrize("age", [1.0, 0.01, None])
def test_equal_priorities_stay_fifo(age):
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        b = DynamicBatcher(model, max_batch_size=3, max_wait_ms=0, age_s_per_level=age)
        busy = await start_busy(b)
        tasks = []
        for i in range(12):
            tasks += [
                asyncio.ensure_future(b.submit(("a", i), priority=2)),
                asyncio.ensure_future(b.submit(("b", i), priority=-1)),
            ]
            if i % 4 == 0:
                await asyncio.sleep(0.01)
        gate.set()
        await asyncio.gather(busy, *tasks)
        await b.close()

    run(main())
    for level in "ab":
        assert [x for x in model.seen[1:] if x[0] == level] == [(level, i) for i in range(12)]


def test_equal_effective_priority_is_served_in_submission_order():
    q = PriorityLevels(max_queue=10, age_s_per_level=1.0)
    reqs = [
        SimpleNamespace(name=n, priority=p, arrived=t, seq=s, state="queued")
        for s, (n, p, t) in enumerate(
            [("low", 0, 100.0), ("low-2", 0, 100.5), ("high", 1, 101.0), ("high-2", 1, 101.0), ("top", 3, 102.0)]
        )
    ]
    for r in reqs:  # ranks (arrived - priority * 1 s): 100, 100.5, 100, 100, 99
        q.push(r)
    assert [r.name for r in q] == ["top", "low", "high", "high-2", "low-2"]
    reqs[0].state = "running"
    q.left(reqs[0])
    q.compact()
    assert [r.name for r in q] == ["top", "high", "high-2", "low-2"] and q.total == 4


# ---- 4. what stays the same ---------------------------------------------------------------------------
def test_stats_keys_are_unchanged_and_bad_arguments_are_named():
    async def main():
        b = DynamicBatcher(Model(), max_batch_size=4, max_wait_ms=1, max_queue_per_priority=2)
        out = await asyncio.gather(*(b.submit(i, priority=i % 3) for i in range(6)))
        await b.close()
        return out, b.stats.as_dict()

    out, stats = run(main())
    assert sorted(out) == list(range(6))
    assert list(stats) == [
        "batches",
        "items",
        "rejected",
        "expired",
        "failed",
        "retried_batches",
        "isolation_passes",
        "hook_errors",
        "loop_errors",
        "mean_batch_size",
        "worker_utilization",
        "batch_size_hist",
        "queue_wait_p50_ms",
        "queue_wait_p99_ms",
        "compute_p50_ms",
        "compute_p99_ms",
    ]
    for kw, name in [
        (dict(max_queue_per_priority=0), "max_queue_per_priority"),
        (dict(max_queue_per_priority=2.5), "max_queue_per_priority"),
        (dict(age_s_per_level=0), "age_s_per_level"),
        (dict(age_s_per_level=-1), "age_s_per_level"),
        (dict(age_s_per_level=math.nan), "age_s_per_level"),
        (dict(age_s_per_level=math.inf), "age_s_per_level"),
        (dict(max_queue=0), "max_queue"),
    ]:
        with pytest.raises(ValueError, match=name):
            DynamicBatcher(list, **kw)
