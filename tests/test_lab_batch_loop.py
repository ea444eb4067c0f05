"""The batch-loop lab's checks pass the right loop and reject plausible wrong ones."""
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


def stub(*a, **k):
    raise NotImplementedError("write it")


COLLECT_CHECKS = [L.check_dispatch_on_size, L.check_dispatch_on_timeout, L.check_never_exceeds_max,
                  L.check_window_opens_at_first_item, L.check_batches_trickle]


@pytest.mark.parametrize("chk", COLLECT_CHECKS)
def test_right_collect_passes(chk):
    chk(right)


def test_right_isolation_passes():
    L.check_isolates_bad_item(run_isolated_right)


@pytest.mark.parametrize("chk, wrong", [
    (L.check_dispatch_on_size, always_waits),
    (L.check_dispatch_on_timeout, waits_forever),
    (L.check_dispatch_on_timeout, never_batches),
    (L.check_never_exceeds_max, drains_everything),
    (L.check_window_opens_at_first_item, window_from_call),
    (L.check_window_opens_at_first_item, never_batches),
    (L.check_batches_trickle, never_batches),
    (L.check_batches_trickle, snapshot_only),
    (L.check_isolates_bad_item, fail_whole_batch),
    (L.check_isolates_bad_item, always_one_by_one),
])
def test_wrong_answers_fail(chk, wrong):
    with pytest.raises(LabCheckFailed):
        chk(wrong)


@pytest.mark.parametrize("chk", COLLECT_CHECKS + [L.check_isolates_bad_item])
def test_stub_fails(chk):
    async def astub(*a):
        raise NotImplementedError("write it")

    with pytest.raises(LabCheckFailed):
        chk(stub if chk is L.check_isolates_bad_item else astub)
