"""The admission-control lab's checks pass the right answer and reject plausible wrong ones."""

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


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answer_passes():
    L.check_bound(admit)
    L.check_typed_error_and_recovery(admit)
    L.check_deadlines(take_batch)
    res = L.check_overload(admit, take_batch)
    assert res["max_queue_len"] <= 20


def test_unbounded_queue_fails_the_overload_check():
    res = L.simulate(admit_unbounded, take_batch)
    assert res["max_queue_len"] > 200  # the defect the check exists for
    with pytest.raises(LabCheckFailed, match="queue reached"):
        L.check_overload(admit_unbounded, take_batch)


@pytest.mark.parametrize("chk, wrong", [
    (L.check_bound, admit_unbounded), (L.check_bound, admit_off_by_one), (L.check_bound, admit_drops_oldest),
    (L.check_typed_error_and_recovery, admit_returns_false), (L.check_typed_error_and_recovery, Latch()),
    (L.check_deadlines, take_no_deadline), (L.check_deadlines, take_expired_counted_in_batch),
    (L.check_deadlines, take_lifo),
])
def test_wrong_answers_fail(chk, wrong):
    with pytest.raises(LabCheckFailed):
        chk(wrong)


def test_overload_check_catches_serving_expired_requests():
    with pytest.raises(LabCheckFailed):
        L.check_overload(admit, take_no_deadline)


@pytest.mark.parametrize("chk", [L.check_bound, L.check_typed_error_and_recovery, L.check_deadlines])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed):
        chk(stub)


def test_stub_fails_overload():
    with pytest.raises(LabCheckFailed):
        L.check_overload(stub, stub)
