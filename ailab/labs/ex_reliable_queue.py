"""Exercise checks: a job queue on Redis that loses nothing when a worker dies (chapter 4.04; topic A3).

The learner writes three functions over a real Redis (`ailab.services.start_redis()`, started once per
process by these checks; every check uses its own keys):
  claim(r, queue, processing) -> job | None
      atomically move the oldest job of `queue` (producers LPUSH, so the oldest is at the right end) to the
      left end of `processing` and return it; None when the queue is empty, without blocking for long.
  ack(r, processing, job) -> None
      the job is done: remove exactly one copy of it from `processing`.
  reclaim(r, processing, queue) -> int
      a worker died: move everything it held back to the queue's consuming end, so those jobs are claimed
      next, oldest first; return how many were moved.

The checks are derived from what each function must guarantee:
  claim: FIFO; the job is in `processing` (newest claimed on the left) and gone from `queue`; the queue
      argument is used (two queues); an empty queue gives None within a second or two; an empty job (b'') is
      returned as b'', not None, and a job that is not UTF-8 comes back as the bytes it is; draining gives each
      job once; a worker that dies after any number of its Redis calls loses no job (atomic move).
  ack: removes the given job (not the oldest, not all), exactly one copy of a duplicate, leaves the queue
      and the order of the rest alone; acking a job that is not there is harmless.
  reclaim: returns the count (0 for nothing held, an int); `processing` ends empty, an empty job included; the
      reclaimed jobs are
      claimed next in their old order, before jobs that were still queued; no job is lost or duplicated even
      if the reclaimer dies part-way; end to end, a worker that claims and dies loses nothing.
"""

from __future__ import annotations

import time
import uuid

from ailab.labs.core import check, expect, shared, within_time
from ailab.labs.differential import same_as_reference

LAB = "ex_reliable_queue"


def redis_client():
    """A client of this process's Redis for the checks (started on first use, stopped at exit)."""
    from ailab import services

    server = shared("redis", services.start_redis, alive=lambda s: s.proc.poll() is None)
    return server.client(socket_timeout=10)


def keys(tag: str = "ex") -> tuple[str, str]:
    base = f"ex:{tag}:{uuid.uuid4().hex[:10]}"
    return base + ":jobs", base + ":processing"


def _s(x):
    return x.decode() if isinstance(x, bytes) else x


def _list(r, key):
    return [_s(x) for x in r.lrange(key, 0, -1)]


def _push(r, queue, jobs):
    for j in jobs:
        r.lpush(queue, j)


def _timed(fn, *args, limit_s=3.0, what=""):
    return within_time(
        lambda: fn(*args),
        limit_s,
        f"{what} did not return within {limit_s:.0f} s: a worker must be able to poll an empty queue "
        "and get None (a blocking move needs a timeout; 0 means wait forever)",
        name="ailab-ex-queue",
    )


class Died(ConnectionError):
    """The worker process died: no further Redis call gets through."""


class DyingClient:
    """A Redis client whose worker dies after `lives` calls: later calls raise Died and do nothing."""

    def __init__(self, r, lives: int):
        self._r, self.lives, self.calls = r, lives, 0

    def __getattr__(self, name):
        attr = getattr(self._r, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls += 1
            if self.calls > self.lives:
                raise Died(f"the worker died before its Redis call #{self.calls} ({name})")
            return attr(*args, **kwargs)

        return call


@check(LAB, "claim moves the oldest job into the processing list")
def check_claim(claim):
    r = redis_client()
    queue, processing = keys("claim")
    _push(r, queue, ["job-1", "job-2", "job-3"])
    got = claim(r, queue, processing)
    expect(got is not None, "claim() on a queue holding 3 jobs returned None")
    expect(isinstance(got, (bytes, str)), f"claim() should return the job itself (bytes or str); got {got!r}")
    expect(
        _s(got) == "job-1",
        f"producers LPUSH job-1, job-2, job-3: the oldest, job-1, is at the right end and "
        f"is claimed first (FIFO); claim() returned {_s(got)!r}",
    )
    expect(
        _list(r, queue) == ["job-3", "job-2"],
        f"after claiming job-1 the queue should hold ['job-3', 'job-2'] (LRANGE order); it holds {_list(r, queue)}",
    )
    expect(
        _list(r, processing) == ["job-1"],
        f"the claimed job must wait in the processing list until it is acked, "
        f"so a crash cannot lose it; processing holds {_list(r, processing)}",
    )
    expect(_s(claim(r, queue, processing)) == "job-2", "the second claim should return job-2 (FIFO)")
    expect(
        _list(r, processing) == ["job-2", "job-1"],
        f"claimed jobs enter processing at its left end, like "
        f"ailab.workers: it should be ['job-2', 'job-1'], it is "
        f"{_list(r, processing)}",
    )
    other_q, other_p = keys("claim-other")
    _push(r, other_q, ["x-1"])
    expect(
        _s(claim(r, other_q, other_p)) == "x-1" and _list(r, other_p) == ["x-1"],
        "claim() from a second queue into a second processing list: use the queue and processing arguments",
    )
    expect(_list(r, queue) == ["job-3"], "claiming from another queue must not touch this one")
    expect(_s(claim(r, queue, processing)) == "job-3", "the third claim should return job-3")
    odd_q, odd_p = keys("claim-odd")
    r.lpush(odd_q, b"", b"\x80\xff binary")  # an empty job, then one that is not UTF-8
    first = claim(r, odd_q, odd_p)
    expect(
        first is not None and bytes(first.encode() if isinstance(first, str) else first) == b"",
        f"the oldest job is the empty string b''; claim() returned {first!r}. An empty job is still a job: test the "
        "reply with `is None`, not by its truth value",
    )
    second = claim(r, odd_q, odd_p)
    expect(
        second == b"\x80\xff binary",
        f"a job is bytes, and need not be text: claim() should return "
        f"b'\\x80\\xff binary' as Redis gave it; got {second!r}",
    )
    expect(
        r.llen(odd_q) == 0 and r.lrange(odd_p, 0, -1) == [b"\x80\xff binary", b""],
        f"both odd jobs should now be in processing; it holds {r.lrange(odd_p, 0, -1)}",
    )
    t0 = time.monotonic()
    out = _timed(claim, r, queue, processing, what="claim() on an empty queue")
    expect(out is None, f"claim() on an empty queue should return None; got {out!r}")
    expect(time.monotonic() - t0 < 2.5, "claim() on an empty queue should give up within a second or so")
    expect(_list(r, processing) == ["job-3", "job-2", "job-1"], "an empty claim must not change processing")
    queue, processing = keys("drain")
    jobs = [f"d-{i}" for i in range(25)]
    _push(r, queue, jobs)
    seen = [_s(claim(r, queue, processing)) for _ in range(25)]
    expect(
        seen == jobs,
        f"25 jobs claimed one by one should come out in the order they were pushed, each once; got {seen[:6]}...",
    )
    expect(
        r.llen(queue) == 0 and r.llen(processing) == 25,
        f"after draining 25 jobs the queue should be empty and "
        f"processing hold 25; they hold {r.llen(queue)} and "
        f"{r.llen(processing)}",
    )


@check(LAB, "ack removes exactly the job it is given")
def check_ack(ack):
    r = redis_client()
    queue, processing = keys("ack")
    r.rpush(processing, "c", "b", "a")  # claimed a, then b, then c (newest on the left)
    _push(r, queue, ["q-1"])
    out = ack(r, processing, b"b")
    expect(out is None or isinstance(out, (int, bool)), f"ack() returned {out!r}; it needs to return nothing")
    expect(
        _list(r, processing) == ["c", "a"],
        f"ack(job 'b') should leave ['c', 'a'] in processing, in order; it "
        f"holds {_list(r, processing)}: remove the job you are given, not "
        "the oldest or newest",
    )
    expect(_list(r, queue) == ["q-1"], f"ack() must not touch the queue; it holds {_list(r, queue)}")
    ack(r, processing, "a")
    expect(
        _list(r, processing) == ["c"],
        f"ack('a') given as str should remove it too; processing holds {_list(r, processing)}",
    )
    r.delete(processing)
    r.rpush(processing, "dup", "other", "dup")  # the same job held twice (it was reclaimed and claimed again)
    ack(r, processing, b"dup")
    expect(
        sorted(_list(r, processing)) == ["dup", "other"],
        f"processing held 'dup' twice; one ack removes exactly "
        f"one copy, leaving ['dup', 'other'] in some order; it "
        f"holds {_list(r, processing)}",
    )
    ack(r, processing, b"missing")
    expect(
        sorted(_list(r, processing)) == ["dup", "other"],
        "acking a job that is not in processing (a second ack) must change nothing",
    )
    other = keys("ack-other")[1]
    r.rpush(other, "dup")
    ack(r, other, b"dup")
    expect(
        r.llen(other) == 0 and sorted(_list(r, processing)) == ["dup", "other"],
        "ack() on a second processing list: use the processing argument",
    )


@check(LAB, "reclaim puts back what a dead worker held, oldest first")
def check_reclaim(claim, reclaim):
    r = redis_client()
    queue, processing = keys("reclaim")
    out = reclaim(r, processing, queue)
    expect(
        isinstance(out, int) and not isinstance(out, bool) and out == 0,
        f"reclaim() of an empty processing list should return 0 (an int); got {out!r}",
    )
    jobs = [f"j-{i}" for i in range(6)]
    _push(r, queue, jobs)
    held = [_s(claim(r, queue, processing)) for _ in range(3)]  # a worker takes 3, then dies
    expect(held == jobs[:3], f"claim() should have returned {jobs[:3]}; got {held}")
    out = reclaim(r, processing, queue)
    expect(
        isinstance(out, int) and not isinstance(out, bool),
        f"reclaim() should return how many jobs it moved (an int); got {out!r}",
    )
    expect(out == 3, f"the dead worker held 3 jobs; reclaim() returned {out}")
    expect(
        r.llen(processing) == 0,
        f"after reclaim() the dead worker's processing list should be empty; it holds {_list(r, processing)}",
    )
    expect(
        sorted(_list(r, queue)) == sorted(jobs),
        f"after reclaim() the queue should hold all 6 jobs once; it holds {_list(r, queue)}",
    )
    other = keys("reclaim-next")[1]
    nxt = [_s(claim(r, queue, other)) for _ in range(6)]
    expect(
        nxt[:3] == jobs[:3],
        f"reclaimed jobs have waited longest: they go back to the queue's consuming end and "
        f"are claimed next, in their old order {jobs[:3]}; the next claims returned {nxt[:3]}",
    )
    expect(
        nxt[3:] == jobs[3:],
        f"after the reclaimed jobs, the ones still queued follow in order {jobs[3:]}; got {nxt[3:]}",
    )
    q3, p3 = keys("reclaim-empty-job")
    r.rpush(p3, "k-3", "", "k-1")  # an empty job in the middle of what the worker held
    out = reclaim(r, p3, q3)
    expect(
        out == 3 and r.llen(p3) == 0 and sorted(r.lrange(q3, 0, -1)) == [b"", b"k-1", b"k-3"],
        f"the dead worker held 'k-3', '' (an empty job) and 'k-1': reclaim() should move all 3 and return 3; it "
        f"returned {out!r}, leaving {r.lrange(p3, 0, -1)} in processing - loop until the move returns None "
        "(`is None`), not until it returns something false",
    )
    q2, p2 = keys("reclaim-args")
    r.rpush(p2, "z-2", "z-1")
    expect(
        reclaim(r, p2, q2) == 2 and _list(r, q2) == ["z-2", "z-1"] and r.llen(p2) == 0,
        f"reclaim() on another processing list and queue: use the arguments (queue {_list(r, q2)}, processing "
        f"{_list(r, p2)})",
    )


@check(LAB, "a worker that dies at any moment loses no job")
def check_crash_safety(claim, ack, reclaim):
    r = redis_client()
    for lives in range(0, 6):
        queue, processing = keys("die-claim")
        _push(r, queue, ["a", "b", "c"])
        try:
            claim(DyingClient(r, lives), queue, processing)
        except Died:
            pass
        everything = _list(r, queue) + _list(r, processing)
        expect(
            sorted(everything) == ["a", "b", "c"],
            f"a worker died during claim() after {lives} Redis call(s): queue + processing now hold "
            f"{everything}, not a, b, c once each. Move the job in one atomic command, so there is no moment "
            "when it is in neither list",
        )
    for lives in range(0, 8):
        queue, processing = keys("die-reclaim")
        _push(r, queue, ["q"])
        r.rpush(processing, "h-3", "h-2", "h-1")
        try:
            reclaim(DyingClient(r, lives), processing, queue)
        except Died:
            pass
        everything = _list(r, queue) + _list(r, processing)
        expect(
            sorted(everything) == ["h-1", "h-2", "h-3", "q"],
            f"the reclaimer died after {lives} Redis call(s): queue + processing now hold {everything}, not each "
            "job once. Move jobs one atomic command at a time, never read-delete-push",
        )
    queue, processing = keys("end-to-end")
    jobs = [f"e-{i}" for i in range(20)]
    _push(r, queue, jobs)
    done = []
    for _ in range(5):  # worker A: claims 5, finishes 2, dies holding 3
        job = claim(r, queue, processing)
        if len(done) < 2:
            done.append(_s(job))
            ack(r, processing, job)
    expect(
        r.llen(processing) == 3,
        f"worker A claimed 5 jobs and acked 2: its processing list should hold 3; it holds {r.llen(processing)}",
    )
    expect(reclaim(r, processing, queue) == 3, "reclaim() of worker A's list should move its 3 unfinished jobs")
    b_processing = keys("end-to-end-b")[1]
    while (job := claim(r, queue, b_processing)) is not None:  # worker B does the rest
        done.append(_s(job))
        ack(r, b_processing, job)
    expect(
        sorted(done) == sorted(jobs) and len(done) == 20,
        f"end to end, every job should be done exactly once; missing {sorted(set(jobs) - set(done))}, done twice "
        f"{sorted({j for j in done if done.count(j) > 1})}",
    )
    expect(
        r.llen(b_processing) == 0 and r.llen(processing) == 0,
        "after the work is done, no processing list holds anything",
    )


# --------------------------------------------------------------------------- the differential check


def _reference_claim(r, queue, processing):
    return r.lmove(queue, processing, "RIGHT", "LEFT")


def _reference_ack(r, processing, job):
    r.lrem(processing, 1, job)


def _reference_reclaim(r, processing, queue):
    moved = 0
    while r.lmove(processing, queue, "LEFT", "RIGHT") is not None:
        moved += 1
    return moved


_QUEUES, _PROCESSING = ("A", "B"), ("P", "Q")


def _removals(held: list, job: bytes) -> set:
    """Every list that removing one copy of `job` from `held` can leave."""
    return {tuple(held[:i] + held[i + 1 :]) for i, x in enumerate(held) if x == job}


def _as_bytes(x):
    return x.encode() if isinstance(x, str) else x


def _drive(claim, ack, reclaim):
    """An adapter: run a program of claims, acks and reclaims on fresh keys; return what each step answered and
    what the two queues (A, B) and two processing lists (P, Q) held after it."""

    def run(program):
        r = redis_client()
        base = f"ex:diff:{uuid.uuid4().hex[:10]}"
        key = {name: f"{base}:{name}" for name in _QUEUES + _PROCESSING}
        queues, held, steps = program
        for name, jobs in queues.items():
            _push(r, key[name], jobs)
        for name, jobs in held.items():
            if jobs:
                r.rpush(key[name], *jobs)
        trace = []
        for step in steps:
            if step[0] == "claim":
                _, q, p = step
                if r.llen(key[q]) == 0:  # an empty claim may block a second: check_claim judges it
                    continue
                answer = _as_bytes(claim(r, key[q], key[p]))
            elif step[0] == "ack":
                _, p, job, as_str = step
                if len(_removals(r.lrange(key[p], 0, -1), job)) > 1:  # which copy goes is the learner's choice
                    continue
                answer = ack(r, key[p], job.decode() if as_str else job)
                answer = None  # ack's answer is not part of the contract
            else:
                _, p, q = step
                answer = reclaim(r, key[p], key[q])
            trace.append((step, answer, {name: r.lrange(key[name], 0, -1) for name in _QUEUES + _PROCESSING}))
        return trace

    return run


def _say_step(step) -> str:
    if step[0] == "claim":
        return f"claim(r, queue {step[1]}, processing {step[2]})"
    if step[0] == "ack":
        return f"ack(r, processing {step[1]}, {step[2].decode() if step[3] else step[2]!r})"
    return f"reclaim(r, processing {step[1]}, queue {step[2]})"


def _compare_traces(mine, ref) -> str | None:
    for (step, answer, lists), (_, want, want_lists) in zip(mine, ref):
        if step[0] == "reclaim" and (not isinstance(answer, int) or isinstance(answer, bool)):
            return f"{_say_step(step)} returned {answer!r}; it should return how many jobs it moved, {want}"
        if answer != want:
            return f"{_say_step(step)} returned {answer!r}; the reference returns {want!r}"
        if lists != want_lists:
            diff = [name for name in lists if lists[name] != want_lists[name]]
            return (
                f"after {_say_step(step)}, "
                + "; ".join(f"{n} holds {lists[n]} where the reference's holds {want_lists[n]}" for n in diff)
                + " (LRANGE order, newest on the left)"
            )
    return None if len(mine) == len(ref) else f"yours took {len(mine)} steps where the reference took {len(ref)}"


def _programs():
    """Hypothesis: what the two queues and two processing lists hold, then up to 14 claims, acks and reclaims."""
    from hypothesis import strategies as st

    job = st.sampled_from(
        [b"job-1", b"job-2", b"job-3", b"", b"\x80\xff binary", b"2147483648", b"x\n", b" y ", b"Job-1"]
    )
    jobs = st.lists(job, max_size=5)
    step = st.one_of(
        st.tuples(st.just("claim"), st.sampled_from(_QUEUES), st.sampled_from(_PROCESSING)),
        st.tuples(st.just("claim"), st.just("A"), st.just("P")),
        st.tuples(st.just("ack"), st.sampled_from(_PROCESSING), job, st.booleans()).map(
            lambda s: s if not s[3] or s[2].isascii() else (*s[:3], False)
        ),
        st.tuples(st.just("reclaim"), st.sampled_from(_PROCESSING), st.sampled_from(_QUEUES)),
    )
    return st.tuples(
        st.fixed_dictionaries({"A": jobs, "B": jobs}),
        st.fixed_dictionaries({"P": jobs, "Q": st.just([]) | jobs}),
        st.lists(step, max_size=14),
    ).map(lambda t: (t,))


def _describe_program(program) -> str:
    queues, held, steps = program
    return (
        f"queues A {list(reversed(queues['A']))} and B {list(reversed(queues['B']))} (LPUSHed in turn: the oldest on "
        f"the right), processing lists P {held['P']} and Q {held['Q']}, then "
        + (", ".join(_say_step(s) for s in steps) or "nothing")
    )


@check(LAB, "claim, ack and reclaim agree with the reference over any sequence of calls")
def check_same_as_reference(claim, ack, reclaim):
    same_as_reference(
        _drive(claim, ack, reclaim),
        _drive(_reference_claim, _reference_ack, _reference_reclaim),
        _programs(),
        describe=_describe_program,
        compare=_compare_traces,
        edges=[
            (
                (
                    {"A": [b"a", b"b", b"c"], "B": []},
                    {"P": [], "Q": []},
                    [
                        ("claim", "A", "P"),
                        ("claim", "A", "P"),
                        ("reclaim", "P", "A"),
                        ("claim", "A", "P"),
                        ("reclaim", "P", "A"),
                        ("claim", "A", "P"),
                        ("ack", "P", b"a", False),
                        ("claim", "A", "P"),
                        ("ack", "P", b"b", True),
                    ],
                ),
            ),
            (
                (
                    {"A": [b"", b"x\n"], "B": []},
                    {"P": [], "Q": []},
                    [("claim", "A", "P"), ("claim", "A", "Q"), ("ack", "P", b"", False), ("ack", "Q", b"x\n", True)],
                ),
            ),
        ],
        arg_names=("the program",),
        examples=100,
        limit_s=10.0,
    )


class _Counting:
    """A Redis client that counts the calls made through it."""

    def __init__(self, r):
        self._r, self.calls = r, 0

    def __getattr__(self, name):
        attr = getattr(self._r, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls += 1
            return attr(*args, **kwargs)

        return call


MAX_IDLE_CALLS = 25  # one call, or a poll every 40 ms or slower over a one-second wait


@check(LAB, "claim on an empty queue waits without hammering Redis")
def check_idle_claim_is_cheap(claim):
    r = redis_client()
    queue, processing = keys("idle")
    for attempt in range(2):
        client = _Counting(r)
        cpu0, t0 = time.process_time(), time.monotonic()
        out = _timed(claim, client, queue, processing, what="claim() on an empty queue")
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        expect(out is None, f"claim() on an empty queue should return None; got {out!r}")
        expect(
            client.calls <= MAX_IDLE_CALLS,
            f"claim() on an empty queue made {client.calls} Redis calls in {wall:.2f} s ({cpu * 1000:.0f} ms of CPU): "
            f"a loop that polls every few ms keeps a core and Redis busy for nothing; make one call, or a blocking "
            f"move with a timeout (BLMOVE ... timeout) that lets Redis wait for you",
        )
        expect(r.llen(processing) == 0, "an empty claim must not put anything into processing")
