"""Independent wrong answers for lab_batch_loop, written from labs/3_serving/lab_batch_loop.ipynb's contract alone."""

import asyncio
import time


async def collect_batch(queue, max_batch_size, max_wait_s):
    """Return a list of 1..max_batch_size items from `queue` (an asyncio.Queue)."""
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


def run_isolated(fn, items):
    """fn(items) once; on an exception, each item alone. One ("ok", value) | ("error", exc) per item."""
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for item in items:
            try:
                out.append(("ok", fn([item])[0]))
            except Exception as e:
                out.append(("error", e))
        return out


async def collect_polling(queue, max_batch_size, max_wait_s):
    """Checks the queue with get_nowait in a loop, yielding to the event loop between tries."""
    # differs on an empty queue left for 1 s: the loop spins (sleep(0)) and burns a core instead of sleeping
    while True:
        try:
            batch = [queue.get_nowait()]
            break
        except asyncio.QueueEmpty:
            await asyncio.sleep(0)
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size and time.monotonic() < deadline:
        try:
            batch.append(queue.get_nowait())
        except asyncio.QueueEmpty:
            await asyncio.sleep(0)
    return batch


async def collect_window_from_call(queue, max_batch_size, max_wait_s):
    """Opens the window when the call starts, not when the first item arrives."""
    # differs on: first item put 0.2 s after the call, a second 0.01 s later, max_batch_size 4, max_wait_s 0.1:
    # returns [first] instead of [first, second]
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


async def collect_wait_in_ms(queue, max_batch_size, max_wait_s):
    """Reads max_wait as milliseconds, as the server's max_wait_ms setting is."""
    # differs on: items 0.02 s apart, max_batch_size 4, max_wait_s 0.1: returns 1 item (window of 0.1 ms)
    # instead of 4 (or all that came within 0.1 s)
    batch = [await queue.get()]
    deadline = time.monotonic() + max_wait_s / 1000
    while len(batch) < max_batch_size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    return batch


_overflow = []


async def collect_drain_and_stash(queue, max_batch_size, max_wait_s):
    """Drains everything queued at once and keeps what does not fit for the next call."""
    # differs on a queue holding 6 items, max_batch_size 4: returns the first 4 but the queue is left empty
    # (items 5 and 6 sit in a module-level list) instead of still holding 5 and 6
    batch = list(_overflow)
    _overflow.clear()
    if not batch:
        batch.append(await queue.get())
    deadline = time.monotonic() + max_wait_s
    while len(batch) < max_batch_size:
        while not queue.empty():
            batch.append(queue.get_nowait())
        if len(batch) >= max_batch_size:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            batch.append(await asyncio.wait_for(queue.get(), remaining))
        except asyncio.TimeoutError:
            break
    _overflow.extend(batch[max_batch_size:])
    return batch[:max_batch_size]


async def collect_gives_up_when_idle(queue, max_batch_size, max_wait_s):
    """Waits for the first item with the same max_wait_s timeout, returning an empty batch when none comes."""
    # differs on: an empty queue, first item put after 0.3 s, max_wait_s 0.05: returns [] instead of [item]
    try:
        batch = [await asyncio.wait_for(queue.get(), max_wait_s)]
    except asyncio.TimeoutError:
        return []
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


def isolated_batch_exception(fn, items):
    """A failing item is reported with the exception that the whole batch raised."""
    # differs on fn raising TypeError for the batch [1, "x"] and ValueError for ["x"] alone:
    # ("error", TypeError) for "x" instead of ("error", ValueError)
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as batch_error:
        out = []
        for item in items:
            try:
                out.append(("ok", fn([item])[0]))
            except Exception:
                out.append(("error", batch_error))
        return out


def isolated_retries_batch(fn, items):
    """Retries the whole batch once before isolating, in case the failure was transient."""
    # differs on a batch [1, "bad", 3] whose bad item always fails: fn called 5 times instead of 4
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        try:
            return [("ok", r) for r in fn(items)]
        except Exception:
            pass
        out = []
        for item in items:
            try:
                out.append(("ok", fn([item])[0]))
            except Exception as e:
                out.append(("error", e))
        return out


def isolated_error_message(fn, items):
    """Records the failing item's error message, which is what a client's response carries."""
    # differs on fn raising ValueError("bad") for "x": ("error", "bad") instead of ("error", ValueError("bad"))
    try:
        return [("ok", r) for r in fn(items)]
    except Exception:
        out = []
        for item in items:
            try:
                out.append(("ok", fn([item])[0]))
            except Exception as e:
                out.append(("error", str(e)))
        return out


def isolated_reraise_when_all_fail(fn, items):
    """When no item succeeds alone either, the model is broken: re-raises the batch's exception."""
    # differs on fn that always raises RuntimeError, items [1, 2]: raises instead of two ("error", ...) pairs
    try:
        return [("ok", r) for r in fn(items)]
    except Exception as batch_error:
        out = []
        for item in items:
            try:
                out.append(("ok", fn([item])[0]))
            except Exception as e:
                out.append(("error", e))
        if all(kind == "error" for kind, _ in out):
            raise batch_error
        return out


RIGHT = {"collect_batch": collect_batch, "run_isolated": run_isolated}
WRONG = [
    ("collect_batch", collect_polling, "resources: busy polling"),
    ("collect_batch", collect_window_from_call, "boundaries"),
    ("collect_batch", collect_wait_in_ms, "units"),
    ("collect_batch", collect_drain_and_stash, "state: module-level variable"),
    ("collect_batch", collect_gives_up_when_idle, "misread prose"),
    ("run_isolated", isolated_batch_exception, "error handling"),
    ("run_isolated", isolated_retries_batch, "resources"),
    ("run_isolated", isolated_error_message, "error handling"),
    ("run_isolated", isolated_reraise_when_all_fail, "misread prose"),
]
