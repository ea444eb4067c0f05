"""The batch-loop lab's checks pass the right loop and reject plausible wrong ones.

async collect_batch(queue, max_batch_size, max_wait_s) -> list
| question | what the checks try |
|---|---|
| which input varies each field | max_batch_size alone (1, 4, 8, 16, 64, 1000), max_wait_s alone (0, 0.05, 0.2, 0.6, 2.0, two windows far apart), the feed alone (all at once, a trickle, late) |
| boundaries | max_wait_s 0 (go at once with what is there); a batch exactly full; more queued than fits; falsy items (0, '', None) |
| a shape the notes never show | items arriving during the window; a first item that arrives late (the window opens then) |
| order or ties | the first items in arrival order, the rest left queued in order |
| errors: type and message | a loop that waits forever or blocks the event loop fails within its limit with words; no busy polling (CPU time over an idle second) |
| policy: which item | which items: the first ones, never more than max_batch_size; the window fixed at the first item |

run_isolated(fn, items) -> list of ("ok", result) | ("error", exception)
| question | what the checks try |
|---|---|
| which input varies each field | where the bad item sits (first, middle, last), what fn returns (list, tuple, generator) |
| boundaries | [] and a single item; every item bad; a batch-only failure (every item alone succeeds) |
| a type the notes never show | exceptions of other types than ValueError; results fn returns as any sequence |
| order or ties | results paired with their items in order |
| errors: type and message | the very exception fn raised for the item alone; a BaseException that is not an Exception (Ctrl-C) is not swallowed |
| policy: which item | which items fail: only those that fail alone; the first call is the whole batch, one call when it succeeds |


Each wrong answer is one class of mistake (the window restarts, busy polling, a constant instead of the
argument, an off-by-one, a swallowed error, ...); each is rejected with the message that names it.
"""

import asyncio
import time

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab_batch_loop as L


async def right(queue, max_batch_size, max_wait_s):
    batch = [await queue.get()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


async def right_drains_first(queue, max_batch_size, max_wait_s):
    """Also right: take what is already queued without waiting, then wait for the rest of the window."""
    batch = [await queue.get()]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while len(batch) < max_batch_size:
        if not queue.empty():
            batch.append(queue.get_nowait())
            continue
        try:
            batch.append(await asyncio.wait_for(queue.get(), max(0.0, deadline - loop.time())))
        except asyncio.TimeoutError:
            break
    return batch


# --- wrong collect_batch, one class of mistake each -------------------------------------------------------


async def waits_forever(queue, max_batch_size, max_wait_s):
    return [await queue.get() for _ in range(max_batch_size)]


async def never_batches(queue, max_batch_size, max_wait_s):
    return [await queue.get()]


async def always_waits(queue, max_batch_size, max_wait_s):
    first = await queue.get()
    await asyncio.sleep(max_wait_s)
    batch = [first]
    while not queue.empty() and len(batch) < max_batch_size:
        batch.append(queue.get_nowait())
    return batch


async def drains_everything(queue, max_batch_size, max_wait_s):
    batch = [await queue.get()]
    await asyncio.sleep(min(max_wait_s, 0.01))
    while not queue.empty():
        batch.append(queue.get_nowait())
    return batch


async def window_from_call(queue, max_batch_size, max_wait_s):
    deadline = time.monotonic() + max_wait_s
    batch = []
    while len(batch) < max_batch_size and time.monotonic() < deadline:
        try:
            batch.append(await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic())))
        except asyncio.TimeoutError:
            break
    return batch


async def snapshot_only(queue, max_batch_size, max_wait_s):
    batch = [await queue.get()]
    while not queue.empty() and len(batch) < max_batch_size:
        batch.append(queue.get_nowait())
    return batch


async def restarts_window(queue, max_batch_size, max_wait_s):
    """A fixed timeout per get(): every new item opens a fresh window."""
    batch = [await queue.get()]
    while len(batch) < max_batch_size:
        try:
            batch.append(await asyncio.wait_for(queue.get(), max_wait_s))
        except asyncio.TimeoutError:
            break
    return batch


async def busy_polls(queue, max_batch_size, max_wait_s):
    """Right batches, but spins on the queue instead of awaiting it."""
    while queue.empty():
        await asyncio.sleep(0)
    batch = [queue.get_nowait()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size and time.monotonic() < deadline:
        if queue.empty():
            await asyncio.sleep(0)
        else:
            batch.append(queue.get_nowait())
    return batch


async def blocking_poll(queue, max_batch_size, max_wait_s):
    """Waits with time.sleep: the event loop (and the producer) is frozen while it waits."""
    while queue.empty():
        time.sleep(0.01)
    batch = [queue.get_nowait()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size and time.monotonic() < deadline:
        if queue.empty():
            time.sleep(0.01)
        else:
            batch.append(queue.get_nowait())
    return batch


async def fixed_size_8(queue, max_batch_size, max_wait_s):
    return await right(queue, 8, max_wait_s)


async def fixed_window(queue, max_batch_size, max_wait_s):
    return await right(queue, max_batch_size, 0.1)


async def window_in_ms(queue, max_batch_size, max_wait_s):
    return await right(queue, max_batch_size, max_wait_s / 1000)


async def off_by_one(queue, max_batch_size, max_wait_s):
    batch = [await queue.get()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) <= max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


async def puts_back_extra(queue, max_batch_size, max_wait_s):
    """Takes one item too many, then puts it back - at the back of the queue."""
    batch = await off_by_one(queue, max_batch_size, max_wait_s)
    if len(batch) > max_batch_size:
        queue.put_nowait(batch.pop())
    return batch


async def drops_falsy(queue, max_batch_size, max_wait_s):
    batch = [x for x in await right(queue, max_batch_size, max_wait_s) if x]
    return batch or [None]


async def returns_tuple(queue, max_batch_size, max_wait_s):
    return tuple(await right(queue, max_batch_size, max_wait_s))


async def deadline_before_first(queue, max_batch_size, max_wait_s):
    """Fixes the window's end before the first item has arrived."""
    deadline = time.monotonic() + max_wait_s
    batch = [await queue.get()]
    while len(batch) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


async def newest_first(queue, max_batch_size, max_wait_s):
    return list(reversed(await right(queue, max_batch_size, max_wait_s)))


# --- run_isolated ----------------------------------------------------------------------------------------


def run_isolated_right(fn, items):
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except Exception as e:
                out.append(("error", e))
        return out


def run_isolated_bisect(fn, items):
    """Also right (what ailab.batching does): split a failing batch in halves, retry only the halves that fail."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as e:
        if len(items) == 1:
            return [("error", e)]
    mid = len(items) // 2
    return run_isolated_bisect(fn, items[:mid]) + run_isolated_bisect(fn, items[mid:])


def fail_whole_batch(fn, items):
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as e:
        return [("error", e)] * len(items)


def always_one_by_one(fn, items):
    out = []
    for x in items:
        try:
            out.append(("ok", fn([x])[0]))
        except Exception as e:
            out.append(("error", e))
    return out


def carries_batch_error(fn, items):
    """Finds the bad item, but hands it the batch's exception instead of its own."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as batch_error:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except Exception:
                out.append(("error", batch_error))
        return out


def swallows_errors(fn, items):
    """The broken input reports success."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except Exception:
                out.append(("ok", None))
        return out


def catches_only_value_error(fn, items):
    try:
        return [("ok", r) for r in fn(items)]
    except ValueError:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except ValueError as e:
                out.append(("error", e))
        return out


def keeps_the_list(fn, items):
    """Pairs each item with fn([x]) - a list of one - instead of its only result."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])))
            except Exception as e:
                out.append(("error", e))
        return out


def bare_except(fn, items):
    try:
        return [("ok", r) for r in fn(items)]
    except:  # noqa: E722 - the mistake under test
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except:  # noqa: E722
                out.append(("error", RuntimeError("failed")))
        return out


def raises_when_all_fail(fn, items):
    out = run_isolated_right(fn, items)
    if all(s == "error" for s, _ in out):
        raise RuntimeError("the model failed on every item")
    return out


def stops_at_first_bad(fn, items):
    """Retries one by one until it finds the bad item, then runs the rest as one batch, unprotected."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for i, x in enumerate(items):
            try:
                out.append(("ok", fn([x])[0]))
            except Exception as e:
                out.append(("error", e))
                return out + [("ok", r) for r in fn(items[i + 1 :])]
        return out


def error_as_text(fn, items):
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x])[0]))
            except Exception as e:
                out.append(("error", str(e)))
        return out


def errors_at_the_end(fn, items):
    out = run_isolated_right(fn, items)
    return [p for p in out if p[0] == "ok"] + [p for p in out if p[0] == "error"]


def assumes_numpy(fn, items):
    """Only works for a model that returns a numpy array."""
    try:
        return [("ok", r) for r in fn(items).tolist()]
    except Exception:
        out = []
        for x in items:
            try:
                out.append(("ok", fn([x]).tolist()[0]))
            except Exception as e:
                out.append(("error", e))
        return out


def retries_whole_batch(fn, items):
    """Retries the whole batch once ("it may be transient") before isolating."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        try:
            return [("ok", r) for r in fn(items)]
        except Exception:
            return run_isolated_right(fn, items)


def stub(*a, **k):
    raise NotImplementedError("write it")


COLLECT_CHECKS = [
    L.check_dispatch_on_size,
    L.check_dispatch_on_timeout,
    L.check_never_exceeds_max,
    L.check_window_opens_at_first_item,
    L.check_batches_trickle,
    L.check_window_does_not_restart,
    L.check_idles_while_waiting,
    L.check_collect_same_as_reference,
]
ISOLATE_CHECKS = [
    L.check_isolated_success_runs_once,
    L.check_isolates_bad_item,
    L.check_isolation_every_item_fails,
    L.check_isolation_lets_interrupts_through,
    L.check_isolation_same_as_reference,
]


@pytest.mark.parametrize("impl", [right, right_drains_first])
@pytest.mark.parametrize("chk", COLLECT_CHECKS)
def test_right_collect_passes(chk, impl):
    chk(impl)


@pytest.mark.parametrize("impl", [run_isolated_right, run_isolated_bisect])
@pytest.mark.parametrize("chk", ISOLATE_CHECKS)
def test_right_isolation_passes(chk, impl):
    chk(impl)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_dispatch_on_size, always_waits, "do not wait out max_wait_s"),
        (L.check_dispatch_on_size, off_by_one, "do not wait out max_wait_s"),
        (L.check_dispatch_on_size, fixed_size_8, r"max_batch_size=3 the batch should be the first 3"),
        (L.check_never_exceeds_max, puts_back_extra, r"must stay queued in order"),
        (L.check_dispatch_on_timeout, waits_forever, "it waits forever"),
        (L.check_dispatch_on_timeout, never_batches, "never batches"),
        (L.check_dispatch_on_timeout, fixed_window, r"max_wait_s=0.9 the partial batch went after"),
        # A 0.1 ms window sends at once; on a busy machine its timer can even fire before a queued item is handed
        # over, and the batch comes out short (a stop-19 CI run). Either way it is rejected at max_wait_s=0.1.
        (L.check_dispatch_on_timeout, window_in_ms, r"max_wait_s=0\.1( the partial batch went after|\); the batch)"),
        (L.check_never_exceeds_max, drains_everything, r"holds 50 items but max_batch_size=8"),
        (L.check_never_exceeds_max, off_by_one, r"holds 9 items but max_batch_size=8"),
        (L.check_never_exceeds_max, fixed_size_8, r"holds 8 items but max_batch_size=1"),
        (L.check_never_exceeds_max, drops_falsy, "falsy ones included"),
        (L.check_never_exceeds_max, returns_tuple, "should return a list"),
        (L.check_window_opens_at_first_item, window_from_call, "empty batch|window must start"),
        (L.check_window_opens_at_first_item, never_batches, "expected both"),
        (L.check_window_opens_at_first_item, blocking_poll, "blocked the event loop"),
        (L.check_window_opens_at_first_item, deadline_before_first, "expected both"),
        (L.check_dispatch_on_size, newest_first, "in order"),
        (L.check_batches_trickle, never_batches, "keep waiting for more items"),
        (L.check_batches_trickle, snapshot_only, "keep waiting for more items"),
        (L.check_window_does_not_restart, restarts_window, "restarts at every item"),
        (L.check_window_does_not_restart, never_batches, "keep taking items"),
        (L.check_idles_while_waiting, busy_polls, "polls instead of sleeping"),
    ],
)
def test_wrong_collect_fails(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_busy_polling_is_a_real_cpu_cost():
    """The measurement behind check_idles_while_waiting: the right loop sleeps, the busy one spins."""
    feed = L._trickle(["a"], 1.0, delay_s=0.4)
    assert L._collect(right, feed, 8, 0.6)["cpu"] < 0.05
    assert L._collect(busy_polls, feed, 8, 0.6)["cpu"] > 0.15


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_isolates_bad_item,
            fail_whole_batch,
            r"bad item in the middle: statuses should be \['ok', 'ok', 'error'",
        ),
        (L.check_isolated_success_runs_once, always_one_by_one, "first call of fn should be the whole batch"),
        (L.check_isolates_bad_item, always_one_by_one, "first call of fn should be the whole batch"),
        (L.check_isolates_bad_item, carries_batch_error, "should carry the exception fn raised when it ran alone"),
        (L.check_isolates_bad_item, swallows_errors, r"statuses should be \['ok', 'ok', 'error', 'ok'\]"),
        (L.check_isolation_every_item_fails, swallows_errors, r"statuses should be \['error', 'error', 'error'\]"),
        (L.check_isolates_bad_item, catches_only_value_error, "raised RuntimeError"),
        (L.check_isolates_bad_item, keeps_the_list, "result fn gives for it alone"),
        (L.check_isolation_lets_interrupts_through, bare_except, "Ctrl-C and SystemExit must stop"),
        (L.check_isolation_every_item_fails, raises_when_all_fail, "run_isolated raised RuntimeError"),
        (L.check_isolates_bad_item, stops_at_first_bad, "two bad items: run_isolated raised _ModelError"),
        (L.check_isolates_bad_item, error_as_text, "its value should be the exception object"),
        (L.check_isolates_bad_item, errors_at_the_end, "statuses should be"),
        (L.check_isolated_success_runs_once, assumes_numpy, r"2 items: statuses should be \['ok', 'ok'\]"),
    ],
)
def test_wrong_isolation_fails(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_fail_whole_batch_passes_the_happy_path_but_not_isolation():
    L.check_isolated_success_runs_once(fail_whole_batch)
    with pytest.raises(LabCheckFailed):
        L.check_isolates_bad_item(fail_whole_batch)


@pytest.mark.parametrize("chk", COLLECT_CHECKS + ISOLATE_CHECKS)
def test_stub_fails(chk):
    async def astub(*a):
        raise NotImplementedError("write it")

    with pytest.raises(LabCheckFailed):
        chk(stub if chk in ISOLATE_CHECKS else astub)


# --- the differential checks: the learner's functions and the references replay the same generated cases ----------


def test_the_differential_checks_are_quick_on_a_right_answer():
    t0 = time.monotonic()
    L.check_collect_same_as_reference(right)
    L.check_isolation_same_as_reference(run_isolated_right)
    assert time.monotonic() - t0 < 10.0  # about 1.5 s each alone; generous for a shared, busy machine


def test_the_simulated_clock_is_put_back():
    real = L._REAL["monotonic"]
    L.check_collect_same_as_reference(right)
    with pytest.raises(LabCheckFailed):
        L.check_collect_same_as_reference(blocking_poll)
    assert time.monotonic is real and time.sleep is L._REAL["sleep"]
    assert globals()["time"] is time and abs(time.monotonic() - real()) < 1.0


# New wrong answers for collect_batch, one plausible mistake each, right otherwise.

# units and rounding


async def window_whole_ms(queue, max_batch_size, max_wait_s):
    """Keeps the window in whole milliseconds (`int(max_wait_s * 1000)`): up to 1 ms of every window is lost."""
    return await right(queue, max_batch_size, int(max_wait_s * 1000) / 1000)


async def clock_whole_ms(queue, max_batch_size, max_wait_s):
    """Reads the clock in whole milliseconds (`monotonic_ns() // 1_000_000`): the window opens up to 1 ms early."""
    batch = [await queue.get()]
    deadline_ms = time.monotonic_ns() // 1_000_000 + max_wait_s * 1000
    while len(batch) < max_batch_size:
        remaining = (deadline_ms - time.monotonic_ns() // 1_000_000) / 1000
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


# boundaries of the contract


async def zero_wait_is_no_limit(queue, max_batch_size, max_wait_s):
    """`max_wait_s or None`: a window of 0 reads as 'no window', so it waits for a full batch."""
    batch = [await queue.get()]
    while len(batch) < max_batch_size:
        try:
            batch.append(await asyncio.wait_for(queue.get(), max_wait_s or None))
        except asyncio.TimeoutError:
            break
    return batch


async def checks_size_after_waiting(queue, max_batch_size, max_wait_s):
    """Tests for a full batch only after waiting for the next item: with max_batch_size=1 it takes two."""
    batch = [await queue.get()]
    deadline = time.monotonic() + max_wait_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
        if len(batch) >= max_batch_size:
            break
    return batch


# state that outlives a call


async def leaves_getter_behind(queue, max_batch_size, max_wait_s):
    """asyncio.wait on a get() task, not cancelled when the window closes: it swallows the next item to arrive."""
    batch = [await queue.get()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        getter = asyncio.ensure_future(queue.get())
        done, _ = await asyncio.wait({getter}, timeout=remaining)
        if not done:
            break  # the mistake: the getter is left waiting
        batch.append(getter.result())
    return batch


_overflow: list = []


async def keeps_overflow(queue, max_batch_size, max_wait_s):
    """Drains every waiting item into a list of its own and serves the next call from it: the queue no longer
    holds what waits, and what one queue left is served for another."""
    if not _overflow:
        _overflow.append(await queue.get())
    deadline = time.monotonic() + max_wait_s
    while len(_overflow) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            _overflow.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    while not queue.empty():
        _overflow.append(queue.get_nowait())
    batch = _overflow[:max_batch_size]
    del _overflow[:max_batch_size]
    return batch


# order


async def sorted_batch(queue, max_batch_size, max_wait_s):
    """Sorts the batch ("by request id"): arrival order is lost."""
    return sorted(await right(queue, max_batch_size, max_wait_s), key=repr)


async def deduplicated_batch(queue, max_batch_size, max_wait_s):
    """`list(set(batch))` to drop duplicates: the order is the set's, not the arrivals'."""
    return list(set(await right(queue, max_batch_size, max_wait_s)))


# resources


async def polls_every_ms(queue, max_batch_size, max_wait_s):
    """Right batches, but checks the queue every millisecond instead of awaiting it."""
    while queue.empty():
        await asyncio.sleep(0.001)
    batch = [queue.get_nowait()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size and time.monotonic() < deadline:
        if queue.empty():
            await asyncio.sleep(min(0.001, max(0.0, deadline - time.monotonic())))
        else:
            batch.append(queue.get_nowait())
    return batch


async def polls_for_the_first_item(queue, max_batch_size, max_wait_s):
    """Polls every 10 ms for the first item (then waits right): an idle server wakes 100 times a second."""
    while queue.empty():
        await asyncio.sleep(0.01)
    batch = [queue.get_nowait()]
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


NEW_WRONG_COLLECT = [
    window_whole_ms,
    clock_whole_ms,
    zero_wait_is_no_limit,
    checks_size_after_waiting,
    leaves_getter_behind,
    keeps_overflow,
    sorted_batch,
    deduplicated_batch,
    polls_every_ms,
    polls_for_the_first_item,
]
OLD_WRONG_COLLECT = [
    waits_forever,
    never_batches,
    always_waits,
    drains_everything,
    window_from_call,
    snapshot_only,
    restarts_window,
    busy_polls,
    blocking_poll,
    fixed_size_8,
    fixed_window,
    window_in_ms,
    off_by_one,
    puts_back_extra,
    drops_falsy,
    returns_tuple,
    deadline_before_first,
    newest_first,
]


@pytest.mark.parametrize("wrong", NEW_WRONG_COLLECT + OLD_WRONG_COLLECT)
def test_the_collect_differential_check_catches_every_wrong_answer(wrong):
    _overflow.clear()
    with pytest.raises(LabCheckFailed, match="collect_batch agrees with the rule"):
        L.check_collect_same_as_reference(wrong)
    _overflow.clear()


def test_polling_every_ms_is_named_as_polling():
    with pytest.raises(LabCheckFailed, match=r"slept and woke \d+ times.*it polls on a timer"):
        L.check_collect_same_as_reference(polls_every_ms)


def test_a_getter_left_behind_is_named():
    with pytest.raises(LabCheckFailed, match="a get.. left waiting after you return swallows the next item"):
        L.check_collect_same_as_reference(leaves_getter_behind)


@pytest.mark.parametrize("impl", [window_whole_ms, clock_whole_ms, polls_for_the_first_item, polls_every_ms])
def test_the_new_wrong_collect_answers_are_right_otherwise(impl):
    """They pass the hand-picked, real-time checks they were written against: one mistake each."""
    L.check_dispatch_on_size(impl)
    L.check_never_exceeds_max(impl)


# New wrong answers for run_isolated.


def results_as_float(fn, items):
    """Turns every result into a float ("JSON-friendly"): a large result is rounded."""
    return [(s, float(v) if s == "ok" else v) for s, v in run_isolated_right(fn, items)]


def bisect_stops_at_two(fn, items):
    """Bisects, but a failing pair is reported as two errors instead of being split once more."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as e:
        if len(items) <= 2:
            return [("error", e)] * len(items)
    mid = len(items) // 2
    return bisect_stops_at_two(fn, items[:mid]) + bisect_stops_at_two(fn, items[mid:])


def reraises_a_single_item(fn, items):
    """'A batch of one has nothing to isolate': re-raises its error instead of returning it."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        if len(items) == 1:
            raise
        return [run_isolated_right(fn, [x])[0] for x in items]


class RemembersBadItems:
    """Keeps the items that failed once and answers them with their old error without asking fn again."""

    def __init__(self):
        self.bad = {}

    def __call__(self, fn, items):
        if any(repr(x) in self.bad for x in items):
            out = []
            for x in items:
                out.append(("error", self.bad[repr(x)]) if repr(x) in self.bad else run_isolated_right(fn, [x])[0])
            return out
        out = run_isolated_right(fn, items)
        for x, (s, v) in zip(items, out):
            if s == "error":
                self.bad[repr(x)] = v
        return out


class CachesResults:
    """Caches each item's result across calls ("the model is deterministic"): a result from another model is served."""

    def __init__(self):
        self.cache = {}

    def __call__(self, fn, items):
        if items and all(repr(x) in self.cache for x in items):
            return [("ok", self.cache[repr(x)]) for x in items]
        out = run_isolated_right(fn, items)
        for x, (s, v) in zip(items, out):
            if s == "ok":
                self.cache[repr(x)] = v
        return out


def bisect_swapped_halves(fn, items):
    """Bisects, but joins the halves' answers right half first."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as e:
        if len(items) == 1:
            return [("error", e)]
    mid = len(items) // 2
    return bisect_swapped_halves(fn, items[mid:]) + bisect_swapped_halves(fn, items[:mid])


def sorts_errors_last_on_retry(fn, items):
    """On retry, answers the items in sorted order ("retry the cheap ones first") and forgets to restore the order."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for x in sorted(items, key=repr):
            try:
                out.append(("ok", fn([x])[0]))
            except Exception as e:
                out.append(("error", e))
        return out


NEW_WRONG_ISOLATION = [
    results_as_float,
    bisect_stops_at_two,
    reraises_a_single_item,
    RemembersBadItems,
    CachesResults,
    bisect_swapped_halves,
    sorts_errors_last_on_retry,
]
OLD_WRONG_ISOLATION = [
    fail_whole_batch,
    always_one_by_one,
    carries_batch_error,
    swallows_errors,
    catches_only_value_error,
    keeps_the_list,
    bare_except,
    raises_when_all_fail,
    stops_at_first_bad,
    error_as_text,
    errors_at_the_end,
    assumes_numpy,
    retries_whole_batch,
]


@pytest.mark.parametrize("wrong", NEW_WRONG_ISOLATION + OLD_WRONG_ISOLATION)
def test_the_isolation_differential_check_catches_every_wrong_answer(wrong):
    wrong = wrong() if isinstance(wrong, type) else wrong
    with pytest.raises(LabCheckFailed, match="run_isolated agrees with the rule"):
        L.check_isolation_same_as_reference(wrong)


@pytest.mark.parametrize("impl", [results_as_float, RemembersBadItems, CachesResults])
def test_the_new_wrong_isolation_answers_are_right_otherwise(impl):
    """They pass the hand-picked checks they were written against: one mistake each."""
    L.check_isolated_success_runs_once(impl() if isinstance(impl, type) else impl)
    L.check_isolates_bad_item(impl() if isinstance(impl, type) else impl)
