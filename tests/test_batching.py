"""DynamicBatcher: window on size and time, bounded queue, deadlines, priorities, buckets, isolation."""

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from ailab.batching import (
    BatcherClosedError,
    DeadlineExceededError,
    DynamicBatcher,
    QueueFullError,
    length_bucket,
    run_sync,
)
from ailab.bench import drive_batcher


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=20))


class Recorder:
    """A batch function that records the batches it saw (and optionally sleeps or fails)."""

    def __init__(self, sleep=0.0, poison=None):
        self.batches, self.threads, self.sleep, self.poison = [], set(), sleep, poison

    def __call__(self, items):
        self.batches.append(list(items))
        self.threads.add(threading.get_ident())
        if self.sleep:
            time.sleep(self.sleep)
        if self.poison is not None and self.poison in items:
            raise ValueError("poisoned item")
        return [x * 2 for x in items]


def test_results_match_items_and_batches_fill_on_size():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, max_batch_size=8, max_wait_ms=5_000)
        t0 = time.monotonic()
        out = await asyncio.gather(*(b.submit(i) for i in range(16)))
        took = time.monotonic() - t0
        await b.close()
        return out, took

    out, took = run(main())
    assert out == [2 * i for i in range(16)]
    assert [len(x) for x in rec.batches] == [8, 8]
    assert took < 2.0, "a full batch must go at once, not wait for max_wait_ms"


def test_batch_goes_on_timeout_when_not_full():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, max_batch_size=64, max_wait_ms=50)
        t0 = time.monotonic()
        out = await asyncio.gather(*(b.submit(i) for i in range(3)))
        took = time.monotonic() - t0
        await b.close()
        return out, took

    out, took = run(main())
    assert out == [0, 2, 4] and rec.batches == [[0, 1, 2]]
    assert 0.04 <= took < 1.0


def test_never_exceeds_max_batch_and_runs_on_one_worker_thread():
    rec = Recorder(sleep=0.002)

    async def main():
        b = DynamicBatcher(rec, max_batch_size=5, max_wait_ms=2)
        await asyncio.gather(*(b.submit(i) for i in range(53)))
        stats = b.stats.as_dict()
        await b.close()
        return stats

    stats = run(main())
    assert max(len(x) for x in rec.batches) <= 5
    assert sorted(sum(rec.batches, [])) == list(range(53))
    assert len(rec.threads) == 1 and threading.get_ident() not in rec.threads
    assert stats["items"] == 53 and sum(k * v for k, v in stats["batch_size_hist"].items()) == 53


def test_event_loop_not_blocked_while_model_computes():
    async def main():
        b = DynamicBatcher(lambda xs: (time.sleep(0.3), xs)[1], max_batch_size=4, max_wait_ms=0)
        task = asyncio.ensure_future(b.submit(1))
        ticks = 0
        t0 = time.monotonic()
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        await b.close()
        return ticks, time.monotonic() - t0

    ticks, took = run(main())
    assert took >= 0.29 and ticks >= 10, "the loop must keep running while the batch computes"


def test_queue_full_rejects_at_once():
    async def main():
        b = DynamicBatcher(lambda xs: (time.sleep(0.2), xs)[1], max_batch_size=1, max_wait_ms=0, max_queue=4)
        first = asyncio.ensure_future(b.submit(0))
        await asyncio.sleep(0.05)  # first is now computing, queue empty
        waiting = [asyncio.ensure_future(b.submit(i)) for i in range(1, 5)]
        await asyncio.sleep(0)
        t0 = time.monotonic()
        with pytest.raises(QueueFullError):
            await b.submit(99)
        rejected_in = time.monotonic() - t0
        out = await asyncio.gather(first, *waiting)
        await b.close()
        return out, rejected_in, b.stats.rejected

    out, rejected_in, rejected = run(main())
    assert out == [0, 1, 2, 3, 4] and rejected_in < 0.05 and rejected == 1


def test_expired_requests_dropped_before_compute():
    rec = Recorder(sleep=0.2)

    async def main():
        b = DynamicBatcher(rec, max_batch_size=1, max_wait_ms=0)
        busy = asyncio.ensure_future(b.submit(1))
        await asyncio.sleep(0.02)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            await b.submit(2, timeout=0.05)
        took = time.monotonic() - t0
        with pytest.raises(DeadlineExceededError):
            await b.submit(3, deadline=time.monotonic() - 1)
        await busy
        await b.close()
        return took

    took = run(main())
    assert took < 0.15, "the 504 must come at the deadline, not after the busy batch"
    assert [x for batch in rec.batches for x in batch] == [1], "expired items must never reach the model"


def test_priorities_higher_first_fifo_within_level():
    rec = Recorder(sleep=0.1)

    async def main():
        b = DynamicBatcher(rec, max_batch_size=1, max_wait_ms=0)
        first = asyncio.ensure_future(b.submit("busy"))
        await asyncio.sleep(0.02)
        tasks = [
            asyncio.ensure_future(b.submit(name, priority=p))
            for name, p in [("low1", 0), ("high1", 5), ("low2", 0), ("high2", 5), ("mid", 1)]
        ]
        await asyncio.gather(first, *tasks)
        await b.close()

    run(main())
    order = [batch[0] for batch in rec.batches]
    assert order == ["busy", "high1", "high2", "mid", "low1", "low2"]


def test_bad_item_fails_alone():
    rec = Recorder(poison=13)

    async def main():
        b = DynamicBatcher(rec, max_batch_size=8, max_wait_ms=20)
        res = await asyncio.gather(*(b.submit(i) for i in range(10, 18)), return_exceptions=True)
        await b.close()
        return res, b.stats

    res, stats = run(main())
    assert isinstance(res[3], ValueError)
    assert [r for i, r in enumerate(res) if i != 3] == [2 * i for i in range(10, 18) if i != 13]
    assert stats.failed == 1 and stats.retried_batches == 1


def test_returned_exception_fails_only_that_item_without_retry():
    def fn(items):
        return [ValueError("too long") if x < 0 else x for x in items]

    async def main():
        b = DynamicBatcher(fn, max_batch_size=4, max_wait_ms=10)
        res = await asyncio.gather(*(b.submit(x) for x in [1, -1, 2, 3]), return_exceptions=True)
        await b.close()
        return res, b.stats.retried_batches

    res, retried = run(main())
    assert res[0] == 1 and isinstance(res[1], ValueError) and res[2:] == [2, 3] and retried == 0


def test_size_function_caps_batch_cost():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(
            lambda xs: [len(x) for x in xs], max_batch_size=100, max_wait_ms=20, size_fn=len, max_batch_cost=10
        )
        b.fn = lambda xs: (rec.batches.append(xs), [len(x) for x in xs])[1]
        await asyncio.gather(*(b.submit("x" * n) for n in [4, 4, 4, 4, 9, 1]))
        await b.close()

    run(main())
    assert all(sum(map(len, batch)) <= 10 or len(batch) == 1 for batch in rec.batches)
    assert [len(batch) for batch in rec.batches] == [2, 2, 2]


def test_length_bucketing_groups_similar_lengths():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(
            lambda xs: (rec.batches.append(xs), xs)[1], max_batch_size=4, max_wait_ms=30, bucket_fn=length_bucket(10)
        )
        items = ["a" * n for n in [3, 35, 5, 38, 7, 31, 2, 33]]
        await asyncio.gather(*(b.submit(x) for x in items))
        await b.close()

    run(main())
    for batch in rec.batches:
        assert len({(len(x) - 1) // 10 for x in batch}) == 1, f"mixed lengths in one batch: {batch}"
    assert sorted(len(b) for b in rec.batches) == [4, 4]


def test_reconfigure_while_running():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, max_batch_size=2, max_wait_ms=5)
        await asyncio.gather(*(b.submit(i) for i in range(4)))
        b.configure(max_batch_size=4)
        await asyncio.gather(*(b.submit(i) for i in range(8)))
        with pytest.raises(ValueError):
            b.configure(max_batch_size=0)
        with pytest.raises(ValueError):
            b.configure(max_wait_ms=float("nan"))
        await b.close()

    run(main())
    assert [len(x) for x in rec.batches] == [2, 2, 4, 4]


def test_close_drains_then_refuses():
    rec = Recorder(sleep=0.05)

    async def main():
        b = DynamicBatcher(rec, max_batch_size=2, max_wait_ms=1)
        tasks = [asyncio.ensure_future(b.submit(i)) for i in range(6)]
        await asyncio.sleep(0)
        await b.close(drain=True)
        with pytest.raises(BatcherClosedError):
            await b.submit(7)
        return [t.result() for t in tasks]

    assert run(main()) == [0, 2, 4, 6, 8, 10]


def test_close_without_drain_fails_waiting_requests():
    async def main():
        b = DynamicBatcher(lambda xs: (time.sleep(0.1), xs)[1], max_batch_size=1, max_wait_ms=0)
        tasks = [asyncio.ensure_future(b.submit(i)) for i in range(4)]
        await asyncio.sleep(0.02)
        await b.close(drain=False)
        return await asyncio.gather(*tasks, return_exceptions=True)

    res = run(main())
    assert res[0] == 0 and all(isinstance(r, BatcherClosedError) for r in res[1:])


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="callable"):
        DynamicBatcher("not a function")
    with pytest.raises(ValueError, match="max_batch_size"):
        DynamicBatcher(list, max_batch_size=0)
    with pytest.raises(ValueError, match="size_fn"):
        DynamicBatcher(list, max_batch_cost=10)


def test_batched_model_outputs_equal_one_at_a_time():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
    xs = [torch.randn(8) for _ in range(20)]

    @torch.inference_mode()
    def fn(items):
        return list(model(torch.stack(items)))  # (B, 3) -> B rows

    async def main():
        b = DynamicBatcher(fn, max_batch_size=8, max_wait_ms=5)
        out = await asyncio.gather(*(b.submit(x) for x in xs))
        await b.close()
        return out, b.stats.as_dict()["mean_batch_size"]

    out, mean_bs = run(main())
    with torch.inference_mode():
        expected = model(torch.stack(xs))
    np.testing.assert_allclose(torch.stack(out).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert mean_bs > 1


def test_noop_batcher_throughput_through_the_load_generator():
    async def main():
        b = DynamicBatcher(lambda xs: xs, max_batch_size=64, max_wait_ms=1, max_queue=4096)
        r = await drive_batcher(b, list(range(100)), clients=128, duration_s=1.0, warmup_s=0.2)
        await b.close()
        return r

    r = run_sync(main)
    assert r.error_rate == 0 and r.rps > 2000
