"""Lab checks: admission control - a bounded queue and per-request deadlines (topic S6).

The learner writes two functions over a collections.deque of Request(id, deadline):
  admit(queue, request, max_queue) -> None
      append the request, or raise QueueFullError (from ailab.batching) at once when the queue
      already holds max_queue requests. Never block, never grow past the bound.
  take_batch(queue, now, max_batch_size) -> (batch, expired)
      pop requests from the front in FIFO order; those whose deadline <= now go to `expired`
      (answered 504, never computed); at most max_batch_size live ones go to `batch`.
The last check replays an overload (requests arrive twice as fast as they are served) and fails
a version that lets the queue, and with it every request's wait, grow without bound.

The checks are derived from what each function must guarantee:
  admit: accepts while len(queue) < max_queue and refuses at len == max_queue, for several bounds (1 and 0 included)
      and for a queue that already held requests (count the queue, not your own admissions); a refusal is a
      QueueFullError (not another type, not a return value), comes at once (a version that waits for room
      fails instead of hanging) and leaves the queue exactly as it was; an accepted request is the same
      object, at the back; after room comes back it admits again, up to the bound again.
  take_batch: returns a tuple of two lists of Request objects; FIFO; deadline <= now is expired (the
      boundary both ways); only live requests count towards max_batch_size, which is used (1, 2, 0, more
      than queued); `now` is the clock (deadlines near 1e12 or below 0 both work); everything expired gives
      an empty batch; it stops when the batch is full, so what follows (expired or not) stays queued, in
      order, in the deque it was given (mutated in place, not rebound).
  Against a reference (check_admit_same_as_reference, check_take_batch_same_as_reference): the learner's function
      and a reference written from this contract replay the same generated runs (bounds moving between calls,
      a worker serving and emptying the queue; a clock from -5, 0, 1.7e9 or 1e12, deadlines at a later `now`, one
      float step either side of it, +-inf; ids past 2**31 and 2**63, not in arrival order), and must agree on every
      call's outcome and on the queue left behind.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from ailab.batching import QueueFullError
from ailab.labs.core import LabCheckFailed, check, expect, within_time
from ailab.labs.differential import same_as_reference, short

LAB = "lab_admission_control"


class Request(NamedTuple):
    id: int
    deadline: float  # seconds on the same clock as `now`


def _admit_all(admit, queue, requests, max_queue):
    accepted, rejected = [], []
    for r in requests:
        before = list(queue)
        try:
            out = admit(queue, r, max_queue)
        except QueueFullError:
            rejected.append(r)
            expect(
                list(queue) == before,
                f"max_queue={max_queue}: admit() refused request {r.id} but changed the "
                f"queue from {_ids(before)} to {_ids(queue)}: a "
                "refusal must leave the queue exactly as it was",
            )
            continue
        expect(
            out is None or out is True,
            "admit() should return nothing when it accepts and raise QueueFullError "
            f"when it refuses; it returned {out!r}",
        )
        expect(
            list(queue) == before + [r],
            f"max_queue={max_queue}: after accepting request {r.id} into "
            f"{_ids(before)} the queue should be {_ids(before + [r])} (the "
            f"same Request object, at the back); it is {_ids(queue)}",
        )
        expect(queue[-1] is r, "admit() should append the Request object it was given, not a copy or its id")
        accepted.append(r)
    return accepted, rejected


def _ids(requests):
    return [getattr(r, "id", r) for r in requests]


@check(LAB, "the queue never grows past max_queue")
def check_bound(admit):
    queue = deque()
    accepted, rejected = _admit_all(admit, queue, [Request(i, 100.0) for i in range(10)], max_queue=4)
    expect(len(queue) <= 4, f"max_queue=4 but the queue now holds {len(queue)} requests: refuse the 5th")
    expect(
        [r.id for r in accepted] == [0, 1, 2, 3] and len(rejected) == 6,
        f"with max_queue=4 the first 4 should be accepted and the other 6 refused; accepted {[r.id for r in accepted]}",
    )
    expect([r.id for r in queue] == [0, 1, 2, 3], "accepted requests go to the back of the queue, in order")
    for max_queue in (1, 7):
        queue = deque()
        accepted, rejected = _admit_all(admit, queue, [Request(i, 100.0) for i in range(10)], max_queue)
        expect(
            [r.id for r in accepted] == list(range(max_queue)),
            f"with max_queue={max_queue} and an empty queue, the first {max_queue} requests should be accepted and "
            f"the rest refused; accepted {[r.id for r in accepted]} - refuse when the queue you are given holds "
            "max_queue requests: use the max_queue argument and the queue's own length",
        )
    queue = deque(Request(100 + i, 100.0) for i in range(5))  # requests admitted earlier, elsewhere
    accepted, _ = _admit_all(admit, queue, [Request(i, 100.0) for i in range(4)], max_queue=7)
    expect(
        [r.id for r in accepted] == [0, 1],
        f"a queue that already holds 5 requests has room for 2 more under "
        f"max_queue=7; accepted {[r.id for r in accepted]}: count what is in "
        "the queue (len), not what your function admitted",
    )
    queue = deque()
    accepted, _ = _admit_all(admit, queue, [Request(0, 100.0), Request(1, 100.0)], max_queue=0)
    expect(
        accepted == [] and len(queue) == 0,
        f"max_queue=0 is a queue with no room (a server draining before it "
        f"stops): refuse every request; accepted {_ids(accepted)}. 0 is a "
        "bound like any other, not 'no bound'",
    )
    queue = deque(Request(100 + i, 100.0) for i in range(5))  # the bound was lowered while 5 waited
    accepted, _ = _admit_all(admit, queue, [Request(0, 100.0)], max_queue=3)
    expect(
        accepted == [] and len(queue) == 5,
        f"a queue that already holds 5 requests is over max_queue=3: admit() "
        f"must refuse (full means at least max_queue, not exactly); the queue "
        f"now holds {len(queue)}",
    )


def _admit_bounded_time(admit, queue, request, max_queue, limit_s=2.0):
    """Call admit in a thread: a version that waits for room fails with a message instead of hanging."""
    return within_time(
        lambda: admit(queue, request, max_queue),
        limit_s,
        f"admit() into a full queue (max_queue={max_queue}) did not return within {limit_s:.0f} s: it "
        "waits for room. Refuse at once: nothing frees room while the caller is blocked",
        unstick=queue.clear,  # give a waiting admit() its room, so its thread can end
        name="ailab-lab-admit",
    )


@check(LAB, "refuses with QueueFullError, and admits again once there is room")
def check_typed_error_and_recovery(admit):
    queue = deque()
    _admit_all(admit, queue, [Request(i, 100.0) for i in range(3)], max_queue=3)
    expect(
        len(queue) == 3,
        f"3 requests into an empty queue with max_queue=3 should all be accepted; the queue holds {len(queue)}",
    )
    t0 = time.monotonic()
    try:
        out = _admit_bounded_time(admit, queue, Request(99, 100.0), 3)
    except QueueFullError:
        took = time.monotonic() - t0
        expect(_ids(queue) == [0, 1, 2], f"the refused request must not change the queue; it is {_ids(queue)}")
    except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this check names
        expect(
            False,
            f"admit() into a full queue raised {type(e).__name__}: {e}; raise "
            "ailab.batching.QueueFullError (the server turns exactly that into 503 + Retry-After)",
        )
    else:
        expect(
            False,
            f"admit() into a full queue must raise QueueFullError (the server turns it into 503 + "
            f"Retry-After); it returned {out!r} instead",
        )
    expect(took < 1.0, f"admit() took {took * 1e3:.0f} ms to refuse a request into a full queue: refuse at once")

    def try_admit(rid, when, should_accept):
        try:
            admit(queue, Request(rid, 100.0), 3)
            accepted = True
        except QueueFullError:
            accepted = False
        expect(
            accepted == should_accept,
            f"{when}, admit() {'refused' if should_accept else 'accepted'} request {rid}: it should "
            f"{'accept it - once there is room, admit as before' if should_accept else 'refuse it'}; the queue "
            f"holds {_ids(queue)}",
        )

    queue.popleft()
    try_admit(100, "after one request left the full queue (2 of max_queue=3)", True)
    expect(queue[-1].id == 100, f"the admitted request 100 should be at the back of the queue; it is {_ids(queue)}")
    try_admit(101, "the queue was full again (3 of max_queue=3)", False)
    queue.clear()
    for rid in (102, 103, 104):
        try_admit(rid, "after the queue emptied", True)
    try_admit(105, "the queue was full again after emptying (3 of max_queue=3)", False)
    expect(_ids(queue) == [102, 103, 104], f"the queue should hold [102, 103, 104]; it holds {_ids(queue)}")


def _take(take_batch, queue, now, max_batch_size, what):
    out = take_batch(queue, now, max_batch_size)
    expect(isinstance(out, tuple) and len(out) == 2, f"{what}: take_batch should return (batch, expired); got {out!r}")
    batch, expired = out
    expect(
        isinstance(batch, list) and isinstance(expired, list),
        f"{what}: batch and expired should be lists; got {type(batch).__name__} and {type(expired).__name__}",
    )
    expect(
        all(isinstance(r, Request) for r in batch + expired),
        f"{what}: batch and expired should hold the Request objects themselves; got {batch!r}, {expired!r}",
    )
    return batch, expired


@check(LAB, "drops expired requests before compute, FIFO, at most max_batch_size")
def check_deadlines(take_batch):
    queue = deque(
        [
            Request(0, 5.0),
            Request(1, 1.0),
            Request(2, 9.0),
            Request(3, 2.0),
            Request(4, 9.0),
            Request(5, 9.0),
            Request(6, 9.0),
        ]
    )
    batch, expired = _take(take_batch, queue, 3.0, 3, "7 requests at now=3, max_batch_size=3")
    expect(
        all(r.deadline > 3.0 for r in batch),
        "a request whose deadline has passed reached the batch: it would be computed for a client that already gave up",
    )
    expect(
        [r.id for r in batch] == [0, 2, 4],
        f"at now=3 with max_batch_size=3 the batch should be requests "
        f"[0, 2, 4] (FIFO, live only); got {[r.id for r in batch]}",
    )
    expect(
        sorted(r.id for r in expired) == [1, 3],
        f"requests 1 and 3 expired (deadlines 1 and 2 < now=3) and must "
        f"be returned as expired; got {[r.id for r in expired]}",
    )
    expect([r.id for r in queue] == [5, 6], f"requests 5 and 6 should stay queued; left {[r.id for r in queue]}")
    expect(take_batch(deque(), 0.0, 4) == ([], []), "an empty queue gives ([], [])")
    queue = deque([Request(0, 3.0), Request(1, 3.0 + 1e-9), Request(2, 2.999)])
    batch, expired = _take(take_batch, queue, 3.0, 8, "deadlines 3.0, 3.0+1e-9 and 2.999 at now=3.0")
    expect(
        _ids(expired) == [0, 2],
        f"at now=3.0, deadlines 3.0 and 2.999 have passed (deadline <= now is expired: "
        f"the client gives up AT its deadline); expired should be [0, 2], got "
        f"{_ids(expired)}",
    )
    expect(
        _ids(batch) == [1],
        f"at now=3.0 the request with deadline 3.0+1e-9 is still live: batch should be [1], got {_ids(batch)}",
    )


@check(LAB, "take_batch uses its arguments, and only pops what it returns")
def check_take_batch_arguments(take_batch):
    for now, what in [(1e12, "deadlines around 1e12 (epoch-like clock)"), (-5.0, "a clock that reads -5")]:
        queue = deque([Request(0, now - 1), Request(1, now + 1), Request(2, now - 0.5), Request(3, now + 2)])
        batch, expired = _take(take_batch, queue, now, 4, what)
        expect(
            _ids(batch) == [1, 3] and _ids(expired) == [0, 2],
            f"{what}, now={now}: batch should be [1, 3] and expired [0, 2]; got {_ids(batch)} and "
            f"{_ids(expired)} - compare each deadline with the `now` you are given, not another clock",
        )
    live = [Request(i, 50.0) for i in range(6)]
    for size in (1, 2, 6, 10):
        queue = deque(live)
        batch, expired = _take(take_batch, queue, 10.0, size, f"6 live requests, max_batch_size={size}")
        n = min(size, 6)
        expect(
            _ids(batch) == list(range(n)),
            f"6 live requests with max_batch_size={size}: the batch should be "
            f"{list(range(n))}; got {_ids(batch)} - use the max_batch_size you "
            "are given",
        )
        expect(expired == [], f"6 live requests with max_batch_size={size}: nothing expired, got {_ids(expired)}")
        expect(
            _ids(queue) == list(range(n, 6)),
            f"6 live requests with max_batch_size={size}: requests "
            f"{list(range(n, 6))} should stay in the queue you were given (pop "
            f"from it, in place); it holds {_ids(queue)}",
        )
    queue = deque([Request(0, 1.0), Request(1, 2.0), Request(2, 0.5)])
    batch, expired = _take(take_batch, queue, 5.0, 2, "every request expired")
    expect(
        batch == [] and _ids(expired) == [0, 1, 2] and not queue,
        f"every request expired (now=5): batch should be [], expired [0, 1, 2] and the queue empty; got "
        f"{_ids(batch)}, {_ids(expired)}, queue {_ids(queue)}",
    )
    queue = deque([Request(0, 9.0), Request(1, 1.0), Request(2, 9.0), Request(3, 1.0), Request(4, 9.0)])
    batch, expired = _take(take_batch, queue, 5.0, 2, "live, expired, live, expired, live at now=5, max_batch_size=2")
    expect(
        _ids(batch) == [0, 2] and _ids(expired) == [1],
        f"with max_batch_size=2 the batch [0, 2] is full after request 2: batch should be [0, 2], expired [1]; "
        f"got {_ids(batch)} and {_ids(expired)} - stop popping as soon as the batch is full",
    )
    expect(
        _ids(queue) == [3, 4],
        f"stop as soon as the batch is full: requests 3 and 4 should stay queued, in order "
        f"(3 expires on a later call); the queue holds {_ids(queue)}",
    )
    queue = deque(live[:3])
    batch, expired = _take(take_batch, queue, 10.0, 0, "max_batch_size=0")
    expect(
        batch == [] and _ids(queue) == [0, 1, 2],
        f"max_batch_size=0 takes nothing: batch should be [] and the "
        f"queue unchanged; got {_ids(batch)}, queue {_ids(queue)}",
    )


def simulate(
    admit,
    take_batch,
    arrivals_per_tick: float = 2.0,
    served_per_tick: int = 1,
    ticks: int = 3000,
    max_queue: int = 20,
    timeouts: tuple = (5.0, 500.0),
    short_share: float = 0.2,
    seed: int = 0,
) -> dict:
    """Overload: Poisson arrivals at 2x the service rate; a `short_share` of clients give up after
    timeouts[0] ticks, the rest (batch jobs) after timeouts[1]. Returns queue length, waits, outcomes."""
    rng = np.random.default_rng(seed)
    queue, waits, max_len = deque(), [], 0
    outcome = {"served": 0, "rejected": 0, "expired": 0, "late_served": 0}
    arrived_at, next_id = {}, 0
    for t in range(ticks):
        for _ in range(rng.poisson(arrivals_per_tick)):
            try:
                timeout = timeouts[0] if rng.random() < short_share else timeouts[1]
                admit(queue, Request(next_id, t + timeout), max_queue)
                arrived_at[next_id] = t
            except QueueFullError:
                outcome["rejected"] += 1
            next_id += 1
        max_len = max(max_len, len(queue))
        out = take_batch(queue, float(t), served_per_tick)
        expect(
            isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, list) for x in out),
            f"take_batch should return a tuple of two lists, (batch, expired); got {short(out)}",
        )
        batch, expired = out
        outcome["expired"] += len(expired)
        for r in batch:
            outcome["served"] += 1
            waits.append(t - arrived_at[r.id])
            outcome["late_served"] += int(r.deadline <= t)
    return {"max_queue_len": max_len, "p99_wait_ticks": float(np.percentile(waits, 99)) if waits else 0.0, **outcome}


@check(LAB, "under 2x overload the queue and the wait stay bounded")
def check_overload(admit, take_batch):
    res = simulate(admit, take_batch)
    expect(
        res["max_queue_len"] <= 20,
        f"under overload the queue reached {res['max_queue_len']} requests (bound 20): "
        "without a bound it grows for as long as the overload lasts",
    )
    expect(
        res["p99_wait_ticks"] <= 21,
        f"p99 wait was {res['p99_wait_ticks']:.0f} ticks; with at most 20 queued and "
        "1 served per tick nobody should wait more than ~20",
    )
    expect(res["served"] >= 2800, f"only {res['served']} of 3000 service slots were used: keep the worker busy")
    expect(
        res["late_served"] == 0,
        f"{res['late_served']} requests were computed after their deadline had passed: "
        "drop expired requests in take_batch, before compute",
    )
    expect(
        res["rejected"] > 2000,
        f"2x overload should turn away about half the arrivals; only {res['rejected']} were refused",
    )
    return res


# --------------------------------------------------------------------------- against a reference, over generated runs


def _reference_admit(queue, request, max_queue):
    """The contract: full means len(queue) >= max_queue (0 included), refused with QueueFullError, never waiting."""
    if len(queue) >= max_queue:
        raise QueueFullError(f"queue full: {max_queue} requests already wait")
    queue.append(request)


def _reference_take_batch(queue, now, max_batch_size):
    """The contract: pop from the front until max_batch_size live ones; deadline <= now is expired, takes no slot."""
    batch, expired = [], []
    while queue and len(batch) < max_batch_size:
        r = queue.popleft()
        (batch if r.deadline > now else expired).append(r)
    return batch, expired


def _snapshot(queue, originals: dict) -> list:
    """The queue as the learner would read it: ids of the very Request objects it was given; anything else named."""
    out = []
    for r in queue:
        if isinstance(r, Request) and originals.get(id(r)) is r:
            out.append(r.id)
        else:
            out.append(f"<{short(r)}, not the Request object given>")
    return out


def _step_error(e: BaseException) -> str:
    return f"raised {type(e).__name__}: {e}"


def _drive_admit(admit, initial: list, steps: list) -> list:
    """Replay `steps` on a deque that starts with `initial` (requests admitted elsewhere): ("admit", id, max_queue,
    deadline) calls the learner's admit; ("serve", k) pops k from the front and ("clear",) empties it, as a worker
    would. Returns [(what was done, what came of it)], one per step: what the contract makes observable."""
    originals: dict = {}

    def request(rid, deadline=100.0):
        r = Request(rid, deadline)
        originals[id(r)] = r
        return r

    queue = deque(request(rid) for rid in initial)
    trace = []
    for step in steps:
        if step[0] == "serve":
            for _ in range(min(step[1], len(queue))):
                queue.popleft()
            continue
        if step[0] == "clear":
            queue.clear()
            continue
        _, rid, max_queue, deadline = step
        before = _snapshot(queue, originals)
        what = f"admit(Request({rid}, deadline={deadline}), max_queue={max_queue}) into a queue holding {before}"
        r = request(rid, deadline)
        try:
            out = admit(queue, r, max_queue)
        except (NotImplementedError, LabCheckFailed):
            raise
        except QueueFullError:
            outcome = "refused it with QueueFullError"
        except Exception as e:  # noqa: BLE001 - the learner's code may raise anything: it is the answer
            trace.append((what, f"{_step_error(e)} (the queue then held {_snapshot(queue, originals)})"))
            return trace
        else:
            outcome = "accepted it" if out is None or out is True else f"returned {short(out)}"
        trace.append((what, f"{outcome}, leaving the queue {_snapshot(queue, originals)}"))
    return trace


def _drive_take(take_batch, steps: list) -> list:
    """Replay `steps`, each (arrivals, now, max_batch_size): the arrivals [(id, deadline)] join the back of one deque,
    then the learner's take_batch is called on it. Returns [(what was done, what came of it)], one per call."""
    originals: dict = {}
    queue: deque = deque()
    trace = []
    for arrivals, now, size in steps:
        for rid, deadline in arrivals:
            r = Request(rid, deadline)
            originals[id(r)] = r
            queue.append(r)
        before = ", ".join(f"{r.id}@{r.deadline!r}" for r in queue)
        what = f"take_batch(now={now!r}, max_batch_size={size}) on a queue of id@deadline [{before}]"
        try:
            out = take_batch(queue, now, size)
        except (NotImplementedError, LabCheckFailed):
            raise
        except Exception as e:  # noqa: BLE001
            trace.append((what, _step_error(e)))
            return trace
        if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, list) for x in out)):
            trace.append((what, f"returned {short(out)}, not a tuple of two lists (batch, expired)"))
            return trace
        batch, expired = out
        trace.append(
            (
                what,
                f"gave batch {_snapshot(batch, originals)} and expired {_snapshot(expired, originals)}, "
                f"leaving the queue {_snapshot(queue, originals)}",
            )
        )
    return trace


def _same_trace(mine, ref) -> str | None:
    """The first step where the learner's run and the reference's part: what was done, and both outcomes."""
    if not isinstance(mine, list):
        return f"the run gave {short(mine)}"
    for i, (m, r) in enumerate(zip(mine, ref)):
        if m != r:
            return f"call {i + 1}, {r[0]}: yours {m[1]}; the reference {r[1]}"
    if len(mine) != len(ref):
        return f"the runs differ after call {min(len(mine), len(ref))}"
    return None


_BASES = (0, 7, 2**31 - 2, 2**53 + 1, 2**63 + 5)  # ids past what an int32 (or a float) holds exactly


def _admit_runs():
    """Hypothesis: a queue holding some requests, then admits (bounds 0..6, the bound moving between calls, lowered
    below what waits too) mixed with a worker serving from the front and emptying the queue."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        base = d(st.sampled_from(_BASES))
        ids = iter(range(base, base + 100))
        initial = [next(ids) for _ in range(d(st.integers(0, 6)))]
        bound = d(st.integers(0, 6))
        steps = []
        for _ in range(d(st.integers(1, 14))):
            kind = d(st.sampled_from(["admit", "admit", "admit", "admit", "serve", "clear", "bound"]))
            if kind == "admit":
                steps.append(("admit", next(ids), bound, d(st.sampled_from([100.0, 5.0, 50.0, 1.0]))))
            elif kind == "serve":
                steps.append(("serve", d(st.integers(1, 3))))
            elif kind == "clear":
                steps.append(("clear",))
            else:
                bound = d(st.integers(0, 6))
        return initial, steps

    return draw()


def _take_runs():
    """Hypothesis: a clock that moves forward from 0, -5, 1.7e9 or 1e12 in whole and fractional steps (or stands
    still); before each call 0..4 requests join the back, with deadlines AT a later call's `now` (the boundary), one
    float step either side of it, a fraction off, or +-inf; max_batch_size 0..4 or more than queued."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        base = d(st.sampled_from(_BASES))
        order = d(st.permutations(range(40)))  # ids not in arrival order: FIFO is by arrival, not by id
        ids = iter(base + k for k in order)
        now = d(st.sampled_from([0.0, 3.0, -5.0, 1.7e9, 1e12]))
        n = d(st.integers(1, 6))
        nows = []
        for _ in range(n):
            nows.append(now)
            now = now + d(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.0, 2.5, 0.001]))
        whole = d(st.booleans())  # a clock of whole ticks may be an int
        nows = [int(t) if whole and t == int(t) and abs(t) < 2**53 else t for t in nows]
        steps = []
        for i in range(n):
            arrivals = []
            for _ in range(d(st.integers(0, 4))):
                at = float(nows[d(st.integers(i, n - 1))])
                how = d(st.sampled_from(["at", "at", "after", "before", "plus", "minus", "inf", "-inf"]))
                deadline = {
                    "at": at,
                    "after": math.nextafter(at, math.inf),
                    "before": math.nextafter(at, -math.inf),
                    "plus": at + 0.3,
                    "minus": at - 0.3,
                    "inf": math.inf,
                    "-inf": -math.inf,
                }[how]
                arrivals.append((next(ids), deadline))
            size = d(st.one_of(st.integers(0, 4), st.just(50)))
            steps.append((arrivals, nows[i], size))
        return (steps,)

    return draw()


def _describe_admit_run(initial, steps) -> str:
    said = []
    for s in steps:
        if s[0] == "admit":
            said.append(f"admit Request({s[1]}, deadline={s[3]}) with max_queue={s[2]}")
        elif s[0] == "serve":
            said.append(f"serve {s[1]} from the front")
        else:
            said.append("empty the queue")
    return f"a queue holding {initial}, then: " + "; ".join(said)


@check(LAB, "admit agrees with the rule on every run tried (bound, order, the same object, typed refusal)")
def check_admit_same_as_reference(admit):
    """The learner's admit and the reference replay the same generated runs; every call's outcome and queue agree."""
    edges = [
        ([], [("admit", 0, 0, 100.0), ("admit", 1, 1, 100.0), ("admit", 2, 1, 100.0)]),
        ([10, 11, 12, 13, 14], [("admit", 0, 3, 9.0), ("serve", 3), ("admit", 1, 3, 5.0), ("admit", 2, 3, 1.0)]),
        (
            [],
            [
                ("admit", 2**31 + 1, 2, 5.0),
                ("admit", 2**63, 2, 5.0),
                ("admit", 5, 2, 1.0),
                ("clear",),
                ("admit", 6, 2, 1.0),
            ],
        ),
    ]
    same_as_reference(
        lambda initial, steps: _drive_admit(admit, initial, steps),
        lambda initial, steps: _drive_admit(_reference_admit, initial, steps),
        _admit_runs(),
        describe=_describe_admit_run,
        compare=_same_trace,
        edges=edges,
        arg_names=("initial", "steps"),
        examples=150,
    )


@check(LAB, "take_batch agrees with the rule on every run tried (deadline <= now, FIFO, max_batch_size)")
def check_take_batch_same_as_reference(take_batch):
    """The learner's take_batch and the reference replay the same arrivals and clock; every call agrees."""
    edges = [
        ([([(0, 3.0), (1, math.nextafter(3.0, math.inf)), (2, 3.5)], 3.0, 1), ([], 3.5, 5)],),
        ([([(2**31 + 1, 0.5), (2**63, 2.0), (7, 1.0)], 0.75, 1), ([], 1.0, 0), ([], 1.0, 2)],),
        ([([(5, 1e12 + 0.5), (4, 1e12)], 1e12, 2)],),
    ]
    same_as_reference(
        lambda steps: _drive_take(take_batch, steps),
        lambda steps: _drive_take(_reference_take_batch, steps),
        _take_runs(),
        describe=lambda steps: (
            "arrivals then take_batch calls "
            + "; ".join(f"+{[a[0] for a in arr]} then now={now!r}, max_batch_size={size}" for arr, now, size in steps)
        ),
        compare=_same_trace,
        edges=edges,
        arg_names=("steps",),
        examples=150,
    )
