"""Lab checks: the batch-collection loop at the heart of a dynamic batcher (topics S1, S3).

The learner writes two functions:
  async collect_batch(queue, max_batch_size, max_wait_s) -> list
      wait for the first item, then keep taking items until the batch holds max_batch_size or
      max_wait_s has passed SINCE THE FIRST ITEM ARRIVED; never more than max_batch_size.
  run_isolated(fn, items) -> list of ("ok", result) | ("error", exception)
      run fn(items) once; if it raises, run each item alone so only the bad one fails.
Each check runs the learner's coroutine on a fresh event loop, with a time limit, so a loop that
waits forever fails with a message instead of hanging the notebook.
"""
from __future__ import annotations

import asyncio
import time

from ailab.batching import run_sync
from ailab.labs.core import check, expect

LAB = "lab_batch_loop"
LIMIT_S = 3.0


def _collect(collect_batch, feed, max_batch_size: int, max_wait_s: float):
    """Run collect_batch on a queue that `feed(queue)` fills; return (batch, seconds, queue left)."""

    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        feeder = asyncio.ensure_future(feed(queue))
        t0 = time.monotonic()
        try:
            batch = await asyncio.wait_for(collect_batch(queue, max_batch_size, max_wait_s), LIMIT_S)
        except asyncio.TimeoutError:
            raise AssertionError("timeout") from None
        finally:
            feeder.cancel()
        return batch, time.monotonic() - t0, queue.qsize()

    try:
        batch, took, left = run_sync(main)
    except AssertionError as e:
        if str(e) == "timeout":
            expect(False, f"collect_batch did not return within {LIMIT_S:.0f} s although max_wait_s={max_wait_s}: "
                          "it waits forever. Stop when max_wait_s has passed since the first item, even if the "
                          "batch is not full (use asyncio.wait_for(queue.get(), remaining)).")
        raise
    expect(isinstance(batch, list), f"collect_batch should return a list of items, got {type(batch).__name__}")
    return batch, took, left


def _put_now(items):
    async def feed(queue):
        for x in items:
            queue.put_nowait(x)
    return feed


@check(LAB, "sends a full batch at once")
def check_dispatch_on_size(collect_batch):
    batch, took, _ = _collect(collect_batch, _put_now(range(8)), max_batch_size=8, max_wait_s=2.0)
    expect(batch == list(range(8)), f"with 8 items waiting and max_batch_size=8 the batch should be [0..7] in "
                                    f"order; got {batch}")
    expect(took < 0.5, f"a full batch took {took * 1e3:.0f} ms to go: once it holds max_batch_size items, send it "
                       "at once - do not wait out max_wait_s")


@check(LAB, "sends a partial batch when max_wait_s runs out")
def check_dispatch_on_timeout(collect_batch):
    batch, took, _ = _collect(collect_batch, _put_now(range(3)), max_batch_size=64, max_wait_s=0.15)
    expect(batch == [0, 1, 2], f"3 items were waiting; the batch should hold all 3, got {batch}. "
                               "A loop that returns after the first item never batches.")
    expect(0.1 <= took < 1.0, f"the batch went after {took * 1e3:.0f} ms; with max_wait_s=0.15 it should go "
                              "after about 150 ms (not at once, not much later)")


@check(LAB, "never exceeds max_batch_size")
def check_never_exceeds_max(collect_batch):
    batch, _, left = _collect(collect_batch, _put_now(range(50)), max_batch_size=8, max_wait_s=0.1)
    expect(len(batch) <= 8, f"the batch holds {len(batch)} items but max_batch_size=8: leave the rest queued")
    expect(batch == list(range(8)) and left == 42, f"take the FIRST 8 items in order and leave 42 in the queue; "
                                                   f"got {batch} with {left} left")


@check(LAB, "waits for the first item, and the window opens when it arrives")
def check_window_opens_at_first_item(collect_batch):
    async def late(queue):
        await asyncio.sleep(0.3)
        queue.put_nowait("first")
        await asyncio.sleep(0.05)
        queue.put_nowait("second")

    batch, took, _ = _collect(collect_batch, late, max_batch_size=8, max_wait_s=0.2)
    expect(len(batch) > 0, "collect_batch returned an empty batch: wait (await queue.get()) for the first item")
    expect(batch == ["first", "second"], f"the first item came at 300 ms and a second 50 ms later, inside the "
                                         f"200 ms window that the first one opened; expected both, got {batch}")
    expect(took >= 0.45, f"returned after {took * 1e3:.0f} ms: the window must start when the first item arrives "
                         "(at 300 ms), not when collect_batch was called")


@check(LAB, "batches items that arrive during the window")
def check_batches_trickle(collect_batch):
    async def trickle(queue):
        for i in range(20):
            queue.put_nowait(i)
            await asyncio.sleep(0.02)

    batch, took, _ = _collect(collect_batch, trickle, max_batch_size=16, max_wait_s=0.2)
    expect(len(batch) >= 5, f"items arrived every 20 ms during a 200 ms window, but the batch holds {len(batch)}: "
                            "keep waiting for more items until the window closes")
    expect(batch == list(range(len(batch))), f"items must stay in arrival order; got {batch}")


@check(LAB, "a bad item fails alone")
def check_isolates_bad_item(run_isolated):
    calls = []

    def model(items):
        calls.append(list(items))
        if any(x < 0 for x in items):
            raise ValueError("negative input crashed the model")
        return [x * 10 for x in items]

    out = run_isolated(model, [1, 2, -3, 4])
    expect(isinstance(out, list) and len(out) == 4, f"return one (status, value) per item; got {out!r}")
    expect([s for s, _ in out] == ["ok", "ok", "error", "ok"],
           f"only item 2 (the -3) should fail; statuses were {[s for s, _ in out]}")
    expect([v for s, v in out if s == "ok"] == [10, 20, 40], f"the good items' results are wrong: {out}")
    expect(isinstance(out[2][1], ValueError), "the failed item should carry the exception the model raised")
    expect(calls[0] == [1, 2, -3, 4], "run the whole batch first (one forward pass), then items one by one on error")
    out = run_isolated(model, [5, 6])
    expect(out == [("ok", 50), ("ok", 60)] and len(calls) == 6,
           "when the batch succeeds, return its results without re-running items one by one")


def serve_with(collect_batch, run_isolated, fn, items: list, max_batch_size: int, max_wait_s: float) -> dict:
    """Serve `items` as concurrent requests through YOUR loop: one collector, fn on a worker thread.

    Returns the results in request order, the batch sizes the loop formed and the wall time.
    """

    async def main():
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        sizes = []

        async def collector():
            while True:
                batch = await collect_batch(queue, max_batch_size, max_wait_s)  # [(item, future), ...]
                sizes.append(len(batch))
                out = await loop.run_in_executor(None, run_isolated, fn, [x for x, _ in batch])
                for (_, fut), (status, value) in zip(batch, out):
                    fut.set_result(value) if status == "ok" else fut.set_exception(value)

        task = asyncio.ensure_future(collector())
        t0 = time.monotonic()
        futures = []
        for x in items:
            futures.append(loop.create_future())
            queue.put_nowait((x, futures[-1]))
        everything = asyncio.ensure_future(asyncio.gather(*futures, return_exceptions=True))
        await asyncio.wait([everything, task], timeout=120, return_when=asyncio.FIRST_COMPLETED)
        if not everything.done():          # the loop died (or hangs): say so instead of waiting forever
            everything.cancel()
            task.cancel()
            if task.done() and task.exception() is not None:
                raise task.exception()
            raise TimeoutError("your loop did not answer every request within 120 s")
        results = everything.result()
        seconds = time.monotonic() - t0
        task.cancel()
        return {"results": results, "batch_sizes": sizes, "seconds": seconds}

    return run_sync(main)
