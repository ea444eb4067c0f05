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
Against a reference: check_collect_same_as_reference replays generated arrivals on a simulated clock (see below)
with the learner's loop and a reference, and compares the batch, when it went, what stays queued once every item
has arrived, and how often the loop woke while it waited (a loop polling every millisecond fails); and
check_isolation_same_as_reference gives run_isolated and a reference the same recording fake models.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import selectors
import threading
import time

import numpy as np

from ailab.batching import run_sync
from ailab.labs.core import LabCheckFailed, check, expect, within_time
from ailab.labs.differential import same_as_reference, short

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


# --------------------------------------------------------------------------- against a reference, on a simulated clock
#
# collect_batch is judged on a SIMULATED clock: an event loop whose time jumps to the next timer instead of waiting
# for it, so a run with a 0.9 s window takes microseconds, and where time.monotonic(), time.perf_counter(),
# time.time() (and their _ns forms) read that same clock inside the run's thread. The same generated arrivals are
# replayed with the learner's loop and the reference; what the batch holds, when it went, what stays queued, and how
# many times the loop woke while it waited are compared. time.sleep in that thread fails the run: it would block the
# event loop.

_TICK = 0.000_25  # arrivals fall on a quarter-millisecond grid; a window ends half a tick off it, never on an arrival
_T0 = 10_000.000_3  # the simulated clock when collect_batch is called: not on a whole second or millisecond
_EPOCH = 1_700_000_000.0  # what time.time() adds to it
_MAX_ITERATIONS = 20_000  # event-loop iterations per run: a loop that spins without time passing stops here
_CLOCKS = ("monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns", "sleep")
_REAL = {name: getattr(time, name) for name in _CLOCKS}
_SIMULATED = threading.local()
_INSTALLED = {"count": 0}
_INSTALL_LOCK = threading.Lock()


class _Spins(BaseException):
    """The loop ran _MAX_ITERATIONS iterations (a BaseException, so the learner's `except Exception` lets it pass)."""


class _Blocks(BaseException):
    """time.sleep was called in the simulated loop's thread."""

    def __init__(self, seconds):
        super().__init__(seconds)
        self.seconds = seconds


class _Deadlock(BaseException):
    """Nothing is scheduled and nothing is ready: the loop would wait forever."""


def _clock_reader(name: str):
    real = _REAL[name]

    def read(*args):
        loop = getattr(_SIMULATED, "loop", None)
        if loop is None:
            return real(*args)
        if name == "sleep":
            raise _Blocks(args[0] if args else None)
        now = loop._now + (_EPOCH if name.startswith("time") else 0.0)
        return int(round(now * 1e9)) if name.endswith("_ns") else now

    read.__name__ = name
    read._ailab_simulated = True
    return read


_READERS = {name: _clock_reader(name) for name in _CLOCKS}


class _SimulatedSelector(selectors.DefaultSelector):
    """Real file descriptors are polled without waiting; an idle wait moves the simulated clock instead."""

    loop = None
    wakeups = 0

    def select(self, timeout=None):
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise _Deadlock
        self.loop._now += timeout
        self.wakeups += 1
        return []


class _SimulatedLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        selector = _SimulatedSelector()
        super().__init__(selector)
        selector.loop = self
        self._now, self._selector_ref, self.iterations = _T0, selector, 0

    def time(self):
        return self._now

    def _run_once(self):
        self.iterations += 1
        if self.iterations > _MAX_ITERATIONS:
            raise _Spins
        super()._run_once()


@contextlib.contextmanager
def _simulated_clock(loop, fn):
    """Inside: this thread's clocks read `loop`'s time. `fn`'s module names bound to the real clocks (`from time
    import monotonic`) are pointed at the simulated ones for the run, and put back after."""
    with _INSTALL_LOCK:
        if _INSTALLED["count"] == 0:
            for name in _CLOCKS:
                setattr(time, name, _READERS[name])
        _INSTALLED["count"] += 1
    names = getattr(fn, "__globals__", {})
    rebound = {k: v for k, v in list(names.items()) if any(v is _REAL[c] for c in _CLOCKS)}
    for k, v in rebound.items():
        names[k] = _READERS[v.__name__] if v.__name__ in _READERS else v
    _SIMULATED.loop = loop
    try:
        yield
    finally:
        _SIMULATED.loop = None
        for k, v in rebound.items():
            names[k] = v
        with _INSTALL_LOCK:
            _INSTALLED["count"] -= 1
            if _INSTALLED["count"] == 0:
                for name in _CLOCKS:
                    setattr(time, name, _REAL[name])


def _at_ms(loop) -> float:
    return round((loop._now - _T0) * 1e3, 6)


def _ms(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".") + " ms"


def _drive_collect(collect_batch, max_batch_size: int, max_wait_s: float, arrivals: list) -> dict:
    """_drive_collect_here in a thread of its own: a notebook's thread already runs an event loop."""
    box: dict = {}

    def target():
        try:
            box["out"] = _drive_collect_here(collect_batch, max_batch_size, max_wait_s, arrivals)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name="ailab-lab-simulated-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["out"]


def _drive_collect_here(collect_batch, max_batch_size: int, max_wait_s: float, arrivals: list) -> dict:
    """Run collect_batch once on the simulated clock. `arrivals` is [(tick, [items])], ticks rising; tick 0's items
    are queued when collect_batch is called, the others put at _T0 + tick * _TICK. After it returns, the rest keep
    arriving, so that a get() left waiting (which would swallow the next item) shows in what stays queued.

    Returns {"batch", "went_ms" (ms after the call), "left" (queued at the end, in order), "wakeups" (times the loop
    slept and woke before returning)} or {"failed": words}."""
    loop = _SimulatedLoop()
    last = arrivals[-1][0] * _TICK if arrivals else 0.0

    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        for tick, items in arrivals:
            if tick == 0:
                for x in items:
                    queue.put_nowait(x)
            else:
                loop.call_at(_T0 + tick * _TICK, lambda items=items: [queue.put_nowait(x) for x in items])
        pending = collect_batch(queue, max_batch_size, max_wait_s)
        if not inspect.isawaitable(pending):
            return {
                "failed": "collect_batch should be a coroutine function (`async def collect_batch(...)`); calling "
                f"it returned {type(pending).__name__} {short(pending)}"
            }
        try:
            batch = await asyncio.wait_for(pending, last + max_wait_s + 10.0)
        except asyncio.TimeoutError:
            return {
                "failed": f"it was still waiting {last * 1e3 + max_wait_s * 1e3 + 10_000:.0f} ms after the call "
                "(10 s after the last item arrived and the window closed): it waits forever. Stop when max_wait_s "
                "has passed since the first item, even if the batch is not full"
            }
        went_ms, wakeups = _at_ms(loop), loop._selector_ref.wakeups
        await asyncio.sleep(max(0.0, _T0 + last - loop._now) + _TICK)
        left = []
        while not queue.empty():
            left.append(queue.get_nowait())
        return {"batch": batch, "went_ms": went_ms, "left": left, "wakeups": wakeups}

    try:
        with _simulated_clock(loop, collect_batch):
            try:
                return loop.run_until_complete(main())
            except (NotImplementedError, LabCheckFailed):
                raise
            except _Blocks as e:
                return {
                    "failed": f"it called time.sleep({e.seconds!r}) inside the coroutine, which freezes the event "
                    "loop (no item can arrive while it sleeps): await the queue, or asyncio.sleep"
                }
            except _Spins:
                return {
                    "failed": f"its event loop ran {_MAX_ITERATIONS} iterations by {_ms(_at_ms(loop))} without "
                    "returning: it spins (asyncio.sleep(0) in a loop, or polling queue.empty()) instead of awaiting "
                    "the queue with a timeout"
                }
            except _Deadlock:
                return {"failed": "it waits for something that never comes (nothing is scheduled, nothing is ready)"}
            except Exception as e:  # noqa: BLE001 - the learner's code may raise anything: that is its answer
                return {"failed": f"your code raised {type(e).__name__}: {e} (at {_ms(_at_ms(loop))})"}
    finally:
        with contextlib.suppress(BaseException):
            with _simulated_clock(loop, collect_batch):
                tasks = asyncio.all_tasks(loop)
                for t in tasks:
                    t.cancel()
                loop.iterations = 0
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        with contextlib.suppress(BaseException):
            loop.close()


def _same_collection(mine, ref) -> str | None:
    if not isinstance(mine, dict):
        return f"the run gave {short(mine)}"
    if "failed" in mine:
        return mine["failed"]
    batch, want = mine["batch"], ref["batch"]
    if not isinstance(batch, list):
        return f"collect_batch should return a list of items; it returned {type(batch).__name__} {short(batch)}"
    when = "the batch filled" if len(want) == ref.get("size") else "its window closed"
    if len(batch) != len(want) or any(not (a is b or a == b) for a, b in zip(batch, want)):
        return (
            f"your batch is {short(batch)} (sent at {_ms(mine['went_ms'])}); the reference's is {short(want)}, sent "
            f"at {_ms(ref['went_ms'])} when {when}"
        )
    if abs(mine["went_ms"] - ref["went_ms"]) > 1e-3:
        return (
            f"your batch {short(batch)} went at {_ms(mine['went_ms'])} after the call; the reference's went at "
            f"{_ms(ref['went_ms'])}, when {when}"
        )
    if len(mine["left"]) != len(ref["left"]) or any(not (a == b) for a, b in zip(mine["left"], ref["left"])):
        return (
            f"after your loop returned {short(batch)}, the queue held {short(mine['left'])} once every item had "
            f"arrived; it should hold {short(ref['left'])}, in arrival order (a get() left waiting after you return "
            "swallows the next item; items taken and not returned are lost)"
        )
    if mine["wakeups"] > 2 * ref["wakeups"] + 10:
        return (
            f"your loop slept and woke {mine['wakeups']} times before sending its batch at {_ms(mine['went_ms'])}; "
            f"the reference woke {ref['wakeups']} times (when an item arrived or the window closed): it polls on a "
            "timer instead of awaiting the queue, and every wake-up costs CPU the model needs"
        )
    return None


def _collections():
    """Hypothesis: max_batch_size 1..6, 64 or 1000; max_wait_s 0 or off the arrival grid (sub-ms parts, up to
    0.9 s); arrival events on a 0.25 ms grid: already queued at the call or late (up to 400 ms), close together or
    far apart, one to three items each; items any values: ints past 2**31 and 2**63, None, '', (), in no order."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        size = d(st.one_of(st.integers(1, 6), st.sampled_from([64, 1000])))
        window = d(st.one_of(st.just(None), st.integers(0, 80), st.sampled_from([199, 399, 1999, 3599])))
        max_wait_s = 0.0 if window is None else (window + 0.5) * _TICK
        base = d(st.sampled_from([1, 2**31 - 2, 2**63]))
        order = iter(d(st.permutations(range(30))))
        odd = d(st.lists(st.sampled_from([None, "", (), 0.5]), max_size=2, unique=True))
        tick = d(st.one_of(st.just(0), st.integers(1, 60), st.sampled_from([400, 1600])))
        arrivals = []
        for i in range(d(st.integers(1, 7))):
            if i:
                tick += d(st.one_of(st.integers(1, 30), st.sampled_from([100, 800, 4000])))
            n = 1 if (i == 0 and window is None) else d(st.integers(1, 3))
            items = []
            for _ in range(n):
                items.append(odd.pop() if odd and d(st.booleans()) else base + next(order))
            arrivals.append((tick, items))
        return size, max_wait_s, arrivals

    return draw()


def _describe_collection(size, max_wait_s, arrivals) -> str:
    said = ", ".join(f"{items!r} at {_ms(tick * _TICK * 1e3)}" for tick, items in arrivals)
    return (
        f"max_batch_size={size}, max_wait_s={max_wait_s!r}, items arriving {said} (ms after collect_batch was "
        "called, on the check's simulated clock, which time.monotonic(), time.perf_counter(), time.time() and "
        "loop.time() read)"
    )


async def _reference_collect_batch(queue, max_batch_size, max_wait_s):
    """The contract: block for the first item; the window opens then and is fixed; take items until full or closed."""
    loop = asyncio.get_running_loop()
    batch = [await queue.get()]
    deadline = loop.time() + max_wait_s
    while len(batch) < max_batch_size:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


@check(LAB, "collect_batch agrees with the rule on every arrival pattern tried, and sleeps while it waits")
def check_collect_same_as_reference(collect_batch):
    """The learner's loop and the reference replay the same generated arrivals on a simulated clock."""

    def reference(size, max_wait_s, arrivals):
        out = _drive_collect(_reference_collect_batch, size, max_wait_s, arrivals)
        out["size"] = size
        return out

    edges = [
        (8, 0.0, [(0, ["only"])]),
        (3, 0.0124375, [(0, [2**31 + 1, 0.5, 7, 9])]),
        (4, (3599 + 0.5) * _TICK, [(1600, [5]), (2000, [None]), (6000, [""])]),
        (1000, (399 + 0.5) * _TICK, [(0, [1]), (160, [2]), (320, [3]), (480, [4]), (640, [5])]),
        (2, (40 + 0.5) * _TICK, [(8, [3]), (48, [1]), (49, [2])]),
    ]
    same_as_reference(
        lambda size, max_wait_s, arrivals: _drive_collect(collect_batch, size, max_wait_s, arrivals),
        reference,
        _collections(),
        describe=_describe_collection,
        compare=_same_collection,
        edges=edges,
        arg_names=("max_batch_size", "max_wait_s", "arrivals"),
        examples=120,
    )


# --------------------------------------------------------------------------- run_isolated against a reference

_ERRORS = {"ValueError": ValueError, "RuntimeError": RuntimeError, "TypeError": TypeError, "KeyError": KeyError}


class _Recorder:
    """A fake model: an item in `bad` raises (a fresh exception each call, of `error`), a batch longer than
    `batch_limit` raises MemoryError; results are item * factor (len for a text). Every call and raise is kept."""

    def __init__(self, bad, batch_limit, error, out, factor):
        self.bad, self.batch_limit, self.out, self.factor = list(bad), batch_limit, out, factor
        self.error = _ERRORS.get(error, _ModelError)
        self.calls, self.alone, self.batched = [], [], []

    def result(self, x):
        return (len(x) if isinstance(x, str) else x) * self.factor

    def __call__(self, items):
        items = list(items)
        self.calls.append(items)
        e = None
        if self.batch_limit is not None and len(items) > self.batch_limit:
            e = MemoryError(f"a batch of {len(items)} does not fit")
        elif any(x in self.bad for x in items):
            e = self.error(f"item {next(x for x in items if x in self.bad)!r} crashed the model")
        if e is not None:
            (self.alone if len(items) == 1 else self.batched).append(e)
            raise e
        results = [self.result(x) for x in items]
        return {"list": list, "tuple": tuple, "array": np.array}[self.out](results)


def _drive_isolated(run_isolated, items, bad, batch_limit, error, out, factor) -> dict:
    """Call run_isolated(model, items) on a recording fake model; return what the contract makes observable: each
    item's status and value (an error named by where fn raised it), whether the first call was the whole batch,
    and how many calls were made."""
    model = _Recorder(bad, batch_limit, error, out, factor)
    try:
        got = run_isolated(model, items)
    except (NotImplementedError, LabCheckFailed):
        raise
    except Exception as e:  # noqa: BLE001 - an error of fn that escapes is the answer under test
        return {
            "failed": f"run_isolated raised {type(e).__name__}: {e}; every error of fn must become that item's "
            "('error', exception)"
        }
    if not isinstance(got, (list, tuple)):
        return {"failed": f"run_isolated should return a list of (status, value) pairs; it returned {short(got)}"}
    pairs = []
    for i, pair in enumerate(got):
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] in ("ok", "error")):
            return {"failed": f"item {i} should be ('ok', result) or ('error', exception); it is {short(pair)}"}
        status, value = pair
        if status == "ok":
            pairs.append(("ok", value))
        elif any(value is e for e in model.alone):
            pairs.append(("error", "the exception fn raised when the item ran alone"))
        elif any(value is e for e in model.batched):
            pairs.append(("error", f"an exception fn raised for a batch of several items ({value!r})"))
        elif isinstance(value, BaseException):
            pairs.append(("error", f"an exception fn never raised ({value!r})"))
        else:
            pairs.append(("error", f"{short(value)}, not an exception"))
    if not items:
        calls = "-"  # an empty batch may skip fn altogether: the contract leaves it open
    elif not model.calls or model.calls[0] != list(items):
        calls = f"the first call of fn was {short(model.calls[0]) if model.calls else 'never made'}, not the batch"
    elif _first_call_succeeded(model):
        calls = (
            "one call"
            if len(model.calls) == 1
            else f"fn was called {len(model.calls)} times though the batch succeeded"
        )
    else:
        calls = "few calls" if len(model.calls) <= 2 * len(items) else f"fn was called {len(model.calls)} times"
    return {"pairs": pairs, "calls": calls}


def _first_call_succeeded(model) -> bool:
    first = model.calls[0]
    over = model.batch_limit is not None and len(first) > model.batch_limit
    return not over and not any(x in model.bad for x in first)


def _same_outcomes(mine, ref) -> str | None:
    if "failed" in mine:
        return mine["failed"]
    if mine["calls"] != ref["calls"]:
        return (
            f"{mine['calls']}: call fn on the whole batch first; if that succeeds, that one call answers every item; "
            "only if it fails, call fn on parts of it (single items, or halves), at most twice as many calls as items"
        )
    a, b = mine["pairs"], ref["pairs"]
    if len(a) != len(b):
        return f"yours gives {len(a)} (status, value) pairs for {len(b)} items: {short(a)}; the reference {short(b)}"
    for i, ((s1, v1), (s2, v2)) in enumerate(zip(a, b)):
        if s1 != s2:
            return (
                f"item {i} is {s1!r} in yours and {s2!r} in the reference's: yours {short(a)}, the reference {short(b)}"
            )
        if s1 == "ok":
            if not _equal_result(v1, v2):
                return (
                    f"item {i}'s result is {v1!r} in yours and {v2!r} (what fn gives for it alone) in the reference's"
                )
        elif v1 != v2:
            return f"item {i}'s error is {v1} in yours; the reference's is {v2}"
    return None


def _equal_result(mine, ref) -> bool:
    """The very result fn gave for the item: not a list of one, not a value rounded on the way (30 == 30.0)."""
    if isinstance(mine, (list, tuple, dict, np.ndarray)):
        return False
    try:
        return bool(mine == ref)
    except Exception:  # noqa: BLE001
        return False


def _isolation_cases():
    """Hypothesis: 0..7 items (ints past 2**31 and 2**53, texts '' included, repeats), a set of bad ones, sometimes
    a batch size fn cannot take, an exception type of any kind, fn's results as a list, tuple or numpy array, and a
    factor that changes from one case to the next (a result kept from an earlier call shows)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        pool = d(
            st.lists(
                st.one_of(
                    st.integers(-3, 9),
                    st.sampled_from([2**31 + 1, 2**53 + 1, 2**63]),
                    st.sampled_from(["", "ab", "text"]),
                ),
                min_size=1,
                max_size=5,
                unique=True,
            )
        )
        items = d(st.lists(st.sampled_from(pool), max_size=7))
        bad = d(st.lists(st.sampled_from(pool), max_size=3, unique=True))
        limit = d(st.one_of(st.none(), st.integers(1, 4)))
        error = d(st.sampled_from([*_ERRORS, "_ModelError"]))
        out = d(st.sampled_from(["list", "tuple", "array"]))
        if out == "array" and any(isinstance(x, str) for x in items):
            out = "list"
        factor = d(st.sampled_from([10, 3, -1]))
        return items, bad, limit, error, out, factor

    return draw()


def _describe_isolation(items, bad, limit, error, out, factor) -> str:
    return (
        f"items={items!r}, fn raising {error} for any batch holding one of {bad!r}"
        + (f", MemoryError for a batch of more than {limit}" if limit is not None else "")
        + f", else item * {factor} for each (len(text) * {factor}), returned as {'an' if out == 'array' else 'a'} {out}"
    )


@check(LAB, "run_isolated agrees with the rule on every batch tried (who fails, with which error, in order)")
def check_isolation_same_as_reference(run_isolated):
    """The learner's run_isolated and the reference (one call, then each item alone) see the same fake models."""

    def reference(fn, items):
        try:
            return [("ok", r) for r in fn(items)]
        except Exception:  # noqa: BLE001
            out = []
            for x in items:
                try:
                    out.append(("ok", fn([x])[0]))
                except Exception as e:  # noqa: BLE001
                    out.append(("error", e))
            return out

    edges = [
        ([], [], None, "ValueError", "list", 10),
        ([2**63, 0, -3, ""], [0], None, "KeyError", "tuple", 3),
        ([1, 2, 3, 4, 5], [], 2, "ValueError", "array", 10),
        ([7, -1, 7, 2**31 + 1], [7], None, "_ModelError", "array", -1),
    ]
    same_as_reference(
        lambda *case: _drive_isolated(run_isolated, *case),
        lambda *case: _drive_isolated(reference, *case),
        _isolation_cases(),
        describe=_describe_isolation,
        compare=_same_outcomes,
        edges=edges,
        arg_names=("items", "bad", "batch_limit", "error", "out", "factor"),
        examples=120,
    )
