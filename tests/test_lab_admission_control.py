"""The admission-control lab's checks pass the right answer and reject plausible wrong ones.

admit(queue, request, max_queue) -> None
| question | what the checks try |
|---|---|
| which input varies each field | max_queue alone (0, 1, 3, 4, 7) and the queue alone (empty, holding 5 admitted elsewhere) |
| boundaries | len == max_queue refuses, len == max_queue - 1 accepts; a queue already over the bound; max_queue 0 (no room, not no bound) |
| a shape the notes never show | a bound lowered while requests wait |
| order or ties | accepted requests at the back, in order, the same objects |
| errors: type and message | QueueFullError (not another type, not a return value), at once (a waiting admit fails within 2 s), the queue unchanged; admits again once there is room |
| policy: which item | - |

take_batch(queue, now, max_batch_size) -> (batch, expired)
| question | what the checks try |
|---|---|
| which input varies each field | now alone (deadlines around it), max_batch_size alone (0, 1, 2, more than queued) |
| boundaries | deadline == now (expired) and just after; everything expired (an empty batch); max_batch_size 0 |
| a shape the notes never show | deadlines near 1e12 and below 0 (another clock) |
| order or ties | FIFO; it stops when the batch is full, so what follows stays queued in order |
| errors: type and message | two lists of Request objects; the deque mutated in place, not rebound |
| policy: which item | which requests are computed: live ones only, oldest first, expired ones answered, never computed; under 2x overload the wait stays bounded |


Each wrong answer is one class of mistake (a constant instead of the argument, an off-by-one at the bound,
a strict comparison at the deadline, another clock, a queue rebound instead of mutated, ...); each is
rejected with the message that names it.
"""

import math
import time
from collections import deque

import numpy as np
import pytest

from ailab.batching import QueueFullError
from ailab.labs import LabCheckFailed
from ailab.labs import lab_admission_control as L


def admit(queue, request, max_queue):
    if len(queue) >= max_queue:
        raise QueueFullError(f"queue full ({max_queue})")
    queue.append(request)


def take_batch(queue, now, max_batch_size):
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def admit_unbounded(queue, request, max_queue):
    queue.append(request)


def admit_returns_false(queue, request, max_queue):
    if len(queue) >= max_queue:
        return False
    queue.append(request)


def admit_off_by_one(queue, request, max_queue):
    if len(queue) > max_queue:
        raise QueueFullError("full")
    queue.append(request)


def admit_drops_oldest(queue, request, max_queue):
    if len(queue) >= max_queue:
        queue.popleft()
    queue.append(request)


class Latch:
    """Refuses forever once it has been full: a circuit that never closes again."""

    def __init__(self):
        self.tripped = False

    def __call__(self, queue, request, max_queue):
        if self.tripped or len(queue) >= max_queue:
            self.tripped = True
            raise QueueFullError("full")
        queue.append(request)


def take_no_deadline(queue, now, max_batch_size):
    batch = []
    while queue and len(batch) < max_batch_size:
        batch.append(queue.popleft())
    return batch, []


def take_expired_counted_in_batch(queue, now, max_batch_size):
    batch, expired = [], []
    n = 0
    while queue and n < max_batch_size:
        r = queue.popleft()
        n += 1
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def take_lifo(queue, now, max_batch_size):
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.pop()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def admit_exactly_full(queue, request, max_queue):
    """Full only at exactly max_queue: a queue already past the bound keeps growing."""
    if len(queue) == max_queue:
        raise QueueFullError("full")
    queue.append(request)


def admit_fixed_bound(queue, request, max_queue):
    """Uses the notes' 4 instead of the argument."""
    if len(queue) >= 4:
        raise QueueFullError("full")
    queue.append(request)


def admit_to_front(queue, request, max_queue):
    if len(queue) >= max_queue:
        raise QueueFullError("full")
    queue.appendleft(request)


class Counter:
    """Counts its own admissions instead of looking at the queue."""

    def __init__(self):
        self.n = 0

    def __call__(self, queue, request, max_queue):
        if self.n >= max_queue:
            raise QueueFullError("full")
        self.n += 1
        queue.append(request)


def admit_wrong_error(queue, request, max_queue):
    if len(queue) >= max_queue:
        raise ValueError("queue full")
    queue.append(request)


def admit_append_then_check(queue, request, max_queue):
    queue.append(request)
    if len(queue) > max_queue:
        raise QueueFullError("full")


def admit_waits_for_room(queue, request, max_queue):
    while len(queue) >= max_queue:
        time.sleep(0.01)
    queue.append(request)


def admit_slow_refusal(queue, request, max_queue):
    if len(queue) >= max_queue:
        time.sleep(1.5)
        raise QueueFullError("full")
    queue.append(request)


def admit_copies(queue, request, max_queue):
    if len(queue) >= max_queue:
        raise QueueFullError("full")
    queue.append(L.Request(request.id, request.deadline))


def take_strict(queue, now, max_batch_size):
    """deadline < now is expired: a request AT its deadline is still computed."""
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline >= now else expired).append(r)
    return batch, expired


def take_wall_clock(queue, now, max_batch_size):
    """Ignores `now` and reads a clock of its own."""
    return take_batch(queue, time.monotonic(), max_batch_size)


def take_fixed_size(queue, now, max_batch_size):
    return take_batch(queue, now, 3)


def take_off_by_one(queue, now, max_batch_size):
    batch, expired = [], []
    while queue and len(batch) <= max_batch_size:
        r = queue.popleft()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def take_sweeps_all_expired(queue, now, max_batch_size):
    """Drops every expired request in the queue, also those behind a full batch."""
    expired = [r for r in queue if r.deadline <= now]
    live = [r for r in queue if r.deadline > now]
    queue.clear()
    queue.extend(live[max_batch_size:])
    return live[:max_batch_size], expired


def take_rebinds(queue, now, max_batch_size):
    """Builds a new deque instead of popping from the caller's: the caller's queue never shrinks."""
    items = list(queue)
    batch, expired, i = [], [], 0
    while i < len(items) and len(batch) < max_batch_size:
        (batch if items[i].deadline > now else expired).append(items[i])
        i += 1
    queue = deque(items[i:])  # the mistake under test
    return batch, expired


def take_returns_ids(queue, now, max_batch_size):
    batch, expired = take_batch(queue, now, max_batch_size)
    return [r.id for r in batch], [r.id for r in expired]


def take_drops_expired_silently(queue, now, max_batch_size):
    batch, _ = take_batch(queue, now, max_batch_size)
    return batch, []


def take_stops_at_expired(queue, now, max_batch_size):
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        if r.deadline <= now:
            expired.append(r)
            break
        batch.append(r)
    return batch, expired


def take_one_then_check(queue, now, max_batch_size):
    """Checks the size only after adding: with max_batch_size=0 it still takes one."""
    batch, expired = [], []
    while queue:
        r = queue.popleft()
        if r.deadline <= now:
            expired.append(r)
            continue
        batch.append(r)
        if len(batch) == max_batch_size:
            break
    return batch, expired


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answer_passes():
    L.check_bound(admit)
    L.check_typed_error_and_recovery(admit)
    L.check_deadlines(take_batch)
    L.check_take_batch_arguments(take_batch)
    res = L.check_overload(admit, take_batch)
    assert res["max_queue_len"] <= 20


def test_unbounded_queue_fails_the_overload_check():
    res = L.simulate(admit_unbounded, take_batch)
    assert res["max_queue_len"] > 200  # the defect the check exists for
    with pytest.raises(LabCheckFailed, match="queue reached"):
        L.check_overload(admit_unbounded, take_batch)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_bound, admit_unbounded, "max_queue=4 but the queue now holds 10"),
        (L.check_bound, admit_off_by_one, "max_queue=4 but the queue now holds 5"),
        (
            L.check_bound,
            admit_drops_oldest,
            r"should be \[0, 1, 2, 3, 4\] \(the same Request object, at the back\); it is \[1, 2, 3, 4\]",
        ),
        (
            L.check_bound,
            admit_fixed_bound,
            r"with max_queue=1 and an empty queue, the first 1 requests should be accepted.*accepted \[0, 1, 2, 3\]",
        ),
        (L.check_bound, admit_to_front, r"the queue should be \[0, 1\] \(the same Request object, at the back\)"),
        (L.check_bound, Counter(), "with max_queue=1 and an empty queue.*the queue's own length"),
        (L.check_bound, admit_append_then_check, "refusal must leave the queue exactly as it was"),
        (L.check_bound, admit_copies, "not a copy"),
        (L.check_bound, admit_exactly_full, "over max_queue=3: admit.. must refuse"),
        (L.check_typed_error_and_recovery, admit_returns_false, "must raise QueueFullError.*returned False"),
        (L.check_typed_error_and_recovery, Latch(), "after one request left the full queue.*refused request 100"),
        (L.check_typed_error_and_recovery, admit_wrong_error, "raised ValueError.*raise ailab.batching.QueueFullError"),
        (L.check_typed_error_and_recovery, admit_waits_for_room, "did not return within 2 s: it waits for room"),
        (L.check_typed_error_and_recovery, admit_slow_refusal, "to refuse a request into a full queue: refuse at once"),
        (L.check_typed_error_and_recovery, admit_unbounded, "must raise QueueFullError"),
        (L.check_deadlines, take_no_deadline, "deadline has passed reached the batch"),
        (L.check_deadlines, take_expired_counted_in_batch, r"should be requests \[0, 2, 4\]"),
        (L.check_deadlines, take_lifo, r"should be requests \[0, 2, 4\]"),
        (L.check_deadlines, take_strict, r"deadline <= now is expired.*expired should be \[0, 2\], got \[2\]"),
        (L.check_deadlines, take_returns_ids, "should hold the Request objects themselves"),
        (L.check_deadlines, take_drops_expired_silently, "must be returned as expired"),
        (L.check_deadlines, take_stops_at_expired, r"should be requests \[0, 2, 4\]"),
        (L.check_take_batch_arguments, take_wall_clock, "not another clock"),
        (L.check_take_batch_arguments, take_fixed_size, "max_batch_size=1: the batch should be"),
        (L.check_take_batch_arguments, take_off_by_one, "max_batch_size=1: the batch should be"),
        (L.check_take_batch_arguments, take_sweeps_all_expired, "stop popping as soon as the batch is full"),
        (L.check_take_batch_arguments, take_rebinds, "should stay in the queue you were given"),
        (L.check_take_batch_arguments, take_one_then_check, "max_batch_size=0 takes nothing"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    if isinstance(wrong, (Latch, Counter)):
        wrong = type(wrong)()
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_overload_check_catches_serving_expired_requests():
    with pytest.raises(LabCheckFailed):
        L.check_overload(admit, take_no_deadline)


@pytest.mark.parametrize(
    "chk",
    [
        L.check_bound,
        L.check_typed_error_and_recovery,
        L.check_deadlines,
        L.check_take_batch_arguments,
        L.check_admit_same_as_reference,
        L.check_take_batch_same_as_reference,
    ],
)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed):
        chk(stub)


def test_stub_fails_overload():
    with pytest.raises(LabCheckFailed):
        L.check_overload(stub, stub)


def admit_alt(queue, request, max_queue):
    """Also right: accept when there is room and say so; refuse otherwise."""
    if len(queue) < max_queue:
        queue.append(request)
        return True
    raise QueueFullError(f"{len(queue)} of {max_queue} waiting")


def take_batch_alt(queue, now, max_batch_size):
    """Also right: peek before popping."""
    batch, expired = [], []
    while queue:
        if len(batch) == max_batch_size:
            break
        if queue[0].deadline <= now:
            expired.append(queue.popleft())
        else:
            batch.append(queue.popleft())
    return batch, expired


def test_other_right_answers_pass():
    L.check_bound(admit_alt)
    L.check_typed_error_and_recovery(admit_alt)
    L.check_deadlines(take_batch_alt)
    L.check_take_batch_arguments(take_batch_alt)
    L.check_overload(admit_alt, take_batch_alt)


def admit_zero_is_unbounded(queue, request, max_queue):
    """`if max_queue and len(queue) >= max_queue`: a bound of 0 reads as no bound."""
    if max_queue and len(queue) >= max_queue:
        raise QueueFullError(f"queue full ({max_queue})")
    queue.append(request)


def test_a_bound_of_zero_is_a_bound():
    with pytest.raises(LabCheckFailed, match=r"max_queue=0 is a queue with no room.*accepted \[0, 1\].*not 'no bound'"):
        L.check_bound(admit_zero_is_unbounded)


# --- the differential checks: the learner's function and the reference replay the same generated runs -------------


def test_right_answers_agree_with_the_reference():
    for fn in (admit, admit_alt):
        L.check_admit_same_as_reference(fn)
    for fn in (take_batch, take_batch_alt):
        L.check_take_batch_same_as_reference(fn)


def test_the_differential_checks_are_quick_on_a_right_answer():
    t0 = time.monotonic()
    L.check_admit_same_as_reference(admit)
    L.check_take_batch_same_as_reference(take_batch)
    assert time.monotonic() - t0 < 6.0  # about 0.5 s and 1.5 s alone; generous for a shared, busy machine


def test_the_differential_checks_refuse_a_stub():
    for chk in (L.check_admit_same_as_reference, L.check_take_batch_same_as_reference):
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            chk(stub)


# New wrong answers, one plausible mistake each, right otherwise.

# units and rounding


def take_truncates_now(queue, now, max_batch_size):
    """Reads the clock in whole ticks: `now = int(now)`, so a deadline inside the current tick looks live."""
    return take_batch(queue, int(now), max_batch_size)


def take_whole_ms(queue, now, max_batch_size):
    """Compares deadline and now in whole milliseconds (`int(x * 1000)`): inside one millisecond, all look equal."""
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if int(r.deadline * 1000) > int(now * 1000) else expired).append(r)
    return batch, expired


def take_float32_deadlines(queue, now, max_batch_size):
    """Vectorises the deadline test with float32 arrays: near an epoch clock (1.7e9) every deadline is rounded."""
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        live = np.float32(r.deadline) > np.float32(now)
        (batch if live else expired).append(r)
    return batch, expired


# boundaries of the contract


def take_zero_is_unbounded(queue, now, max_batch_size):
    """`max_batch_size or len(queue)`: a batch size of 0 reads as 'no limit'."""
    return take_batch(queue, now, max_batch_size or len(queue))


def admit_int32_ids(queue, request, max_queue):
    """Refuses a duplicate id by looking it up in an int32 array of the queued ids: ids past 2**31 overflow."""
    ids = np.array([r.id for r in queue] + [request.id], dtype=np.int32)
    if len(queue) >= max_queue:
        raise QueueFullError("full")
    if request.id in ids[:-1]:
        raise QueueFullError("duplicate")
    queue.append(request)


def admit_refuses_at_the_last_slot(queue, request, max_queue):
    """`len(queue) + 1 >= max_queue`: keeps one slot in reserve, so the queue never reaches its bound."""
    if len(queue) + 1 >= max_queue:
        raise QueueFullError("full")
    queue.append(request)


# state that outlives a call


class AdmitRemembersBound:
    """Reads max_queue on its first call and keeps it: a later, other bound is ignored."""

    def __init__(self):
        self.bound = None

    def __call__(self, queue, request, max_queue):
        if self.bound is None:
            self.bound = max_queue
        if len(queue) >= self.bound:
            raise QueueFullError("full")
        queue.append(request)


class TakeClockNeverGoesBack:
    """Keeps the latest `now` it saw ("clocks only go forward"): a later, smaller clock is read as the old one."""

    def __init__(self):
        self.latest = -math.inf

    def __call__(self, queue, now, max_batch_size):
        self.latest = max(self.latest, now)
        return take_batch(queue, self.latest, max_batch_size)


class TakeKeepsBacklog:
    """Pops every live request into a backlog of its own and serves the batch from there: the caller's queue no
    longer holds what waits, and a backlog left from one queue is served for another."""

    def __init__(self):
        self.backlog = deque()

    def __call__(self, queue, now, max_batch_size):
        expired = []
        while queue:
            r = queue.popleft()
            (self.backlog if r.deadline > now else expired).append(r)
        batch = [self.backlog.popleft() for _ in range(min(max_batch_size, len(self.backlog)))]
        return batch, expired


# order


def take_earliest_deadline_first(queue, now, max_batch_size):
    """Sorts the queue by deadline before taking ("most urgent first"): not FIFO."""
    ordered = sorted(queue, key=lambda r: r.deadline)
    queue.clear()
    queue.extend(ordered)
    return take_batch(queue, now, max_batch_size)


def take_batch_sorted_by_id(queue, now, max_batch_size):
    """Returns the batch sorted by id, as if ids were arrival order."""
    batch, expired = take_batch(queue, now, max_batch_size)
    return sorted(batch, key=lambda r: r.id), expired


def admit_in_deadline_order(queue, request, max_queue):
    """Inserts the request before those with later deadlines ("most urgent first"): not at the back."""
    if len(queue) >= max_queue:
        raise QueueFullError("full")
    i = next((k for k, r in enumerate(queue) if r.deadline > request.deadline), len(queue))
    queue.insert(i, request)


NEW_WRONG_TAKE = [
    take_truncates_now,
    take_whole_ms,
    take_float32_deadlines,
    take_zero_is_unbounded,
    TakeClockNeverGoesBack,
    TakeKeepsBacklog,
    take_earliest_deadline_first,
    take_batch_sorted_by_id,
]
NEW_WRONG_ADMIT = [admit_int32_ids, admit_refuses_at_the_last_slot, AdmitRemembersBound, admit_in_deadline_order]


def _fresh(wrong):
    return wrong() if isinstance(wrong, type) else wrong


@pytest.mark.parametrize("wrong", NEW_WRONG_TAKE)
def test_the_take_batch_differential_check_catches_new_wrong_answers(wrong):
    with pytest.raises(LabCheckFailed, match="the reference gave"):
        L.check_take_batch_same_as_reference(_fresh(wrong))


@pytest.mark.parametrize("wrong", NEW_WRONG_ADMIT)
def test_the_admit_differential_check_catches_new_wrong_answers(wrong):
    with pytest.raises(LabCheckFailed, match="the reference (accepted|refused)"):
        L.check_admit_same_as_reference(_fresh(wrong))


OLD_WRONG_TAKE = [
    take_no_deadline,
    take_expired_counted_in_batch,
    take_lifo,
    take_strict,
    take_wall_clock,
    take_fixed_size,
    take_off_by_one,
    take_sweeps_all_expired,
    take_rebinds,
    take_returns_ids,
    take_drops_expired_silently,
    take_stops_at_expired,
    take_one_then_check,
]
OLD_WRONG_ADMIT = [
    admit_unbounded,
    admit_returns_false,
    admit_off_by_one,
    admit_drops_oldest,
    Latch,
    admit_exactly_full,
    admit_fixed_bound,
    admit_to_front,
    Counter,
    admit_wrong_error,
    admit_append_then_check,
    admit_copies,
    admit_zero_is_unbounded,
]


@pytest.mark.parametrize("wrong", OLD_WRONG_TAKE)
def test_the_take_batch_differential_check_catches_every_old_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match="the reference gave"):
        L.check_take_batch_same_as_reference(_fresh(wrong))


@pytest.mark.parametrize("wrong", OLD_WRONG_ADMIT)
def test_the_admit_differential_check_catches_every_old_wrong_answer(wrong):
    """All but the two that only wait (admit_waits_for_room, admit_slow_refusal): a replay judges outcomes, not time;
    check_typed_error_and_recovery times them."""
    with pytest.raises(LabCheckFailed, match="the reference (accepted|refused)"):
        L.check_admit_same_as_reference(_fresh(wrong))


def test_the_differential_check_names_the_call_and_both_outcomes():
    with pytest.raises(LabCheckFailed) as e:
        L.check_take_batch_same_as_reference(take_strict)
    message = str(e.value)
    assert "take_batch(now=3.0, max_batch_size=1)" in message
    assert "yours gave batch [0] and expired []" in message
    assert "the reference gave batch [1] and expired [0]" in message


def test_the_new_wrong_answers_are_right_otherwise():
    """Each new wrong answer passes the hand-picked case it was written against: one mistake, not a broken answer."""
    queue = deque([L.Request(0, 5.0), L.Request(1, 1.0), L.Request(2, 9.0)])
    for wrong in NEW_WRONG_TAKE:
        q = deque(queue)
        batch, expired = _fresh(wrong)(q, 3.0, 8)
        assert [r.id for r in batch] == [0, 2] and [r.id for r in expired] == [1], wrong
    for wrong in NEW_WRONG_ADMIT:
        q, fn = deque(), _fresh(wrong)
        fn(q, L.Request(0, 5.0), 4)
        fn(q, L.Request(1, 5.0), 4)
        assert [r.id for r in q] == [0, 1], wrong
