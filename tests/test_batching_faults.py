"""DynamicBatcher failure paths stay bounded: each test injects one fault and shows what the callers get.

Before these were fixed: an on_batch hook that raised once killed the collector (the next request
waited out its whole deadline, or forever without one, and close() re-raised the hook's error); a
cancelled request stayed queued and was still computed; close() after its timeout left callers
hanging; one poisoned item cost N+1 forward passes.
"""

import asyncio
import math
import threading
import time

import httpx
import pytest

from ailab.batching import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    BatcherClosedError,
    BatcherDeadError,
    BatcherError,
    DynamicBatcher,
    QueueFullError,
)
from ailab.server import create_app, start_in_thread
from test_server_helpers import PlainPredictor


def run(coro):
    # The outer bound turns a hang (the bug) into a clear failure instead of a stuck test run.
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


class ModelCrash(BaseException):
    """Not an Exception: per-item isolation does not catch it, so it reaches the collector."""


class Model:
    """A batch function that records every batch it sees; it can sleep, crash or reject items."""

    def __init__(self, sleep=0.0, poison=(), crash_on=None):
        self.batches, self.sleep, self.poison, self.crash_on = [], sleep, set(poison), crash_on

    def __call__(self, items):
        self.batches.append(list(items))
        if self.crash_on in items:
            raise ModelCrash("the model process is going down")
        if self.sleep:
            time.sleep(self.sleep)
        bad = [x for x in items if x in self.poison]
        if bad:
            raise ValueError(f"cannot embed item {bad[0]!r}" if len(items) == 1 else "the batch failed")
        return [x * 2 for x in items]

    @property
    def seen(self):
        return [x for batch in self.batches for x in batch]


# ---- 1. the collector survives errors; if it dies anyway, nobody hangs ---------------------------
def test_hook_error_does_not_kill_the_collector():
    calls = []

    def hook(size, waits, compute_s):
        calls.append(size)
        if len(calls) == 1:
            raise RuntimeError("metrics backend down")

    async def main():
        b = DynamicBatcher(Model(), max_batch_size=4, max_wait_ms=1, on_batch=hook)
        first = await b.submit(1)
        t0 = time.monotonic()
        second = await b.submit(2, timeout=2.0)  # was: DeadlineExceededError after the full 2 s
        took = time.monotonic() - t0
        third = await b.submit(3)  # was: waits forever (no deadline)
        await b.close()  # was: re-raised the hook's RuntimeError
        return first, second, third, took, b

    first, second, third, took, b = run(main())
    assert (first, second, third) == (2, 4, 6)
    assert took < 1.0, f"the second request took {took:.2f} s: the collector stalled after the hook error"
    assert b.healthy and b.stats.hook_errors == 1 and len(calls) == 3


class FlakyExecutor:
    """Wraps the batcher's executor; its first submit raises, as a broken batch loop would."""

    def __init__(self, inner):
        self.inner, self.failed = inner, False

    def submit(self, fn, *args):
        if not self.failed:
            self.failed = True
            raise RuntimeError("cannot schedule the batch")
        return self.inner.submit(fn, *args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_error_in_the_batch_loop_fails_only_that_batch():
    model = Model()

    async def main():
        b = DynamicBatcher(model, max_batch_size=4, max_wait_ms=5_000)
        b._executor = FlakyExecutor(b._executor)
        hit = await asyncio.gather(*(b.submit(i) for i in range(4)), return_exceptions=True)
        later = await asyncio.gather(*(b.submit(i, timeout=2.0) for i in range(4, 8)))
        await b.close()
        return hit, later, b

    hit, later, b = run(main())
    assert all(isinstance(r, BatcherError) and "cannot schedule the batch" in str(r) for r in hit), hit
    assert isinstance(hit[0].__cause__, RuntimeError)
    assert later == [8, 10, 12, 14], "the collector must go on serving after one batch failed"
    assert b.healthy and b.stats.loop_errors == 1 and model.seen == [4, 5, 6, 7]


def test_dead_collector_fails_pending_and_later_requests_fast():
    model = Model(sleep=0.05, crash_on="crash")

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0)
        ok = await b.submit(1)
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(b.submit(x)) for x in ["crash", 2, 3]]  # 2, 3: queued, no deadline
        res = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=5)
        pending_took = time.monotonic() - t0
        t0 = time.monotonic()
        with pytest.raises(BatcherDeadError, match="ModelCrash"):
            await b.submit(4)
        later_took = time.monotonic() - t0
        healthy, reason = b.healthy, b.dead_reason
        await b.close()  # a dead collector is no error at close
        return ok, res, pending_took, later_took, healthy, reason, b

    ok, res, pending_took, later_took, healthy, reason, b = run(main())
    assert ok == 2
    assert all(isinstance(r, BatcherDeadError) for r in res), res
    assert "ModelCrash" in str(res[0]) and "not answered" in str(res[1])
    assert pending_took < 2.0 and later_took < 0.5, "a dead collector must fail requests at once"
    assert not healthy and "ModelCrash" in reason and "going down" in reason
    assert b.in_flight == 0
    assert model.seen == [1, "crash"], "the requests queued behind the crash must not be computed"


class CrashingPredictor(PlainPredictor):
    """A server predictor (no torch): answers texts, and crashes the batcher on "CRASH"."""

    name = "crashing"

    def __call__(self, texts):
        if any("CRASH" in t for t in texts):
            raise ModelCrash("worker lost")
        return [{"label": "ok", "probs": [1.0]} for _ in texts]


def test_readyz_turns_503_with_a_reason_when_the_collector_dies():
    app = create_app({"m": CrashingPredictor}, "m", max_wait_ms=1)
    with start_in_thread(app) as h, httpx.Client(timeout=10) as c:
        assert c.post(h.url + "/v1/predict", json={"inputs": "fine"}).status_code == 200
        assert c.get(h.url + "/readyz").status_code == 200
        r = c.post(h.url + "/v1/predict", json={"inputs": "CRASH"})
        assert r.status_code == 500 and "BatcherDeadError" in r.json()["error"]
        ready = c.get(h.url + "/readyz")
        assert ready.status_code == 503, ready.text
        assert "collector stopped" in ready.json()["reason"] and "ModelCrash" in ready.json()["reason"]
        assert c.get(h.url + "/healthz").status_code == 200  # the process lives: liveness stays ok
        t0 = time.monotonic()
        assert (
            c.post(h.url + "/v1/predict", json={"inputs": "fine"}, headers={"X-Timeout-Ms": "3000"}).status_code == 500
        )
        assert time.monotonic() - t0 < 2.0, "a request to a dead batcher must fail fast, not at its deadline"
        assert c.post(h.url + "/admin/models/m/swap").status_code == 200  # the remedy the reason names
        assert c.get(h.url + "/readyz").status_code == 200
        assert c.post(h.url + "/v1/predict", json={"inputs": "fine"}).status_code == 200


# ---- 2. cancellation ---------------------------------------------------------------------------
@pytest.mark.parametrize("timeout", [None, 5.0])
def test_cancelled_request_leaves_the_queue_and_never_reaches_the_model(timeout):
    gate, seen = threading.Event(), []  # the first batch computes until the test lets it go

    def model(items):
        seen.extend(items)
        gate.wait(5)
        return [x * 2 for x in items]

    async def main():
        b = DynamicBatcher(model, max_batch_size=1, max_wait_ms=0, max_queue=2)
        busy = asyncio.ensure_future(b.submit(1))
        await asyncio.sleep(0.03)  # 1 is computing; the queue is empty
        gone = asyncio.ensure_future(b.submit(100, timeout=timeout))
        await asyncio.sleep(0)
        assert b.queue_depth == 1
        gone.cancel()
        await asyncio.sleep(0.01)  # wait_for needs a few loop turns to unwind
        depth_after_cancel = b.queue_depth
        # Its slot is free again: two more fit in max_queue=2 (the second would be refused if it
        # still held one), and then the queue is full, so the count is exact both ways.
        rest = [asyncio.ensure_future(b.submit(x)) for x in (2, 3)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError):
            await b.submit(4)
        gate.set()
        out = await asyncio.gather(busy, *rest)
        await b.close()
        return depth_after_cancel, out, gone

    depth_after_cancel, out, gone = run(main())
    assert gone.cancelled() and depth_after_cancel == 0 and out == [2, 4, 6]
    assert 100 not in seen, f"the model computed a cancelled request: {seen}"


# ---- 3. close ----------------------------------------------------------------------------------
@pytest.mark.parametrize("drain", [True, False])
def test_close_after_its_timeout_resolves_every_future(drain):
    gate = threading.Event()  # the model is stuck until the test lets it go

    def stuck(items):
        gate.wait(5)
        return items

    async def main():
        b = DynamicBatcher(stuck, max_batch_size=1, max_wait_ms=0)
        tasks = [asyncio.ensure_future(b.submit(i)) for i in range(3)]  # 0 runs, 1 and 2 wait
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await b.close(drain=drain, timeout=0.2)
        took = time.monotonic() - t0
        done, pending = await asyncio.wait(tasks, timeout=1.0)  # was: all three hang
        gate.set()
        return took, [t.exception() if t.done() else None for t in tasks], pending

    took, errors, pending = run(main())
    assert not pending, "close() must leave no caller waiting"
    assert all(isinstance(e, BatcherClosedError) for e in errors), errors
    assert "gave up after 0.2 s" in str(errors[0])
    assert took < 2.0


def test_close_of_an_unused_batcher_and_twice():
    async def main():
        b = DynamicBatcher(Model())
        await b.close()
        await b.close()
        with pytest.raises(BatcherClosedError):
            await b.submit(1)

    run(main())


# ---- 4. poisoned batches are bisected ------------------------------------------------------------
def test_one_poisoned_item_in_32_costs_about_log2_passes():
    model = Model(poison={17})

    async def main():
        b = DynamicBatcher(model, max_batch_size=32, max_wait_ms=5_000)
        res = await asyncio.gather(*(b.submit(i) for i in range(32)), return_exceptions=True)
        await b.close()
        return res, b.stats

    res, stats = run(main())
    assert isinstance(res[17], ValueError) and "17" in str(res[17])
    assert [r for i, r in enumerate(res) if i != 17] == [2 * i for i in range(32) if i != 17]
    passes = len(model.batches)
    assert passes <= 2 * math.log2(32) + 1, f"{passes} forward passes for one bad item in 32"
    good = [batch for batch in model.batches if 17 not in batch]
    assert max(map(len, good)) == 16, "the good half must be answered as one batch, not item by item"
    assert stats.failed == 1 and stats.retried_batches == 1 and stats.isolation_passes == passes - 1


def test_every_item_poisoned_each_fails_with_its_own_error():
    model = Model(poison=set(range(32)))

    async def main():
        b = DynamicBatcher(model, max_batch_size=32, max_wait_ms=5_000)
        res = await asyncio.gather(*(b.submit(i) for i in range(32)), return_exceptions=True)
        await b.close()
        return res, b.stats

    res, stats = run(main())
    assert all(isinstance(r, ValueError) and str(r) == f"cannot embed item {i}" for i, r in enumerate(res)), res
    assert stats.failed == 32
    assert len(model.batches) <= 2 * 32 - 1, "bisection's worst case: every node of the tree, once"


# ---- priorities ----------------------------------------------------------------------------------
def test_priority_outside_the_range_or_not_an_integer_is_refused():
    async def main():
        b = DynamicBatcher(Model(), max_batch_size=4, max_wait_ms=1)
        for bad in (MAX_PRIORITY + 1, MIN_PRIORITY - 1, 10**18, 1.5, "high", None):
            with pytest.raises(ValueError, match="priority must be an integer"):
                await b.submit(1, priority=bad)
        out = await asyncio.gather(b.submit(1, priority=MAX_PRIORITY), b.submit(2, priority=MIN_PRIORITY))
        await b.close()
        return out, b.queue_depth

    assert run(main()) == ([2, 4], 0)
