"""The reliable-queue exercise's checks pass the right answer and reject plausible wrong ones (real Redis).

claim(r, queue, processing) -> job | None
| question | what the checks try |
|---|---|
| which input varies each field | the queue and processing keys each alone (second queue, second processing list) |
| boundaries | an empty queue (None within 3 s, not a blocking wait forever); an empty job b''; draining to the last job |
| a type the notes never show | a job that is not UTF-8; a job returned as str or bytes |
| order or ties | FIFO against LPUSH order; newest claimed on processing's left |
| errors: type and message | a worker that dies after any number of its Redis calls loses no job |
| policy: which item | which job: the oldest, at the queue's right end |

ack(r, processing, job) -> None
| question | what the checks try |
|---|---|
| which input varies each field | the job (bytes, str), the processing key (a second list) |
| boundaries | a job held twice (one copy removed); a job not held (nothing changes) |
| a type the notes never show | the job as str where Redis holds bytes |
| order or ties | the order of the rest kept |
| errors: type and message | - |
| policy: which item | which copy: exactly one of the given job, never the oldest or the whole list |

reclaim(r, processing, queue) -> int
| question | what the checks try |
|---|---|
| which input varies each field | processing and queue keys each alone |
| boundaries | nothing held (0, an int); an empty job in the middle of what was held; a reclaimer that dies part-way |
| a type the notes never show | an empty job (b'') that a truth-value loop stops at |
| order or ties | reclaimed jobs claimed next, in their old order, before the still-queued ones |
| errors: type and message | - |
| policy: which item | where the jobs go: the queue's consuming end |


Each wrong answer is one class of mistake (a pop that loses the job, LIFO, a blocking move that never
returns, a constant key, a non-atomic pop-then-push, a peek that moves nothing; an ack that removes all
copies, the oldest job or the whole list; a reclaim that requeues at the back, in reverse, copies instead of
moving, returns no count or reads-deletes-pushes); each is rejected with the message that names it.
"""

import shutil

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_reliable_queue as L

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs Debian's redis-server")


def claim(r, queue, processing):
    return r.lmove(queue, processing, "RIGHT", "LEFT")


def claim_blocking(r, queue, processing):
    return r.blmove(queue, processing, 0.2, "RIGHT", "LEFT")


def ack(r, processing, job):
    r.lrem(processing, 1, job)


def reclaim(r, processing, queue):
    n = 0
    while r.lmove(processing, queue, "LEFT", "RIGHT") is not None:
        n += 1
    return n


# claim ------------------------------------------------------------------------------------------------------
def claim_pop(r, queue, processing):
    """RPOP: no processing list, so a crash loses the job."""
    return r.rpop(queue)


def claim_lifo(r, queue, processing):
    return r.lmove(queue, processing, "LEFT", "LEFT")


def claim_forever(r, queue, processing):
    return r.blmove(queue, processing, 0, "RIGHT", "LEFT")


def claim_fixed_queue(r, queue, processing):
    return r.lmove("ailab:jobs", processing, "RIGHT", "LEFT")


def claim_pop_then_push(r, queue, processing):
    """Two commands: a worker that dies between them has lost the job."""
    job = r.rpop(queue)
    if job is not None:
        r.lpush(processing, job)
    return job


def claim_peek(r, queue, processing):
    """Reads the oldest job and copies it, but leaves it in the queue."""
    job = r.lindex(queue, -1)
    if job is not None:
        r.lpush(processing, job)
    return job


def claim_to_right(r, queue, processing):
    return r.lmove(queue, processing, "RIGHT", "RIGHT")


# ack ----------------------------------------------------------------------------------------------------------
def ack_all_copies(r, processing, job):
    r.lrem(processing, 0, job)


def ack_oldest(r, processing, job):
    r.rpop(processing)


def ack_deletes_list(r, processing, job):
    r.delete(processing)


def ack_on_queue(r, processing, job):
    r.lrem("ailab:jobs:processing", 1, job)


def ack_noop(r, processing, job):
    pass


# reclaim ------------------------------------------------------------------------------------------------------
def reclaim_to_back(r, processing, queue):
    """Requeues at the producers' end: jobs that waited longest now wait behind everything else."""
    n = 0
    while r.lmove(processing, queue, "RIGHT", "LEFT") is not None:
        n += 1
    return n


def reclaim_reversed(r, processing, queue):
    n = 0
    while r.lmove(processing, queue, "RIGHT", "RIGHT") is not None:
        n += 1
    return n


def reclaim_copies(r, processing, queue):
    jobs = r.lrange(processing, 0, -1)
    for j in jobs:
        r.rpush(queue, j)
    return len(jobs)


def reclaim_no_count(r, processing, queue):
    reclaim(r, processing, queue)


def reclaim_read_delete_push(r, processing, queue):
    """LRANGE, DEL, then RPUSH one by one: a reclaimer that dies after DEL loses the jobs."""
    jobs = r.lrange(processing, 0, -1)
    r.delete(processing)
    for j in jobs:
        r.rpush(queue, j)
    return len(jobs)


def reclaim_one(r, processing, queue):
    return 1 if r.lmove(processing, queue, "LEFT", "RIGHT") is not None else 0


def stub(*a, **k):
    raise NotImplementedError("not implemented yet")


def test_right_answer_passes():
    L.check_claim(claim)
    L.check_ack(ack)
    L.check_reclaim(claim, reclaim)
    L.check_crash_safety(claim, ack, reclaim)


def test_blocking_claim_with_a_timeout_passes():
    L.check_claim(claim_blocking)
    L.check_crash_safety(claim_blocking, ack, reclaim)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_claim, claim_pop, "must wait in the processing list until it is acked"),
        (L.check_claim, claim_lifo, "the oldest, job-1, is at the right end.*returned 'job-3'"),
        (L.check_claim, claim_forever, "did not return within 3 s.*0 means wait forever"),
        (L.check_claim, claim_fixed_queue, "returned None"),
        (L.check_claim, claim_peek, r"the queue should hold \['job-3', 'job-2'\]"),
        (L.check_claim, claim_to_right, r"enter processing at its left end"),
    ],
)
def test_wrong_claims_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_non_atomic_claim_fails_crash_safety():
    L.check_claim(claim_pop_then_push)  # it looks right while nothing dies
    with pytest.raises(LabCheckFailed, match=r"died during claim\(\) after 1 Redis call.*one atomic command"):
        L.check_crash_safety(claim_pop_then_push, ack, reclaim)
    with pytest.raises(
        LabCheckFailed,
        match=r"died during claim\(\) after 0 Redis call.*hold \['c', 'b'\]|"
        r"died during claim\(\).*not a, b, c",
    ):
        L.check_crash_safety(claim_pop, ack, reclaim)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (ack_all_copies, "one ack removes exactly one copy"),
        (ack_oldest, r"ack\(job 'b'\) should leave \['c', 'a'\].*remove the job you are given"),
        (ack_deletes_list, r"ack\(job 'b'\) should leave \['c', 'a'\]"),
        (ack_on_queue, r"ack\(job 'b'\) should leave \['c', 'a'\]"),
        (ack_noop, r"ack\(job 'b'\) should leave \['c', 'a'\]"),
    ],
)
def test_wrong_acks_fail(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        L.check_ack(wrong)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            reclaim_to_back,
            r"claimed next, in their old order \['j-0', 'j-1', 'j-2'\]; the next claims returned \['j-3'",
        ),
        (
            reclaim_reversed,
            r"in their old order \['j-0', 'j-1', 'j-2'\]; the next claims returned \['j-2', 'j-1', 'j-0'\]",
        ),
        (reclaim_copies, "processing list should be empty"),
        (reclaim_no_count, r"should return 0 \(an int\); got None"),
        (reclaim_one, "the dead worker held 3 jobs; reclaim.. returned 1"),
    ],
)
def test_wrong_reclaims_fail(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        L.check_reclaim(claim, wrong)


def test_read_delete_push_reclaim_fails_crash_safety():
    L.check_reclaim(claim, reclaim_read_delete_push)  # it looks right while nothing dies
    with pytest.raises(LabCheckFailed, match=r"the reclaimer died after 2 Redis call.*never read-delete-push"):
        L.check_crash_safety(claim, ack, reclaim_read_delete_push)


def test_wrong_ack_fails_end_to_end():
    with pytest.raises(LabCheckFailed, match="processing list should hold 3"):
        L.check_crash_safety(claim, ack_noop, reclaim)


def test_stubs_fail():
    for chk, args in [
        (L.check_claim, (stub,)),
        (L.check_ack, (stub,)),
        (L.check_reclaim, (claim, stub)),
        (L.check_reclaim, (stub, reclaim)),
        (L.check_crash_safety, (stub, ack, reclaim)),
        (L.check_crash_safety, (claim, ack, stub)),
    ]:
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            chk(*args)


def claim_script(r, queue, processing):
    """Also right: a Lua script (atomic on the server)."""
    return r.eval("return redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')", 2, queue, processing)


def reclaim_rpoplpush(r, processing, queue):
    """Also right: one LMOVE per pipeline round trip."""
    n = 0
    while True:
        with r.pipeline() as p:
            p.lmove(processing, queue, "LEFT", "RIGHT")
            (moved,) = p.execute()
        if moved is None:
            return n
        n += 1


def test_other_right_answers_pass():
    L.check_claim(claim_script)
    L.check_reclaim(claim_script, reclaim_rpoplpush)
    L.check_crash_safety(claim_script, ack, reclaim_rpoplpush)


def claim_or_none(r, queue, processing):
    """`return job or None`: an empty job is moved to processing and reported as 'queue empty'."""
    return r.lmove(queue, processing, "RIGHT", "LEFT") or None


def claim_decodes(r, queue, processing):
    """Decodes every job as UTF-8 text: a binary job raises."""
    job = r.lmove(queue, processing, "RIGHT", "LEFT")
    return None if job is None else job.decode()


def reclaim_while_truthy(r, processing, queue):
    """Loops `while r.lmove(...)`: an empty job ends the loop early and stays in processing."""
    n = 0
    while r.lmove(processing, queue, "LEFT", "RIGHT"):
        n += 1
    return n


def test_empty_and_binary_jobs():
    with pytest.raises(LabCheckFailed, match=r"the oldest job is the empty string b''; claim\(\) returned None"):
        L.check_claim(claim_or_none)
    with pytest.raises(LabCheckFailed, match=r"your code raised UnicodeDecodeError"):
        L.check_claim(claim_decodes)
    with pytest.raises(LabCheckFailed, match=r"an empty job.*reclaim\(\) should move all 3.*`is None`"):
        L.check_reclaim(claim, reclaim_while_truthy)


# --------------------------------------------------------------------------- the differential and idle checks


def claim_timeout_in_ms(r, queue, processing):
    """Units: BLMOVE's timeout is in seconds; 1000 'ms' waits 1000 s on an empty queue."""
    return r.blmove(queue, processing, 1000, "RIGHT", "LEFT")


def claim_timeout_truncated(r, queue, processing):
    """Units: a half-second timeout made whole with int(): int(0.5) == 0, which waits forever."""
    return r.blmove(queue, processing, int(0.5), "RIGHT", "LEFT")


def ack_skips_empty_job(r, processing, job):
    """Boundaries: `if job:` - an empty job (b'') is never acked and stays in processing."""
    if job:
        r.lrem(processing, 1, job)


def reclaim_all_but_one(r, processing, queue):
    """Boundaries: counts LLEN first and moves one job too few (range(n - 1))."""
    n = r.llen(processing)
    for _ in range(n - 1):
        r.lmove(processing, queue, "LEFT", "RIGHT")
    return max(n - 1, 0)


_acked: set = set()


def ack_remembers_acked(r, processing, job):
    """State: skips an ack it has done before (to be 'idempotent'), so a job claimed again is never acked again."""
    key = (processing, _as_bytes(job))
    if key not in _acked:
        _acked.add(key)
        r.lrem(processing, 1, job)


_reclaimed: set = set()


def reclaim_once_per_list(r, processing, queue):
    """State: remembers which processing lists it has reclaimed; the same list, reclaimed again later, is skipped."""
    if processing in _reclaimed:
        return 0
    _reclaimed.add(processing)
    return reclaim(r, processing, queue)


def _as_bytes(x):
    return x.encode() if isinstance(x, str) else x


def claim_strips_newline(r, queue, processing):
    """Parsing: strips the trailing newline of every job (as if it were a line read from a file)."""
    job = r.lmove(queue, processing, "RIGHT", "LEFT")
    return None if job is None else job.rstrip(b"\n")


def claim_strips_spaces(r, queue, processing):
    """Parsing: strips spaces around the job: ' y ' comes back as 'y', and acking that removes nothing."""
    job = r.lmove(queue, processing, "RIGHT", "LEFT")
    return None if job is None else job.strip()


def claim_polls_every_ms(r, queue, processing):
    """Resources: on an empty queue, polls every millisecond for up to a second."""
    import time

    deadline = time.monotonic() + 1.0
    while True:
        job = r.lmove(queue, processing, "RIGHT", "LEFT")
        if job is not None or time.monotonic() > deadline:
            return job
        time.sleep(0.001)


def claim_busy_loop(r, queue, processing):
    """Resources: spins on LMOVE without sleeping for half a second before it gives up."""
    import time

    deadline = time.monotonic() + 0.5
    while (job := r.lmove(queue, processing, "RIGHT", "LEFT")) is None and time.monotonic() < deadline:
        pass
    return job


@pytest.mark.parametrize(
    "fns",
    [(claim, ack, reclaim), (claim_blocking, ack, reclaim), (claim_script, ack, reclaim_rpoplpush)],
    ids=["lmove", "blmove", "script"],
)
def test_right_answers_pass_the_new_checks(fns):
    L.check_same_as_reference(*fns)
    L.check_idle_claim_is_cheap(fns[0])


@pytest.mark.parametrize(
    "fns",
    [
        (claim_pop, ack, reclaim),
        (claim_lifo, ack, reclaim),
        (claim_fixed_queue, ack, reclaim),
        (claim_peek, ack, reclaim),
        (claim_to_right, ack, reclaim),
        (claim_or_none, ack, reclaim),
        (claim_decodes, ack, reclaim),
        (claim, ack_all_copies, reclaim),
        (claim, ack_oldest, reclaim),
        (claim, ack_deletes_list, reclaim),
        (claim, ack_on_queue, reclaim),
        (claim, ack_noop, reclaim),
        (claim, ack, reclaim_to_back),
        (claim, ack, reclaim_reversed),
        (claim, ack, reclaim_copies),
        (claim, ack, reclaim_no_count),
        (claim, ack, reclaim_one),
        (claim, ack, reclaim_while_truthy),
        # new
        (claim, ack_skips_empty_job, reclaim),
        (claim, ack, reclaim_all_but_one),
        (claim, ack_remembers_acked, reclaim),
        (claim, ack, reclaim_once_per_list),
        (claim_strips_newline, ack, reclaim),
        (claim_strips_spaces, ack, reclaim),
    ],
    ids=lambda fns: "-".join(f.__name__ for f in fns),
)
def test_the_differential_check_catches_wrong_answers(fns):
    with pytest.raises(LabCheckFailed, match="where the two differ|returned|holds|keeps something"):
        L.check_same_as_reference(*fns)


def test_what_the_differential_check_leaves_to_the_others():
    """An empty-queue claim is skipped there (a right blocking claim may wait a second), and nothing dies there."""
    L.check_same_as_reference(claim_forever, ack, reclaim)
    L.check_same_as_reference(claim_pop_then_push, ack, reclaim)
    L.check_same_as_reference(claim, ack, reclaim_read_delete_push)
    with pytest.raises(LabCheckFailed, match="did not return within 3 s"):
        L.check_idle_claim_is_cheap(claim_forever)


@pytest.mark.parametrize("wrong", [claim_timeout_in_ms, claim_timeout_truncated])
def test_a_timeout_in_the_wrong_unit_fails(wrong):
    with pytest.raises(LabCheckFailed, match="did not return within 3 s"):
        L.check_claim(wrong)
    with pytest.raises(LabCheckFailed, match="did not return within 3 s"):
        L.check_idle_claim_is_cheap(wrong)


@pytest.mark.parametrize("wrong", [claim_polls_every_ms, claim_busy_loop])
def test_a_claim_that_polls_fast_fails_the_idle_check(wrong):
    L.check_claim(wrong)  # right answers, promptly: only the cost of the wait is wrong
    with pytest.raises(LabCheckFailed, match=r"made \d+ Redis calls.*polls every few ms"):
        L.check_idle_claim_is_cheap(wrong)


def test_stubs_fail_the_new_checks():
    for chk, args in [
        (L.check_same_as_reference, (stub, ack, reclaim)),
        (L.check_same_as_reference, (claim, stub, reclaim)),
        (L.check_same_as_reference, (claim, ack, stub)),
        (L.check_idle_claim_is_cheap, (stub,)),
    ]:
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            chk(*args)
