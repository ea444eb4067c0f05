"""Lab checks: the batch-collection loop at the heart of a dynamic batcher (topics S1, S3).

The learner writes two functions:
  async collect_batch(queue, max_batch_size, max_wait_s) -> list
      wait for the first item, then keep taking items until the batch holds max_batch_size or
      max_wait_s has passed SINCE THE FIRST ITEM ARRIVED; never more than max_batch_size.
  run_isolated(fn, items) -> list of ("ok", result) | ("error", exception)
      run fn(items) once; if it raises, find the bad items so only they fail.

The checks are derived from what each function must guarantee, not from one worked example:
  collect_batch: returns a list of the FIRST items in arrival order and leaves the rest queued in
      order (for several max_batch_size values, 1 included, and items that are falsy); goes at once
      when full, whether the items were already waiting or arrive during the window; goes when
      max_wait_s has passed (two windows far apart, so a constant cannot pass both); the window opens
      at the first item, is fixed once (a trickle of items cannot keep it open), and the loop sleeps
      while it waits (CPU time of the loop's thread over an idle second) and never blocks the event loop.
  run_isolated: one call of fn when the batch succeeds (results paired in order, whatever sequence fn
      returns, for [] and a single item too); on failure the first call is still the whole batch, every
      item that fails alone fails with the very exception fn raised for it alone, whatever its type and
      wherever it sits, its neighbours get their own results; when every item fails, every item is an
      error (nothing reported as ok); a batch-only failure leaves every item ok; a BaseException that is
      not an Exception (Ctrl-C) is not swallowed. Bisecting instead of retrying one by one passes too.
Each collect_batch check runs the learner's coroutine on a fresh event loop in a daemon thread, with a
time limit, so a loop that waits forever or blocks the event loop fails with a message instead of
hanging the notebook.
"""

from __future__ import annotations

import asyncio
import inspect
import time

import numpy as np

from ailab.batching import run_sync
from ailab.labs.core import check, expect, within_time
from ailab.labs.differential import short

LAB = "lab_batch_loop"
LIMIT_S = 3.0
AT_ONCE_S = 0.5  # "at once" on a loaded 2-core machine: generous, a real wait is >= 0.9 s here
LATE_S = 0.7  # how late a window may close on a loaded machine


class _Forever(Exception):
    """collect_batch was still waiting when the time limit passed."""


def _collect(collect_batch, feed, max_batch_size: int, max_wait_s: float) -> dict:
    """Run collect_batch on a queue that `feed(queue)` fills.

    Returns {"batch", "took" (s), "left" (the items still queued, in order), "cpu" (CPU seconds of the
    loop's thread while collect_batch ran)}.
    """
    box: dict = {}

    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        box["queue"] = queue
        feeder = asyncio.ensure_future(feed(queue))
        await asyncio.sleep(0)  # let the feeder put what it puts at once
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            pending = collect_batch(queue, max_batch_size, max_wait_s)
            expect(
                inspect.isawaitable(pending),
                "collect_batch should be a coroutine function (`async def collect_batch(...)`), so that it can "
                f"await the queue; calling it returned {type(pending).__name__} {short(pending)} instead of a coroutine",
            )
            batch = await asyncio.wait_for(pending, LIMIT_S)
        except asyncio.TimeoutError:
            raise _Forever from None
        finally:
            feeder.cancel()
        took, cpu = time.monotonic() - t0, time.thread_time() - c0
        left = []
        while not queue.empty():
            left.append(queue.get_nowait())
        return {"batch": batch, "took": took, "left": left, "cpu": cpu}

    def unstick():
        queue = box.get("queue")
        if queue is not None:  # a loop that polls with time.sleep may finish
            for i in range(max(1, min(int(max_batch_size), 10_000))):
                queue._queue.append(("unblock", i))

    try:
        res = within_time(
            lambda: asyncio.run(main()),
            LIMIT_S + 2.0,
            f"collect_batch blocked the event loop for more than {LIMIT_S + 2:.0f} s (max_wait_s="
            f"{max_wait_s}): while it waits, no other coroutine can run - not even the one that puts "
            "items in the queue. Wait by awaiting (queue.get(), asyncio.wait_for), never with "
            "time.sleep() or a loop that does not await.",
            unstick=unstick,
            name="ailab-lab-collect",
        )
    except _Forever:
        expect(
            False,
            f"collect_batch did not return within {LIMIT_S:.0f} s although max_wait_s={max_wait_s}: "
            "it waits forever. Stop when max_wait_s has passed since the first item, even if the "
            "batch is not full (wait with a timeout: what is left of the window).",
        )
    expect(
        isinstance(res["batch"], list),
        f"collect_batch should return a list of items, got {type(res['batch']).__name__}",
    )
    return res


def _put_now(items):
    async def feed(queue):
        for x in items:
            queue.put_nowait(x)

    return feed


def _trickle(items, every_s: float, delay_s: float = 0.0):
    async def feed(queue):
        if delay_s:
            await asyncio.sleep(delay_s)
        for x in items:
            queue.put_nowait(x)
            await asyncio.sleep(every_s)

    return feed


@check(LAB, "sends a full batch at once")
def check_dispatch_on_size(collect_batch):
    for queued, size in [(8, 8), (5, 3), (4, 1)]:
        r = _collect(collect_batch, _put_now(range(queued)), max_batch_size=size, max_wait_s=2.0)
        expect(
            r["batch"] == list(range(size)),
            f"with {queued} items waiting and max_batch_size={size} the batch "
            f"should be the first {size} items, in order: "
            f"{list(range(size))}; got {r['batch']}",
        )
        expect(
            r["took"] < AT_ONCE_S,
            f"with {queued} items waiting and max_batch_size={size}, a full batch took "
            f"{r['took'] * 1e3:.0f} ms to go (max_wait_s=2.0): once it holds "
            "max_batch_size items, send it at once - do not wait out max_wait_s",
        )
        expect(
            r["left"] == list(range(size, queued)),
            f"the items after the first {size} must stay queued, in "
            f"order: expected {list(range(size, queued))} left, got "
            f"{r['left']}",
        )
    r = _collect(collect_batch, _trickle(range(10), 0.02), max_batch_size=4, max_wait_s=2.0)
    expect(
        r["batch"] == [0, 1, 2, 3],
        f"items arriving every 20 ms with max_batch_size=4: the batch should be [0, 1, 2, 3]; got {r['batch']}",
    )
    expect(
        r["took"] < AT_ONCE_S + 0.1,
        f"the 4th item arrived after about 60 ms and filled the batch, but it went "
        f"after {r['took'] * 1e3:.0f} ms (max_wait_s=2.0): check whether the batch "
        "is full each time an item arrives, not only when the window closes",
    )


@check(LAB, "sends a partial batch when max_wait_s runs out")
def check_dispatch_on_timeout(collect_batch):
    for wait in (0.1, 0.9):
        r = _collect(collect_batch, _put_now(range(3)), max_batch_size=64, max_wait_s=wait)
        expect(
            r["batch"] == [0, 1, 2],
            f"3 items were waiting (max_batch_size=64, max_wait_s={wait}); the batch "
            f"should hold all 3 in order, got {r['batch']}. A loop that returns after "
            "the first item never batches.",
        )
        expect(
            0.95 * wait <= r["took"] < wait + LATE_S,
            f"with max_wait_s={wait} the partial batch went after {r['took'] * 1e3:.0f} ms; it should go after "
            f"about {wait * 1e3:.0f} ms (not at once, not much later). Use the max_wait_s you are given, not a "
            "fixed number.",
        )
    r = _collect(collect_batch, _put_now(["only"]), max_batch_size=8, max_wait_s=0.0)
    expect(
        r["batch"] == ["only"], f"with max_wait_s=0 and one item waiting the batch should be ['only'], got {r['batch']}"
    )
    expect(
        r["took"] < AT_ONCE_S,
        f"with max_wait_s=0 the batch went after {r['took'] * 1e3:.0f} ms: a window of 0 "
        "means send what you have at once",
    )


@check(LAB, "never exceeds max_batch_size")
def check_never_exceeds_max(collect_batch):
    items = list(range(100, 150))
    for size in (8, 1, 13):
        r = _collect(collect_batch, _put_now(items), max_batch_size=size, max_wait_s=0.05)
        expect(
            len(r["batch"]) <= size,
            f"the batch holds {len(r['batch'])} items but max_batch_size={size}: leave the rest queued",
        )
        expect(
            r["batch"] == items[:size],
            f"with 50 items (100..149) waiting and max_batch_size={size}, take the "
            f"FIRST {size} items in order; got {r['batch']}",
        )
        expect(
            r["left"] == items[size:],
            f"with max_batch_size={size} the other {50 - size} items must stay queued "
            f"in order ({items[size]}..149); left: {r['left']}",
        )
    odd = [0, None, "", (), False, "x"]
    r = _collect(collect_batch, _put_now(odd), max_batch_size=4, max_wait_s=0.05)
    expect(
        r["batch"] == odd[:4] and r["left"] == odd[4:],
        f"items may be anything, falsy ones included: with {odd!r} queued and max_batch_size=4 the batch should "
        f"be {odd[:4]!r} and {odd[4:]!r} stay queued; got {r['batch']!r} with {r['left']!r} left",
    )


@check(LAB, "waits for the first item, and the window opens when it arrives")
def check_window_opens_at_first_item(collect_batch):
    async def late(queue):
        await asyncio.sleep(0.3)
        queue.put_nowait("first")
        await asyncio.sleep(0.05)
        queue.put_nowait("second")

    r = _collect(collect_batch, late, max_batch_size=8, max_wait_s=0.2)
    expect(len(r["batch"]) > 0, "collect_batch returned an empty batch: wait (without a timeout) for the first item")
    expect(
        r["batch"] == ["first", "second"],
        f"the first item came at 300 ms and a second 50 ms later, inside the "
        f"200 ms window that the first one opened; expected both, got "
        f"{r['batch']}",
    )
    expect(
        r["took"] >= 0.45,
        f"returned after {r['took'] * 1e3:.0f} ms: the window must start when the first item "
        "arrives (at 300 ms), not when collect_batch was called",
    )


@check(LAB, "batches items that arrive during the window")
def check_batches_trickle(collect_batch):
    r = _collect(collect_batch, _trickle(range(20), 0.02), max_batch_size=16, max_wait_s=0.2)
    batch = r["batch"]
    expect(
        len(batch) >= 5,
        f"items arrived every 20 ms during a 200 ms window, but the batch holds {len(batch)}: "
        "keep waiting for more items until the window closes",
    )
    expect(batch == list(range(len(batch))), f"items must stay in arrival order; got {batch}")
    expect(
        r["left"] == list(range(len(batch), len(batch) + len(r["left"]))),
        f"the items not taken must stay queued in order; left: {r['left']}",
    )


@check(LAB, "the window is fixed once: a trickle of items cannot keep it open")
def check_window_does_not_restart(collect_batch):
    r = _collect(collect_batch, _trickle(range(40), 0.04), max_batch_size=1000, max_wait_s=0.2)
    expect(
        r["took"] < 0.2 + LATE_S,
        f"items arrived every 40 ms for 1.6 s with max_wait_s=0.2 and room for 1000; "
        f"the batch went after {r['took'] * 1e3:.0f} ms, not about 200 ms after the "
        "first item: the window restarts at every item. Fix its end once, when the "
        "first item arrives, and wait only for what is left of it.",
    )
    expect(
        len(r["batch"]) >= 2,
        f"items arrived every 40 ms inside a 200 ms window but the batch holds "
        f"{len(r['batch'])}: keep taking items until the window closes",
    )
    expect(r["batch"] == list(range(len(r["batch"]))), f"items must stay in arrival order; got {r['batch']}")


@check(LAB, "sleeps while it waits (no busy polling)")
def check_idles_while_waiting(collect_batch):
    r = _collect(collect_batch, _trickle(["a"], 1.0, delay_s=0.4), max_batch_size=8, max_wait_s=0.6)
    expect(
        r["batch"] == ["a"],
        f"one item came at 400 ms, then nothing for the 600 ms window: expected ['a'], got {r['batch']}",
    )
    expect(
        r["cpu"] < 0.15,
        f"collect_batch was idle for about {r['took']:.1f} s (waiting for the first item, then "
        f"for a window with no items) but its thread used {r['cpu'] * 1e3:.0f} ms of CPU: it "
        "polls instead of sleeping, and steals a core from the model. Await the queue (with a "
        "timeout for the window) instead of checking it in a loop.",
    )


def _outcomes(run_isolated, fn, items, what: str):
    try:
        out = run_isolated(fn, items)
    except NotImplementedError:
        raise  # the stub: the check says "not implemented yet"
    except Exception as e:  # noqa: BLE001 - an error fn raised (or the learner's own) must not escape
        expect(
            False,
            f"{what}: run_isolated raised {type(e).__name__}: {e}. An error of fn must become that item's "
            "('error', exception), never escape (catch Exception, not only one type)",
        )
    expect(
        isinstance(out, (list, tuple)) and len(out) == len(items),
        f"{what}: return one (status, value) pair per item ({len(items)} items); got {out!r}",
    )
    out = list(out)
    for i, pair in enumerate(out):
        expect(
            isinstance(pair, tuple) and len(pair) == 2 and pair[0] in ("ok", "error"),
            f"{what}: item {i} should be ('ok', result) or ('error', exception); got {pair!r}",
        )
    return out


class _Model:
    """A fake batch function: bad items raise (each its own exception object); records every call."""

    def __init__(self, bad=(), error=ValueError, result=lambda x: x * 10, out=list, batch_limit=None):
        self.bad, self.error, self.result, self.out, self.batch_limit = set(bad), error, result, out, batch_limit
        self.calls, self.raised = [], {}

    def __call__(self, items):
        items = list(items)
        self.calls.append(items)
        if self.batch_limit is not None and len(items) > self.batch_limit:
            raise MemoryError(f"a batch of {len(items)} does not fit")
        for x in items:
            if x in self.bad:
                e = self.error(f"item {x!r} crashed the model")
                if len(items) == 1:
                    self.raised[x] = e
                raise e
        return self.out(self.result(x) for x in items)


def _expect_isolated(out, model, items, what):
    want = ["error" if x in model.bad else "ok" for x in items]
    got = [s for s, _ in out]
    expect(got == want, f"{what}: statuses should be {want}; got {got}")
    for i, (x, (status, value)) in enumerate(zip(items, out)):
        if status == "ok":
            expect(
                np.ndim(value) == 0 and not isinstance(value, (list, tuple)) and bool(value == model.result(x)),
                f"{what}: item {i} ({x!r}) should have the result fn gives for it alone, {model.result(x)!r}; "
                f"got {value!r}",
            )
        else:
            expect(
                isinstance(value, BaseException),
                f"{what}: item {i} ({x!r}) failed; its value should be the exception object, got {value!r}",
            )
            expect(
                value is model.raised.get(x),
                f"{what}: item {i} ({x!r}) should carry the exception fn raised "
                f"when it ran alone ({model.raised.get(x)!r}); got {value!r} - the "
                "error of the whole batch may be another item's",
            )
    expect(
        model.calls and model.calls[0] == list(items),
        f"{what}: the first call of fn should be the whole batch "
        f"{list(items)} (one forward pass); it was "
        f"{model.calls[0] if model.calls else 'never called'}",
    )
    for call in model.calls[1:]:
        expect(
            (len(call) < len(items) or len(items) == 1) and all(x in items for x in call),
            f"{what}: after the batch failed, fn should run on parts of it (single items, or halves); it got {call}",
        )
    expect(
        len(model.calls) <= 2 * len(items),
        f"{what}: fn was called {len(model.calls)} times for {len(items)} "
        "items: look for the bad ones without repeating work",
    )


@check(LAB, "when the batch succeeds, one call answers every item")
def check_isolated_success_runs_once(run_isolated):
    cases = [
        ([5, 6], {}, "2 items"),
        ([7], {}, "a single item"),
        (["ab", "c", "def"], {"result": len, "out": tuple}, "3 texts, fn returning a tuple"),
        (
            [0.5, 1.5, 2.5, 3.5],
            {"result": lambda x: np.float32(x * 2), "out": lambda g: np.array(list(g), dtype=np.float32)},
            "4 floats, fn returning a float32 numpy array",
        ),
    ]
    for items, kw, what in cases:
        model = _Model(**kw)
        out = _outcomes(run_isolated, model, items, what)
        _expect_isolated(out, model, items, what)
        expect(
            len(model.calls) == 1,
            f"{what}: the batch succeeded, but fn was called {len(model.calls)} times "
            f"({model.calls}): return its results without re-running items",
        )
    model = _Model()
    out = _outcomes(run_isolated, model, [], "an empty batch")
    expect(out == [], f"an empty batch gives an empty list; got {out!r}")


@check(LAB, "a bad item fails alone")
def check_isolates_bad_item(run_isolated):
    cases = [
        ([1, 2, -3, 4], {"bad": {-3}}, "bad item in the middle"),
        ([-1, 2, 3], {"bad": {-1}, "error": RuntimeError}, "bad first item raising RuntimeError"),
        ([1, 2, 3, 4, 5, -6], {"bad": {-6}, "error": TypeError}, "bad last item raising TypeError"),
        ([-2, 3, -4, 5, 6], {"bad": {-2, -4}, "error": _ModelError}, "two bad items"),
        ([-7], {"bad": {-7}}, "a single bad item"),
        (["ok", "", "also ok"], {"bad": {""}, "result": len}, "texts, the empty one bad"),
    ]
    for items, kw, what in cases:
        model = _Model(**kw)
        out = _outcomes(run_isolated, model, items, what)
        _expect_isolated(out, model, items, what)


class _ModelError(Exception):
    """An exception type of the runtime's own, like onnxruntime's or the tokenizer's."""


@check(LAB, "when every item fails, every item reports its error")
def check_isolation_every_item_fails(run_isolated):
    for items, error in [([-1, -2, -3], ValueError), ([-9], KeyError)]:
        model = _Model(bad=set(items), error=error)
        what = f"every item of {items} raises {error.__name__}"
        out = _outcomes(run_isolated, model, items, what)
        _expect_isolated(out, model, items, what)
    model = _Model(batch_limit=2)
    items = [1, 2, 3, 4, 5]
    what = "fn fails on any batch larger than 2 (every item works alone)"
    out = _outcomes(run_isolated, model, items, what)
    expect(
        [s for s, _ in out] == ["ok"] * 5 and [v for _, v in out] == [10, 20, 30, 40, 50],
        f"{what}: every item should come back ok with its own result [10, 20, 30, 40, 50]; got {out!r}",
    )


class _Interrupt(BaseException):
    """Like KeyboardInterrupt: not an Exception, not any item's fault."""


@check(LAB, "Ctrl-C is not swallowed")
def check_isolation_lets_interrupts_through(run_isolated):
    def interrupted(items):
        raise _Interrupt("Ctrl-C")

    try:
        out = run_isolated(interrupted, [1, 2, 3])
    except _Interrupt:
        return
    expect(
        False,
        f"fn raised a KeyboardInterrupt-like BaseException, and run_isolated returned {out!r}: catch "
        "Exception (an error of the input), not everything - Ctrl-C and SystemExit must stop the program",
    )


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
        if not everything.done():  # the loop died (or hangs): say so instead of waiting forever
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
