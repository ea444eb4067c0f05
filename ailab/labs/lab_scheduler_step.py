"""Lab checks: the planning step of continuous batching under a KV-block budget (topics H3, S2).

The learner writes the planning half of the engine's step, the contract of `ailab.generation.plan.schedule`:
  schedule(waiting, running, blocks, max_running=None, policy="continuous") -> SchedulerOutput
      `waiting` (a deque, oldest first), `running` (a list, in admission order) and `blocks` (the BlockAllocator)
      are updated in place; the SchedulerOutput returned says what runs this step:
        decode     every running request, oldest first, with a slot for its next token (blocks.append); when no
                   block is free, the newest running request is preempted: its blocks freed, back at the FRONT of
                   the queue, listed in `preempted`;
        prefill    then (request, prompt + output tokens) for each waiting request admitted, oldest first, while a
                   seat (max_running, None: no limit) and blocks for all its tokens are free; the first that does
                   not fit stops admission.
      It never calls the model. The engine runs the plan and appends each request's token, retires the finished
      (their blocks freed) and handles cancellation: those are not the learner's part.

The checks run it INSIDE the real engine: `EngineCore(model, cache, max_running, planner=...)` over a PagedKVCache
whose allocator (WatchedBlocks) refuses with words what a plan should never ask, on the lab's traces. Each plan is
judged before the engine runs it, from a snapshot of the queues and the blocks taken before the planning step.

What every plan must guarantee, judged at every step of every check (the contract: a plan that breaks it would
break the engine, or give wrong tokens later):
  it is a SchedulerOutput of (request, tokens) prefills and request lists; max_running is never exceeded; blocks
  are never asked for beyond what is free (WatchedBlocks), nor given twice, nor freed twice; every request that
  ran before the step is either in `decode` exactly once or in `preempted` (none left out, none twice, none lost);
  a request admitted in this step is in `prefill` once and not also in `decode`; only waiting requests are
  prefilled (a running one keeps its cache: each prompt is prefilled once, twice only after a preemption), with
  prompt + output tokens (the recompute after a preemption) and blocks holding exactly those; each one decoded has
  a slot for its next token; a preempted request is back in the queue, holding no blocks; the queues are updated
  in place (the engine holds them); after the plan the blocks held are exactly the running requests' (none
  leaked on preemption); a step that plans nothing while requests wait stalls for ever (named at once, and a step
  limit backs it up).
What the engine must give back, checked after each step and at the end: the blocks held are exactly the running
requests' after the engine retires the finished ones; the tokens equal one-at-a-time greedy generation (a mixed
trace, and a pool too small for everyone, where preempting must replace failing); every block is free at the end;
a long request at the head of the queue is not overtaken forever by short ones.
Greedy tokens come out the same whatever the policy, so the policy is judged step by step in checks of its own:
  admission: the requests admitted are the head of the queue, in order (nobody jumps a head that does not fit),
      and after the plan the head of the queue does not fit the free seats and blocks: every seat that can be
      filled is filled at once, while others still run (static batching, which waits for the whole batch to end,
      and one admission per step both fail);
  preemption: the requests sent back are the newest running ones, at the FRONT of the queue (oldest of them
      first, ahead of those already waiting), and no more than needed (the oldest of them could not have kept
      running with the blocks the plan left free).
The trace check (check_same_as_reference) runs the learner's planning step and the engine's own
(ailab.generation.schedule, the reference: the contract above, word for word) side by side over many generated
arrival traces (Hypothesis: prompt lengths, max_new_tokens, arrival steps, ids; pools of blocks of 1 to 8 tokens,
seats None or 1 to 6; bursts that preempt several requests in one step), each in an engine without the model (the
plan never depends on a token's value): the plans, and the queues and blocks each leaves, must be the same at every
step. A difference names the first step where they differ, the smallest trace found, and both plans.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field

import torch

from ailab.generation.paged import BlockAllocator, OutOfBlocks, PagedKVCache
from ailab.generation.plan import SchedulerOutput
from ailab.generation.request import Request
from ailab.generation.engine_core import EngineCore
from ailab.labs.core import LabCheckFailed, check, expect, tiny_decoder, torch_threads
from ailab.labs.differential import same_as_reference, short

LAB = "lab_scheduler_step"


def model():
    return tiny_decoder(5)


class BudgetViolation(LabCheckFailed):
    pass


class WatchedBlocks(BlockAllocator):
    """The real allocator, refusing with words what a plan should never ask."""

    def allocate(self, seq, tokens, token_ids=None):
        if seq in self.tables:
            raise BudgetViolation(
                f"request {seq} was given blocks (blocks.allocate) while it still held its own: a running request "
                "keeps its blocks and gets a slot (blocks.append), and a preempted one gives its blocks back "
                "(blocks.free) before it goes back to the queue"
            )
        if not self.can_allocate(tokens):
            raise BudgetViolation(
                f"request {seq} was admitted with {tokens} tokens ({self.blocks_for(tokens)} blocks) "
                f"while {len(self.free_blocks)} blocks were free: check blocks.can_allocate() first, "
                "and stop admitting at the first request that does not fit"
            )
        return super().allocate(seq, tokens, token_ids)

    def append(self, seq):
        if seq not in self.tables:
            raise BudgetViolation(
                f"blocks.append({seq!r}): request {seq} holds no blocks. A slot is for a running request's next "
                "token; a waiting request gets its blocks when it is admitted (blocks.allocate)"
            )
        return super().append(seq)

    def free(self, seq):
        if seq not in self.tables:
            raise BudgetViolation(f"request {seq} was freed twice (or never held blocks)")
        super().free(seq)


def _requests(spec, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Request(i, torch.randint(0, 256, (n,), generator=g).tolist(), m) for i, (n, m) in enumerate(spec)]


def _expected(req):
    """One-at-a-time greedy generation of `req`, the oracle (kept: every check asks for the same requests)."""
    return list(_greedy(tuple(req.prompt), req.max_new_tokens))


@functools.cache
@torch_threads(1)
def _greedy(prompt: tuple, n: int) -> tuple:
    from ailab.generation import generate

    return tuple(generate(model(), torch.tensor([prompt]), n)[0].tolist())


def _ids(reqs) -> list[int]:
    return [r.id for r in reqs]


class _Before:
    """What the engine held when a planning step began: enough to judge the plan it returned."""

    def __init__(self, waiting, running, step: int):
        self.step = step
        self.waiting, self.running = _ids(waiting), _ids(running)  # oldest first; admission order
        self.tokens = {r.id: len(r.prompt) + len(r.output) for r in list(waiting) + list(running)}


@dataclass
class _Plan:
    """One planning step: the snapshot before it, the plan, and the engine's queues and blocks after it."""

    before: _Before
    plan: SchedulerOutput
    waiting: deque
    running: list
    blocks: BlockAllocator
    max_running: int | None
    what: str

    def say(self, text: str) -> str:
        return f"{self.what}, step {self.before.step + 1}: {text}"

    @property
    def admitted(self) -> list[int]:
        return [r.id for r, _ in self.plan.prefill]


@dataclass
class _Run:
    """What a drive saw: each plan's prefills (request id, tokens), its decode batch, its preempted ids."""

    scheduler: EngineCore | None
    finished: list[Request] = field(default_factory=list)
    prefills: list[tuple[int, int]] = field(default_factory=list)
    decodes: list[list[int]] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    steps: int = 0


def _judge_contract(p: _Plan) -> None:
    """What every plan must hold, or the engine could not run it (or would give wrong tokens later)."""
    plan, before = p.plan, p.before
    expect(
        isinstance(plan, SchedulerOutput),
        p.say(
            f"your schedule returned {type(plan).__name__}; return a SchedulerOutput (from ailab.generation) "
            "with its prefill, decode and preempted lists"
        ),
    )
    for entry in plan.prefill:
        expect(
            isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], Request),
            p.say(f"plan.prefill holds {entry!r}; each entry is a pair (request, tokens to prefill)"),
        )
    for name in ("decode", "preempted"):
        bad = [x for x in getattr(plan, name) if not isinstance(x, Request)]
        expect(not bad, p.say(f"plan.{name} holds {bad[0]!r}; it is a list of requests") if bad else "")
    running_now, waiting_now = _ids(p.running), _ids(p.waiting)
    admitted, decoded, preempted = p.admitted, _ids(plan.decode), _ids(plan.preempted)
    expect(
        p.max_running is None or len(p.running) <= p.max_running,
        p.say(
            f"{len(p.running)} requests run after your plan, max_running is {p.max_running}: admit only while "
            "a seat is free"
        ),
    )
    for (req, n), rid in zip(plan.prefill, admitted):  # first: a wrong count can make a victim fit again at once
        want = len(req.prompt) + len(req.output)
        expect(
            n == want,
            p.say(
                f"request {rid} is prefilled with {n} tokens; it has {want}: "
                + (
                    f"{len(req.prompt)} of prompt and {len(req.output)} it generated before it was preempted. "
                    "The prefill recomputes them all (the prompt and the output so far)"
                    if req.output
                    else "its whole prompt"
                )
            ),
        )
    for rid in preempted:
        expect(
            rid in before.running,
            p.say(f"request {rid} is in plan.preempted but was not running; only a running request is preempted"),
        )
        expect(
            rid not in admitted,
            p.say(
                f"request {rid} was running, preempted, and admitted again (prefill) in this step: it fitted, so it "
                "did not need to be preempted. Preempt one request at a time, newest first, and only until the "
                "request short of a slot has one"
                if rid in before.running
                else f"request {rid} was admitted and preempted in the same step. Plan the running requests' slots "
                "first (preempting as needed), then admit from the queue"
            ),
        )
        expect(
            rid not in running_now and rid in waiting_now,
            p.say(
                f"request {rid} is in plan.preempted, so it must have left `running` for `waiting`; it is "
                f"{'still in running' if rid in running_now else 'not in waiting'}"
            ),
        )
        expect(
            rid not in p.blocks.tables,
            p.say(
                f"request {rid} went back to the queue still holding {len(p.blocks.tables.get(rid, ()))} blocks: "
                "a preempted request gives its blocks back (blocks.free), or they are lost to everyone"
            ),
        )
    for rid in before.running:
        expect(
            rid in running_now or rid in preempted,
            p.say(
                f"request {rid} was running and your plan left it neither running nor in plan.preempted"
                + (
                    ": it went back to the queue, so list it in plan.preempted (the engine marks it waiting)"
                    if rid in waiting_now
                    else ": the request is lost"
                )
            ),
        )
    for (req, n), rid in zip(plan.prefill, admitted):
        expect(
            rid not in decoded,
            p.say(
                f"request {rid} was admitted in this step and is in plan.decode too: its prefill gives its first "
                "token, so it is not decoded in the same step. plan.decode holds the requests that were running "
                "before the step (plan their slots first, then admit)"
            ),
        )
        expect(
            rid not in before.running,
            p.say(
                f"request {rid} was already running, and your plan prefills it again: its blocks already hold its "
                "tokens, so it gets a slot and goes in plan.decode. Only a request admitted from the queue is "
                "prefilled"
            ),
        )
        expect(
            rid in before.waiting,
            p.say(f"request {rid} is in plan.prefill but was not waiting: admit requests from `waiting`"),
        )
        expect(admitted.count(rid) == 1, p.say(f"request {rid} is in plan.prefill twice"))
        expect(
            rid in running_now and rid not in waiting_now,
            p.say(
                f"request {rid} is in plan.prefill but {'still in waiting' if rid in waiting_now else 'not in running'}"
                ": an admitted request leaves the queue for the end of `running`. Update the engine's `waiting` "
                "and `running` in place: the engine holds those very objects"
            ),
        )
        held = p.blocks.lengths.get(rid)
        expect(
            held == n,
            p.say(f"request {rid} is prefilled with {n} tokens but its blocks hold {held}: allocate for exactly those"),
        )
    for rid in decoded:
        expect(decoded.count(rid) == 1, p.say(f"request {rid} is in plan.decode twice: one token per step each"))
        expect(
            rid in before.running and rid in running_now,
            p.say(
                f"request {rid} is in plan.decode but "
                + ("was preempted" if rid in preempted else "was not running")
                + ": decode holds the running requests that keep running"
            ),
        )
        held, want = p.blocks.lengths.get(rid), before.tokens[rid]
        expect(
            held == want,
            p.say(
                f"request {rid} is in plan.decode but its blocks hold {held} tokens; with the slot for its next "
                f"token they hold {want}: "
                + (
                    "blocks.append gives that slot, once per step"
                    if held is not None and held < want
                    else "one slot per step (blocks.append once)"
                )
            ),
        )
    left_out = [rid for rid in running_now if rid not in decoded and rid not in admitted]
    expect(
        not left_out,
        p.say(
            f"request(s) {left_out} keep running but are not in plan.decode: every running request gets one token "
            "per step (a slot, and a place in plan.decode), oldest first"
        ),
    )
    held = set(p.blocks.tables)
    expect(
        held == set(running_now),
        p.say(
            f"after your plan, blocks are held by requests {sorted(held)} and the running ones are "
            f"{sorted(running_now)}"
            + (
                ". A request that leaves `running` gives its blocks back (blocks.free)"
                if held - set(running_now)
                else ". A running request holds its blocks"
            )
        ),
    )
    lost = set(before.waiting) - set(waiting_now) - set(admitted)
    expect(not lost, p.say(f"request(s) {sorted(lost)} left the queue without being admitted: they are lost"))


def _judge_progress(p: _Plan) -> None:
    """A plan that runs nothing while requests wait stalls the engine for ever (with the right plan, the oldest
    running request always gets its slot, and the head of the queue always fits an empty pool)."""
    plan, before = p.plan, p.before
    expect(
        plan.prefill or plan.decode or not (before.waiting or before.running),
        p.say(
            f"your plan runs nothing while requests {before.waiting} wait"
            + (f" and {before.running} ran before it (it preempted them all)" if before.running else "")
            + ": the engine would take the same step for ever. Admit the head of the queue when a seat and its "
            "blocks are free"
        ),
    )


def _judge_admission(p: _Plan) -> None:
    """Oldest first, nobody jumping the head; and after the plan the head does not fit: every seat that can be
    filled is (a request that fits is not left waiting for the running ones to finish: that is static batching)."""
    admitted, queue = p.admitted, p.before.waiting
    expect(
        admitted == queue[: len(admitted)],
        p.say(
            f"the queue was {queue} (oldest first) and your plan admitted {admitted}: admit from the head of the "
            "queue, in order. When the head does not fit, admission stops for this step: nobody behind it jumps "
            "ahead"
        ),
    )
    if not p.waiting or (p.max_running is not None and len(p.running) >= p.max_running):
        return
    head = p.waiting[0]
    need = p.blocks.blocks_for(len(head.prompt) + len(head.output))
    free = len(p.blocks.free_blocks)
    if need > free:
        return
    seats = "no limit" if p.max_running is None else f"{len(p.running)} of {p.max_running} seats taken"
    expect(
        False,
        p.say(
            f"after your plan, with {seats} and {free} blocks free, request {head.id} at the head of the queue "
            f"needs {need} block(s): it fits, and your plan admitted {admitted or 'nobody'} while requests "
            f"{[r for r in p.before.running if r in _ids(p.running)]} ran. "
            + (
                "Admit while seats and blocks allow, not one request per step"
                if admitted
                else "Fill a freed seat at once, while the others still run (continuous batching): waiting for the "
                "running batch to finish first is static batching"
            )
        ),
    )


def _judge_preemption(p: _Plan) -> None:
    """The requests sent back are the newest running ones, at the front of the queue (oldest first), and no more
    of them than needed."""
    victims = [rid for rid in p.before.running if rid in _ids(p.plan.preempted)]  # oldest first
    if not victims:
        return
    running, order = p.before.running, {rid: i for i, rid in enumerate(p.before.running)}
    kept_newer = [(v, r) for v in victims for r in _ids(p.running) if r in order and order[r] > order[v]]
    expect(
        not kept_newer,
        p.say(
            f"your plan preempted request {kept_newer[0][0] if kept_newer else ''} while request "
            f"{kept_newer[0][1] if kept_newer else ''}, admitted after it, kept running (running was {running}, "
            "oldest first). Preempt the NEWEST running request (the last admitted, at the end of `running`): it has "
            "done the least work, so recomputing it costs least, and the oldest keep their progress"
        ),
    )
    waiting = _ids(p.waiting)
    expect(
        waiting[: len(victims)] == victims,
        p.say(
            f"preempted request(s) {victims} should be at the FRONT of the queue, oldest first, ahead of those that "
            f"were already waiting (they were admitted before them); the queue is {waiting}. A request sent back "
            "goes in at the front of the deque"
        ),
    )
    passed = [rid for rid in p.admitted if rid in p.before.waiting]
    expect(
        not passed,
        p.say(
            f"your plan admitted request(s) {passed} ahead of request {victims[0]}, preempted in this step: a "
            "request sent back goes to the FRONT of the queue, ahead of those already waiting, and admission stops "
            "at the head when it does not fit, so nobody is admitted past it"
        ),
    )
    oldest = victims[0]
    free = len(p.blocks.free_blocks) + sum(p.blocks.blocks_for(n) for _, n in p.plan.prefill)
    need = p.blocks.blocks_for(p.before.tokens[oldest])
    expect(
        free < need,
        p.say(
            f"your plan preempted requests {victims} and left {free} blocks free, enough for request {oldest} to "
            f"have kept running ({need} blocks with the slot for its next token). Preempt one request at a time, "
            "newest first, and only until the request short of a slot has one"
        ),
    )


class _Watched:
    """The learner's planning step as the engine's planner: a snapshot before each call, then the plan judged
    (the contract, the check's own judges, then progress) before the engine runs it, and recorded."""

    def __init__(self, fn, run: _Run, what: str, judges=()):
        self.fn, self.run, self.what, self.judges = fn, run, what, judges

    def __call__(self, waiting, running, blocks, max_running, policy):
        before = _Before(waiting, running, self.run.steps)
        plan = self.fn(waiting, running, blocks, max_running, policy)
        p = _Plan(before, plan, waiting, running, blocks, max_running, self.what)
        _judge_contract(p)
        for judge in self.judges:
            judge(p)
        _judge_progress(p)
        self.run.prefills += [(r.id, n) for r, n in plan.prefill]
        self.run.decodes.append(_ids(plan.decode))
        self.run.preempted += _ids(plan.preempted)
        return plan


@torch_threads(1)
def _drive(
    schedule,
    what: str,
    *,
    num_blocks: int,
    block_size: int,
    max_running: int | None,
    arrivals: dict,
    judges=(),
    max_steps: int = 1000,
) -> _Run:
    """Run the real engine with the learner's `schedule` as its planner until every request is done; after each
    step, the blocks held must be exactly the running requests'."""
    m = model()
    cache = PagedKVCache(m.n_layer, m.n_head, m.head_dim, WatchedBlocks(num_blocks, block_size))
    run = _Run(None)
    sched = EngineCore(m, cache, max_running, planner=_Watched(schedule, run, what, judges))
    run.scheduler, steps = sched, sched.run(arrivals)
    while True:
        try:
            report = next(steps, None)
        except OutOfBlocks as e:
            raise LabCheckFailed(
                f"{what}, step {run.steps + 1}: blocks.append raised OutOfBlocks ({e}) and your plan let it escape: "
                "when no block is free, preempt the newest running request (free its blocks, send it back to the "
                "front of the queue) and try again"
            ) from None
        if report is None:
            break
        run.steps += 1
        run.finished += report.done
        held, running = set(cache.allocator.tables), set(_ids(sched.running))
        expect(
            held == running,
            f"{what}, after step {run.steps}: blocks are held by requests {sorted(held)} but the running ones are "
            f"{sorted(running)}",
        )
        expect(
            run.steps <= max_steps,
            f"{what}: not done after {max_steps} steps ({len(sched.waiting)} waiting, {len(sched.running)} running): "
            "does every step run every running request and admit the head of the queue when it fits?",
        )
    return run


def _same_tokens(reqs, after: str = "") -> None:
    for r in reqs:
        want = _expected(r)
        expect(
            r.output == want,
            f"request {r.id}: tokens {r.output[:8]}... differ from greedy generation {want[:8]}...{after}",
        )


@check(LAB, "the tokens: a mixed trace through the engine gives one-at-a-time greedy tokens")
def check_tokens(schedule):
    reqs = _requests([(5, 12), (30, 3), (9, 20), (2, 1), (17, 7)])
    run = _drive(schedule, "five requests, three seats", num_blocks=64, block_size=8, max_running=3, arrivals={0: reqs})
    expect(
        sorted(_ids(run.finished)) == _ids(reqs),
        f"every request should finish once; finished: {sorted(_ids(run.finished))}",
    )
    _same_tokens(reqs)
    blocks = run.scheduler.alloc
    expect(len(blocks.free_blocks) == blocks.num_blocks, "at the end every block should be free again")


@check(LAB, "the plan: each running request decoded once a step, each admitted one prefilled with all its tokens")
def check_plan(schedule):
    # Arrivals in three waves over 9 blocks of 4 tokens, four seats: requests are admitted while others run, the
    # pool runs dry (the 34-token request alone needs all 9 blocks), and request 4 is preempted twice and prefilled
    # again each time with what it had generated.
    reqs = _requests(_MIXED, seed=8)
    run = _drive(
        schedule,
        "ten requests of mixed lengths, four seats, 9 blocks of 4 tokens",
        num_blocks=9,
        block_size=4,
        max_running=4,
        arrivals={0: reqs[:4], 3: reqs[4:7], 9: reqs[7:]},
    )
    _same_tokens(reqs)
    expect(
        any(len(d) > 1 for d in run.decodes),
        "no step ever decoded more than one request: with four seats, requests run together",
    )


@check(LAB, "the budget: never beyond the free blocks, and a pool too small preempts")
def check_budget(schedule):
    reqs = _requests([(6, 14), (6, 14), (6, 14), (6, 14)], seed=2)  # 4 x 20 tokens = 20 blocks > 10
    run = _drive(
        schedule,
        "four requests of 20 tokens over 10 blocks of 4, no seat limit",
        num_blocks=10,
        block_size=4,
        max_running=None,
        arrivals={0: reqs},
    )
    _same_tokens(reqs, after=" After a preemption, the prefill recomputes the prompt and what it had generated")
    again = [rid for rid, n in run.prefills if n > len(reqs[rid].prompt)]
    expect(again, "the pool cannot hold all four at full length: someone had to be preempted and prefilled again")


@check(LAB, "fairness: a long request at the head is not overtaken forever")
def check_no_starvation(schedule):
    # Seats to spare (8), so blocks are what limits: a short request holds 1 to 3 blocks of 4 over its life, and
    # one arrives every step; the long one needs 14 of the 16 blocks for its prompt, free only once those ahead of
    # it have finished and nobody behind it was let in meanwhile.
    g = torch.Generator().manual_seed(4)
    short = lambda i: Request(i, torch.randint(0, 256, (4,), generator=g).tolist(), 6)  # noqa: E731
    first = [short(i) for i in range(3)]
    long = Request(99, torch.randint(0, 256, (56,), generator=g).tolist(), 4)
    run = _drive(
        schedule,
        "a 56-token request behind short ones, with short ones arriving every step",
        num_blocks=16,
        block_size=4,
        max_running=8,
        arrivals={0: first + [long], **{s: [short(100 + s)] for s in range(1, 60)}},
        max_steps=400,
    )
    order = _ids(run.finished)
    expect(
        99 in order and order.index(99) < 30,
        f"the long request finished {'at position ' + str(order.index(99)) if 99 in order else 'never'} of "
        f"{len(order)}: oldest first means that when the head of the queue does not fit, nobody behind it "
        "jumps ahead",
    )


# A mixed trace for the policy checks: (prompt tokens, new tokens), so that requests finish at different steps;
# the 34-token one needs 5 of the 8 blocks of check_continuous, so it waits at the head now and then.
_MIXED = [(5, 3), (7, 16), (3, 9), (6, 5), (4, 12), (30, 4), (9, 2), (5, 8), (2, 1), (8, 6)]


@check(LAB, "continuous: the head of the queue first, and a freed seat filled at the next step")
def check_continuous(schedule):
    reqs = _requests(_MIXED, seed=6)
    run = _drive(
        schedule,
        "ten requests of mixed lengths, three seats, 8 blocks of 8 tokens",
        num_blocks=8,
        block_size=8,
        max_running=3,
        arrivals={0: reqs[:6], 5: reqs[6:]},
        judges=(_judge_admission,),
    )
    expect(
        any(len(d) > 1 for d in run.decodes),
        "no step ever decoded more than one request: with three seats, requests run together",
    )


@check(LAB, "preemption: the newest running request, back at the front of the queue")
def check_preemption(schedule):
    # 10 blocks of 4 tokens, three seats: three requests growing to 16, 22 and 22 tokens need 15 blocks, so the
    # pool runs dry while two more wait for a seat; the oldest is the first short of a slot, and the newest (a
    # request admitted again after its preemption, too) is preempted several times over the run.
    reqs = _requests([(4, 12), (4, 18), (8, 14), (4, 6), (3, 5)], seed=7)
    run = _drive(
        schedule,
        "five requests over 10 blocks of 4 tokens, three seats",
        num_blocks=10,
        block_size=4,
        max_running=3,
        arrivals={0: reqs},
        judges=(_judge_preemption,),
    )
    expect(
        run.preempted,
        "the three running requests outgrow the 10 blocks, yet no running request went back to the queue: when "
        "blocks.append finds no free block, preempt the newest running request",
    )
    _same_tokens(reqs)


def engine(schedule, num_blocks: int, block_size: int, max_running: int | None) -> EngineCore:
    """The real engine with `schedule` as its planner, over a tiny model (for the lab's last cell: your planner
    under load). Its plans are not judged here; the checks do that."""
    m = model()
    cache = PagedKVCache(m.n_layer, m.n_head, m.head_dim, WatchedBlocks(num_blocks, block_size))
    return EngineCore(m, cache, max_running, planner=schedule)


# --------------------------------------------------------------------------- trace checks: the reference's plans


def _rid(x):
    """A request's id, or what the plan holds instead of a request (said, not raised)."""
    return x.id if isinstance(x, Request) else f"<{type(x).__name__}>"


def _state(waiting, running, blocks) -> tuple:
    """What the engine can see between plans: the queues (ids, in order), the free blocks, and each table's
    blocks and tokens (which block ids a request holds is the allocator's business, not the plan's)."""
    held = sorted(
        ((k, len(t), blocks.lengths.get(k)) for k, t in blocks.tables.items()), key=lambda h: (repr(type(h[0])), h[0])
    )
    return (
        tuple(_rid(r) for r in waiting),
        tuple(_rid(r) for r in running),
        len(blocks.free_blocks),
        tuple(held),
    )


def _plan_record(plan) -> dict:
    if not isinstance(plan, SchedulerOutput):
        return {"bad": f"returned {short(plan)}, not a SchedulerOutput"}
    try:
        prefill = tuple(
            (_rid(e[0]), e[1] if type(e[1]) is int else short(e[1]))
            if isinstance(e, (tuple, list)) and len(e) == 2
            else (short(e), "?")
            for e in plan.prefill
        )
        decode, preempted = tuple(_rid(r) for r in plan.decode), tuple(_rid(r) for r in plan.preempted)
    except TypeError as e:
        return {"bad": f"returned a SchedulerOutput whose lists cannot be read ({e})"}
    return {"prefill": prefill, "decode": decode, "preempted": preempted}


def _apply(plan: SchedulerOutput, running: list, blocks: BlockAllocator) -> None:
    """The engine's apply phase without the model (Scheduler.update_from_output): one token for each request
    that runs, the finished retired and their blocks freed. The tokens' values never change a plan."""
    done = []
    for req in plan.preempted:
        req.num_computed_tokens = 0  # its blocks are gone: it is prefilled again when admitted
    for req in [r for r, _ in plan.prefill] + list(plan.decode):
        req.num_computed_tokens = len(req.prompt) + len(req.output)  # every token's K/V written, then a new one
        req.output.append(0)
        if req.done:
            done.append(req)
    for req in done:
        if req.id in blocks.tables:
            blocks.free(req.id)
        running.remove(req)


def _trace_requests(trace) -> dict:
    arrivals: dict = {}
    for rid, prompt, new, at in trace[3]:
        arrivals.setdefault(at, []).append(Request(rid, [0] * prompt, new))
    return arrivals


def _plans(schedule, trace, max_steps: int = 2000) -> list:
    """Run `schedule` over `trace` (num_blocks, block_size, max_running, requests) as the engine does, arrivals
    submitted before each step's plan, and record each step: the state before it, the plan, the state after."""
    num_blocks, block_size, max_running, _ = trace
    blocks = BlockAllocator(num_blocks, block_size)
    waiting: deque = deque()
    running: list = []
    arrivals, steps = _trace_requests(trace), []
    while waiting or running or arrivals:
        waiting.extend(arrivals.pop(len(steps), []))
        before = _state(waiting, running, blocks)
        try:
            plan = schedule(waiting, running, blocks, max_running, "continuous")
        except (NotImplementedError, LabCheckFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the learner's code may raise anything: recorded, then compared
            steps.append({"before": before, "bad": f"raised {type(e).__name__}: {e}"})
            return steps
        entry = {"before": before, **_plan_record(plan)}
        steps.append(entry)
        if "bad" in entry:
            return steps
        entry["after"] = _state(waiting, running, blocks)
        try:
            _apply(plan, running, blocks)
        except Exception as e:  # noqa: BLE001 - a plan the engine cannot apply
            steps.append({"before": None, "bad": f"the engine could not apply that plan ({type(e).__name__}: {e})"})
            return steps
        if len(steps) >= max_steps:
            steps.append({"before": None, "bad": f"not done after {max_steps} steps"})
            return steps
    return steps


def _say_state(state) -> str:
    waiting, running, free, held = state
    tables = ", ".join(f"{k}: {n} token{'s' * (n != 1)} in {b} block{'s' * (b != 1)}" for k, b, n in held)
    return f"waiting {list(waiting)}, running {list(running)}, {free} block{'s' * (free != 1)} free" + (
        f" (held: {tables})" if tables else ""
    )


def say_step(entry, say_state=_say_state) -> str:
    """One step of a run (run_plans' record) in words: its plan and the state it leaves."""
    if "bad" in entry:
        return entry["bad"]
    prefill = ", ".join(f"{rid} with {n} token{'s' * (n != 1)}" for rid, n in entry["prefill"])
    return (
        f"decode {list(entry['decode'])}, prefill [{prefill}], preempted {list(entry['preempted'])}; "
        f"after the plan: {say_state(entry['after'])}"
    )


_FIELDS = ("decode", "prefill", "preempted", "after")


def same_plans(mine, ref, say_state=_say_state) -> str | None:
    """The first step where the plans (or the queues and blocks they leave) differ, with both plans; None when
    every step is the same. Shared with the chunked-prefill exercise, whose states also say computed tokens."""
    for k, (m, r) in enumerate(zip(mine, ref)):
        if all(m.get(f) == r.get(f) for f in (*_FIELDS, "bad")):
            continue
        differ = [f for f in _FIELDS if "bad" not in m and "bad" not in r and m[f] != r[f]]
        before = m["before"] if m["before"] is not None else r["before"]
        return (
            f"step {k + 1} is the first where the plans differ"
            + (f" (in {' and '.join('the state after it' if f == 'after' else f for f in differ)})" if differ else "")
            + (f". Before it: {say_state(before)}" if before is not None else "")
            + f". The reference plans: {say_step(r, say_state)}. Yours: {say_step(m, say_state)}"
        )
    if len(mine) > len(ref):
        extra = mine[len(ref)]
        left = say_state(extra["before"]) if extra["before"] is not None else extra.get("bad")
        return (
            f"the same plans for {len(ref)} steps, after which the reference's engine is done (every request has "
            f"its max_new_tokens); yours still has {left}. Did your plan change a request (its prompt or output)? "
            "The engine owns those"
        )
    if len(mine) < len(ref):
        return (
            f"the same plans for {len(mine)} steps, after which your engine has nothing left to run, and the "
            f"reference's still has {say_state(ref[len(mine)]['before'])}"
        )
    return None


def _describe_trace(trace) -> str:
    num_blocks, block_size, max_running, reqs = trace
    each = "; ".join(f"request {rid} (prompt {p}, max_new_tokens {m}) at step {at}" for rid, p, m, at in reqs)
    return (
        f"a trace of {len(reqs)} request(s) over {num_blocks} block(s) of {block_size} token(s), "
        f"max_running={max_running}: {each}"
    )


def _traces():
    """Hypothesis: arrival traces the engine accepts: every request fits the whole pool (blocks_for(prompt +
    max_new_tokens) <= num_blocks, as Scheduler.add_request demands), prompts of 1 token to the pool's size, blocks of
    1 to 8 tokens, seats None or 1 to 6, arrivals at step 0 and later, ids in order, reversed, shuffled or beyond
    2**31; and bursts: same-sized prompts that fill a tight pool at once, so that several requests are short of a
    block in the same step and several are preempted in it."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        block_size = d(st.sampled_from([1, 2, 3, 4, 8]))
        max_running = d(st.one_of(st.none(), st.integers(1, 6)))
        specs = []
        if d(st.booleans()):  # a burst: k prompts of j whole blocks each, arriving together into a tight pool
            k, j = d(st.integers(2, 6)), d(st.integers(1, 2))
            num_blocks = k * j + d(st.integers(0, 1))
            cap = num_blocks * block_size
            for _ in range(k):
                prompt = block_size * j - d(st.integers(0, min(1, block_size * j - 1)))
                specs.append((prompt, d(st.integers(1, min(10, cap - prompt))), 0))
        else:
            num_blocks = d(st.integers(2 if block_size == 1 else 1, 16))
        cap = min(num_blocks * block_size, 48)
        for _ in range(d(st.integers(0 if specs else 1, 7))):
            prompt = d(st.integers(1, cap - 1))
            specs.append((prompt, d(st.integers(1, min(12, cap - prompt))), d(st.integers(0, 12))))
        n = len(specs)
        order = d(st.sampled_from(["in order", "reversed", "shuffled", "beyond 2**31"]))
        if order == "shuffled":
            ids = d(st.permutations(range(n)))
        elif order == "in order":
            ids = list(range(n))
        else:
            ids = [(2**31 + 7 * (n - i) if order == "beyond 2**31" else n - 1 - i) for i in range(n)]
        return (num_blocks, block_size, max_running, tuple((ids[i], *specs[i]) for i in range(n)))

    return draw().map(lambda trace: (trace,))


# The contract's corners, tried first (and shown as they are): three requests preempted in one step; a head of the
# queue that fits with no token to spare; no seat limit, with more running than waiting; ids beyond 2**31 that
# run against arrival order, with preemption.
_EDGES = [
    (6, 2, None, tuple((i, 2, 4, 0) for i in range(6))),
    (3, 4, 2, ((0, 8, 3, 0), (1, 4, 2, 0), (2, 3, 2, 1))),
    (32, 4, None, ((0, 5, 6, 0), (1, 3, 6, 0), (2, 4, 6, 0), (3, 4, 3, 1), (4, 2, 2, 3))),
    (5, 2, 3, ((2**40, 2, 7, 0), (2**31 + 5, 2, 6, 0), (3, 3, 5, 0), (2**32, 1, 2, 2))),
]


@check(LAB, "the same plans as the reference, step by step, on every arrival trace tried")
def check_same_as_reference(schedule):
    from ailab.generation import schedule as reference

    from hypothesis import strategies as st

    mine, ref = (lambda trace: _plans(schedule, trace)), (lambda trace: _plans(reference, trace))
    say = {"describe": _describe_trace, "compare": same_plans, "arg_names": ("trace",)}
    same_as_reference(mine, ref, _traces(), examples=300, **say)  # first: a difference shows on the smallest trace
    same_as_reference(
        mine, ref, st.just(_EDGES[0]).map(lambda t: (t,)), edges=[(t,) for t in _EDGES], examples=1, **say
    )
