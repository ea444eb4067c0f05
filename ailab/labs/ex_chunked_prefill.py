"""Exercise checks: chunked prefill, a token budget in the planning step (topics S2, H3).

The learner extends the planning step of chapter 5.2 (the scheduler-step lab's `schedule`, given in the notebook)
with a token budget: the contract of `ailab.generation.plan.schedule` with `max_num_batched_tokens`:
  schedule(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None)
      -> SchedulerOutput, `waiting`, `running` and `blocks` updated in place. With a budget B, a step computes at
      most B tokens:
        prefilling  a running request whose blocks hold more tokens than it has computed
                    (blocks.lengths[id] > req.num_computed_tokens) is still prefilling; which ones are is read
                    before any slot is given;
        decode      every other running request, oldest first, gets a slot (blocks.append) and a place in `decode`,
                    one token of the budget each; on OutOfBlocks the newest running request is preempted (5.2's
                    rule: blocks freed, front of the queue, `preempted`), a prefilling one too; a prefilling request
                    gets no slot and no decode;
        chunks      then each prefilling request still running, oldest first, while budget is left: (req, n) in
                    `prefill`, n the smaller of the tokens it has left to compute and the budget left;
        admission   then, while budget is left and a seat and blocks for ALL its tokens (prompt + output) are free,
                    the head of the queue: blocks allocated for all its tokens, to the end of `running`, (req, n) in
                    `prefill` with n the smaller of its tokens and the budget left; the first that does not fit
                    stops admission.
      Without a budget (None) it is 5.2's planner: every admitted prompt is computed whole in its step. The engine
      adds each chunk to req.num_computed_tokens (a preempted request starts again at 0) and samples a request's
      first token only in the step whose chunk completes its tokens.

The checks run the learner's planner INSIDE the real engine, `EngineCore(model, cache, max_running, planner=...,
max_num_batched_tokens=B)` over the tiny model, its allocator refusing with words what a plan should never ask
(WatchedBlocks). Every plan is judged before the engine runs it, from a snapshot of the queues, the blocks and each
request's computed tokens taken before the planning step:
  it is a SchedulerOutput of (request, whole number >= 1) chunks; the step computes at most B tokens (the decodes
  count, one each); every running request that decodes is decoded (or preempted): decodes are served before any
  chunk; a request still prefilling is never decoded (its first token would be sampled before its prompt is
  complete) and gets no slot; no chunk exceeds the tokens its request has left to compute; an admitted request's
  blocks hold all its tokens; a request is in the plan once; the queues are updated in place, a preempted request is
  in the queue without blocks, and after the plan the blocks held are exactly the running requests'.
The checks:
  tokens: the greedy tokens equal the engine's without a budget (ailab.generation.schedule, no chunking), for
      budgets from the seats to above the longest prompt, and without one;
  budget: the budget is used as the contract says: the prompts already prefilling get their chunks before anyone is
      admitted, oldest first, and no budget is left over while a prefilling prompt has tokens left or the head of
      the queue fits; a long prompt is spread over steps while the decodes beside it go on;
  chunks: each request's chunks add up to its tokens, and it makes its first token in the step of its last chunk;
  preemption: a pool too small for everyone, a prompt preempted while it is still prefilling and a request with
      output computed again in chunks: the same tokens;
  same_as_reference: the learner's planner and the reference (ailab.generation.schedule) side by side over
      generated traces (Hypothesis: prompts of 1 token to the pool's size, budgets from the seats to above the
      longest prompt and None, seats None and 1 to 4, blocks of 1 to 8 tokens, pools tight enough to preempt,
      arrivals at step 0 and later, ids in order, reversed, shuffled or beyond 2**31), each in the real Scheduler
      without the model (a plan never depends on a token's value): the plans, and the queues, blocks and computed
      tokens each leaves, must be the same at every step. A difference names the first step where they differ, the
      smallest trace found, and both plans.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import dataclass, field

import torch

from ailab.generation.engine_core import EngineCore
from ailab.generation.paged import BlockAllocator, OutOfBlocks, PagedKVCache
from ailab.generation.plan import SchedulerOutput
from ailab.generation.request import Request
from ailab.generation.scheduler import Scheduler
from ailab.labs.core import LabCheckFailed, check, expect, tiny_decoder, torch_threads, within_time
from ailab.labs.differential import same_as_reference, short
from ailab.labs.lab_scheduler_step import WatchedBlocks, same_plans

LAB = "ex_chunked_prefill"


def model():
    """One tiny_gpt('1m') decoder for every check (random weights: the plans are checked, not the text)."""
    return tiny_decoder(5)


def requests(spec, seed: int = 0) -> list[Request]:
    """Fresh requests from `spec`, a list of (prompt tokens, max_new_tokens, arrival step): request i gets id i."""
    g = torch.Generator().manual_seed(seed)
    return [Request(i, torch.randint(0, 256, (n,), generator=g).tolist(), m) for i, (n, m, _) in enumerate(spec)]


def arrivals(reqs, spec) -> dict[int, list[Request]]:
    out: dict[int, list[Request]] = {}
    for req, (_, _, at) in zip(reqs, spec):
        out.setdefault(at, []).append(req)
    return out


@functools.cache
@torch_threads(1)
def _unchunked(spec: tuple, seed: int, num_blocks: int, block_size: int, max_running: int | None) -> tuple:
    """The oracle: each request's greedy tokens from the engine's own planner without a budget (kept per trace)."""
    reqs = requests(spec, seed)
    m = model()
    core = EngineCore(m, PagedKVCache.for_model(m, num_blocks, block_size), max_running)
    for _ in core.run(arrivals(reqs, spec)):
        pass
    return tuple(tuple(r.output) for r in reqs)


def engine(schedule, num_blocks: int, block_size: int, max_running: int | None, max_num_batched_tokens: int | None):
    """The real engine with `schedule` as its planner, over the tiny model (for the notebook's last cell: your
    planner at work). Its plans are not judged here; the checks do that."""
    m = model()
    cache = PagedKVCache(m.n_layer, m.n_head, m.head_dim, WatchedBlocks(num_blocks, block_size))
    return EngineCore(m, cache, max_running, planner=schedule, max_num_batched_tokens=max_num_batched_tokens)


def _ids(reqs) -> list:
    return [r.id if isinstance(r, Request) else f"<{type(r).__name__}>" for r in reqs]


class _Before:
    """What the engine held when a planning step began: enough to judge the plan it returned."""

    def __init__(self, waiting, running, blocks: BlockAllocator, step: int):
        self.step = step
        self.waiting, self.running = _ids(waiting), _ids(running)  # oldest first; admission order
        self.tokens = {r.id: len(r.prompt) + len(r.output) for r in [*waiting, *running]}
        self.computed = {r.id: r.num_computed_tokens for r in running}
        self.held = {r.id: blocks.lengths.get(r.id, 0) for r in running}
        self.prefilling = [rid for rid in self.running if self.held[rid] > self.computed[rid]]  # oldest first
        self.decoding = [rid for rid in self.running if rid not in self.prefilling]
        self.kept = {r.id: (len(r.prompt), len(r.output), r.num_computed_tokens) for r in [*waiting, *running]}

    def left(self, rid) -> int:
        """Tokens the request has left to compute (all of them for a waiting one: it starts again at 0)."""
        return self.tokens[rid] - self.computed.get(rid, 0)

    def say(self, rid) -> str:
        return f"{self.computed.get(rid, 0)} of its {self.tokens[rid]} tokens computed"


@dataclass
class _Plan:
    """One planning step: the snapshot before it, the plan, and the engine's queues and blocks after it."""

    before: _Before
    plan: SchedulerOutput
    waiting: deque
    running: list
    blocks: BlockAllocator
    max_running: int | None
    budget: int | None
    what: str

    def say(self, text: str) -> str:
        return f"{self.what}, step {self.before.step + 1}: {text}"

    @property
    def chunks(self) -> list[tuple]:
        return [(r.id, n) for r, n in self.plan.prefill]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.chunks) + len(self.plan.decode)


def _judge_shape(p: _Plan) -> None:
    plan = p.plan
    expect(
        isinstance(plan, SchedulerOutput),
        p.say(
            f"your schedule returned {short(plan)}; return a SchedulerOutput (from ailab.generation) with its "
            "prefill, decode and preempted lists"
        ),
    )
    for name in ("prefill", "decode", "preempted"):
        expect(
            isinstance(getattr(plan, name), list),
            p.say(f"plan.{name} is {short(getattr(plan, name))}; it is a list"),
        )
    for entry in plan.prefill:
        expect(
            isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], Request),
            p.say(f"plan.prefill holds {short(entry)}; each entry is a pair (request, tokens to compute)"),
        )
        n = entry[1]
        expect(
            isinstance(n, int) and not isinstance(n, bool),
            p.say(f"plan.prefill gives request {entry[0].id} {short(n)} tokens; the count is a whole number (int)"),
        )
        expect(
            n >= 1,
            p.say(
                f"plan.prefill gives request {entry[0].id} a chunk of {n} tokens: every chunk computes at least one "
                "token. When the budget is spent, stop: no more chunks and no more admissions in this step"
            ),
        )
    for name in ("decode", "preempted"):
        bad = [x for x in getattr(plan, name) if not isinstance(x, Request)]
        expect(not bad, p.say(f"plan.{name} holds {short(bad[0])}; it is a list of requests") if bad else "")


def _judge_contract(p: _Plan) -> None:
    """What every plan must hold, or the engine could not run it (or would sample a token too early)."""
    _judge_shape(p)
    plan, b = p.plan, p.before
    for req in [*p.waiting, *p.running]:
        if not isinstance(req, Request) or req.id not in b.kept:
            continue
        was = b.kept[req.id]
        now = (len(req.prompt), len(req.output), req.num_computed_tokens)
        expect(
            now[2] == was[2],
            p.say(
                f"your plan changed request {req.id}'s num_computed_tokens from {was[2]} to {now[2]}: the engine adds "
                "each chunk after it has run it (and sets it back to 0 on a preemption); the plan only reads it"
            ),
        )
        expect(
            now[:2] == was[:2],
            p.say(
                f"your plan changed request {req.id}'s prompt or output (from {was[0]} and {was[1]} tokens to "
                f"{now[0]} and {now[1]}): the engine owns those; the plan only reads them"
            ),
        )
    chunks, decoded, preempted = p.chunks, _ids(plan.decode), _ids(plan.preempted)
    chunked = [rid for rid, _ in chunks]
    running_now, waiting_now = _ids(p.running), _ids(p.waiting)
    for rid in chunked:
        expect(chunked.count(rid) == 1, p.say(f"request {rid} is in plan.prefill twice: one chunk a step at most"))
        expect(
            rid in b.waiting or rid in b.running,
            p.say(f"request {rid} is in plan.prefill but was neither waiting nor running"),
        )
    for rid in decoded:
        expect(decoded.count(rid) == 1, p.say(f"request {rid} is in plan.decode twice: one token a step each"))
        expect(
            rid not in b.prefilling,
            p.say(
                f"request {rid} is still prefilling ({b.say(rid)}) and your plan decodes it: the engine would sample "
                "a token for it before its prompt is complete. A request whose blocks hold more tokens than it has "
                "computed gets no slot and no decode, only its next chunk"
            ),
        )
        expect(
            rid not in chunked,
            p.say(
                f"request {rid} is in plan.decode and in plan.prefill: a request either decodes (its tokens all "
                "computed) or computes a chunk, never both in one step"
                if rid in b.running
                else f"request {rid} was admitted in this step and is in plan.decode too: an admitted request "
                "computes its first chunk; it decodes only once all its tokens are computed"
            ),
        )
        expect(
            rid in b.running and rid not in preempted,
            p.say(
                f"request {rid} is in plan.decode but " + ("was preempted" if rid in preempted else "was not running")
            ),
        )
    for rid in b.decoding:
        if rid in decoded or rid in preempted:
            continue
        expect(
            rid not in chunked,
            p.say(
                f"request {rid} had computed all its tokens ({b.say(rid)}) and decodes, but your plan gave it a "
                f"chunk of {dict(chunks).get(rid)} instead: a request still prefilling is one whose blocks hold more "
                "tokens than it has computed, found before any slot is given"
            ),
        )
        others = f", while it computed {sum(n for _, n in chunks)} tokens of chunks" if chunks else ""
        expect(
            False,
            p.say(
                f"request {rid} decodes ({b.say(rid)}) and your plan gave it no token in this step{others}: every "
                "running request that decodes is served first, one token each, before any chunk or admission"
            ),
        )
    for rid, n in chunks:
        left = b.left(rid) if rid in b.running else b.tokens[rid]
        expect(
            n <= left,
            p.say(
                f"request {rid} gets a chunk of {n} tokens but has only {left} left to compute "
                f"({b.say(rid) if rid in b.running else 'it is admitted, so all its tokens'}): a chunk is the smaller "
                "of what is left of the request and what is left of the budget"
            ),
        )
    if p.budget is not None:
        parts = f"{len(decoded)} decode(s)" + (f" and chunks {chunks}" if chunks else "")
        expect(
            p.total <= p.budget,
            p.say(
                f"your plan computes {p.total} tokens ({parts}) and max_num_batched_tokens is {p.budget}: the decodes "
                "count, one token each, and the chunks share what is left of the budget after them, never more (a "
                "prompt longer than what is left is computed a chunk at a time, over several steps)"
            ),
        )
    for rid, n in chunks:
        if rid in b.waiting:
            held = p.blocks.lengths.get(rid)
            expect(
                held == b.tokens[rid],
                p.say(
                    f"your plan admitted request {rid} with a chunk of {n} tokens, but its blocks hold {held}: "
                    f"admission reserves blocks for all its {b.tokens[rid]} tokens at once, so that its later chunks "
                    "never need a block they could fail to get (and so that it counts as still prefilling)"
                ),
            )
            expect(
                rid in running_now and rid not in waiting_now,
                p.say(
                    f"request {rid} is admitted but "
                    + ("still in waiting" if rid in waiting_now else "not in running")
                    + ": an admitted request leaves the queue for the end of `running`. Update the engine's "
                    "`waiting` and `running` in place"
                ),
            )
    for rid in b.prefilling:
        if rid in running_now:
            expect(
                p.blocks.lengths.get(rid) == b.held[rid],
                p.say(
                    f"request {rid} is still prefilling and your plan changed its blocks from {b.held[rid]} tokens to "
                    f"{p.blocks.lengths.get(rid)}: it holds slots for all its tokens since its admission; it needs "
                    "no new slot until it decodes"
                ),
            )
    for rid in decoded:
        held = p.blocks.lengths.get(rid)
        expect(
            held == b.held[rid] + 1,
            p.say(
                f"request {rid} is in plan.decode but its blocks hold {held} tokens; with the slot for its next token "
                f"they hold {b.held[rid] + 1}: one slot (blocks.append) per decode"
            ),
        )
    for rid in preempted:
        expect(
            rid in b.running and rid not in running_now and rid in waiting_now and rid not in p.blocks.tables,
            p.say(
                f"request {rid} is in plan.preempted, so it must have been running, and be back in `waiting` "
                "holding no blocks (freed)"
            ),
        )
    for rid in b.running:
        expect(
            rid in running_now or rid in preempted,
            p.say(f"request {rid} was running and your plan left it neither running nor in plan.preempted"),
        )
    expect(
        p.max_running is None or len(p.running) <= p.max_running,
        p.say(f"{len(p.running)} requests run after your plan, max_running is {p.max_running}"),
    )
    held = set(p.blocks.tables)
    expect(
        held == set(running_now),
        p.say(f"after your plan, blocks are held by requests {sorted(held)} and the running ones are {running_now}"),
    )
    unplanned = [rid for rid in b.waiting if rid in running_now and rid not in chunked]
    expect(
        not unplanned,
        p.say(
            f"request(s) {unplanned} moved from `waiting` to `running` without a chunk in plan.prefill: an admission "
            "computes its first chunk in the step that admits it. When the budget is spent, stop admitting: a "
            "request admitted with nothing to compute only holds a seat and blocks"
        ),
    )
    lost = set(b.waiting) - set(waiting_now) - set(chunked)
    expect(not lost, p.say(f"request(s) {sorted(lost)} left the queue without being admitted: they are lost"))
    expect(
        plan.prefill or plan.decode or not (b.waiting or b.running),
        p.say(
            f"your plan runs nothing while requests {b.waiting} wait and {b.running} run: the engine would take the "
            "same step for ever. There is always room for a decode, a chunk or an admission (a budget of None means no "
            "limit)"
        ),
    )


def _judge_budget_use(p: _Plan) -> None:
    """The budget shared in the contract's order: prompts already prefilling first, oldest first, then admissions;
    nothing left over while a prefilling prompt has tokens left or the head of the queue fits."""
    b, chunks = p.before, dict(p.chunks)
    running_now = _ids(p.running)
    admitted = [rid for rid in chunks if rid in b.waiting]
    short_of = [(rid, chunks.get(rid, 0), b.left(rid)) for rid in b.prefilling if rid in running_now]
    short_of = [(rid, got, need) for rid, got, need in short_of if got < need]
    if admitted and short_of:
        rid, got, need = short_of[0]
        expect(
            False,
            p.say(
                f"your plan admitted request(s) {admitted} while request {rid}, still prefilling, got "
                f"{got or 'no'} token(s) of the {need} it has left: the prompts already running get their next "
                "chunks first, oldest first; admissions share only what is left of the budget after them"
            ),
        )
    left = math.inf if p.budget is None else p.budget - p.total
    for rid, got, need in short_of:
        later = [r for r in b.prefilling[b.prefilling.index(rid) + 1 :] if chunks.get(r)]
        expect(
            not later,
            p.say(
                f"request {rid} (still prefilling, admitted before request {later[0] if later else ''}) got "
                f"{got or 'no'} token(s) of the {need} it has left, and the later one a chunk: the chunks go to the "
                "prompts still prefilling oldest first"
            ),
        )
        expect(
            left <= 0,
            p.say(
                f"{left} token(s) of the budget were left after your plan, and request {rid} (still prefilling) got "
                f"{got or 'no'} token(s) of the {need} it has left: a chunk takes all that is left of its request, "
                "up to what is left of the budget"
            ),
        )
    if left <= 0 or not p.waiting or (p.max_running is not None and len(p.running) >= p.max_running):
        return
    head = p.waiting[0]
    if not isinstance(head, Request):
        return
    need = p.blocks.blocks_for(len(head.prompt) + len(head.output))
    free = len(p.blocks.free_blocks)
    seats = "no seat limit" if p.max_running is None else f"{len(p.running)} of {p.max_running} seats taken"
    expect(
        need > free,
        p.say(
            f"after your plan {left} token(s) of the budget were left, with {seats} and {free} blocks free, and "
            f"request {head.id} at the head of the queue (needing {need} block(s)) was not admitted: admit while "
            "budget, a seat and blocks are left, each admission getting what is left of the budget"
        ),
    )


_PLAN_LIMIT_S = 5.0  # one planning step; the reference's takes well under a millisecond


class _Watched:
    """The learner's planning step as the engine's planner: a snapshot before each call, then the plan judged
    before the engine runs it, and recorded."""

    def __init__(self, fn, run: "_Run", what: str, judges=()):
        self.fn, self.run, self.what, self.judges = fn, run, what, judges

    def __call__(self, waiting, running, blocks, max_running, policy, max_num_batched_tokens=None):
        before = _Before(waiting, running, blocks, self.run.steps)
        where = f"{self.what}, step {self.run.steps + 1}"
        try:
            budget = {} if max_num_batched_tokens is None else {"max_num_batched_tokens": max_num_batched_tokens}
            plan = within_time(
                lambda: self.fn(waiting, running, blocks, max_running, policy, **budget),
                _PLAN_LIMIT_S,
                f"your schedule did not return within {_PLAN_LIMIT_S:g} s: look for a loop that never ends "
                "(an index that does not move past a request it skips, or a loop over the queue that neither takes "
                "its head nor stops)",
            )
        except NotImplementedError:
            raise
        except OutOfBlocks as e:
            raise LabCheckFailed(
                f"{where}: blocks.append raised OutOfBlocks ({e}) and your plan let it escape: when no block is free, "
                "preempt the newest running request (free its blocks, send it back to the front of the queue) and "
                "try again"
            ) from None
        except LabCheckFailed as e:  # the allocator refused what the plan asked, or the plan took too long
            raise LabCheckFailed(f"{where}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
            raise LabCheckFailed(f"{where}: your schedule raised {type(e).__name__}: {e}") from None
        p = _Plan(before, plan, waiting, running, blocks, max_running, max_num_batched_tokens, self.what)
        _judge_contract(p)
        for judge in self.judges:
            judge(p)
        self.run.plans.append((p.chunks, _ids(plan.decode), _ids(plan.preempted)))
        return plan


@dataclass
class _Run:
    """What a drive saw: each step's plan (chunks, decodes, preempted), who made a token, the finished."""

    core: EngineCore | None = None
    plans: list = field(default_factory=list)
    made: list = field(default_factory=list)  # per step: the ids that got a token
    finished: list = field(default_factory=list)
    steps: int = 0


@torch_threads(1)
def _drive(
    schedule,
    what: str,
    spec,
    *,
    num_blocks: int,
    block_size: int,
    max_running: int | None,
    budget: int | None,
    seed: int = 0,
    judges=(),
    max_steps: int = 600,
) -> tuple[_Run, list[Request]]:
    """Run the real engine with the learner's `schedule` as its planner until every request is done, each plan
    judged; after each step the blocks held must be exactly the running requests'."""
    m = model()
    cache = PagedKVCache(m.n_layer, m.n_head, m.head_dim, WatchedBlocks(num_blocks, block_size))
    run = _Run()
    core = EngineCore(
        m, cache, max_running, planner=_Watched(schedule, run, what, judges), max_num_batched_tokens=budget
    )
    run.core, reqs = core, requests(spec, seed)
    steps = core.run(arrivals(reqs, spec))
    while True:
        try:
            report = next(steps, None)
        except (NotImplementedError, LabCheckFailed):
            raise
        except Exception as e:  # noqa: BLE001 - a plan the engine cannot run
            raise LabCheckFailed(
                f"{what}, step {run.steps + 1}: the engine could not run your plan ({type(e).__name__}: {e})"
            ) from None
        if report is None:
            break
        run.steps += 1
        run.finished += report.done
        run.made.append([o.request_id for o in report.outputs])
        held, running = set(cache.allocator.tables), set(_ids(core.running))
        expect(
            held == running,
            f"{what}, after step {run.steps}: blocks are held by requests {sorted(held)} but the running ones are "
            f"{sorted(running)}",
        )
        expect(
            run.steps <= max_steps,
            f"{what}: not done after {max_steps} steps ({len(core.waiting)} waiting, {len(core.running)} running): "
            "does every step decode every running request, give the prompts still prefilling their chunks, and "
            "admit the head of the queue when budget, a seat and its blocks are left?",
        )
    return run, reqs


def _same_tokens(reqs, spec, seed, num_blocks, block_size, max_running, what: str) -> None:
    want = _unchunked(tuple(spec), seed, num_blocks, block_size, max_running)
    for req, tokens in zip(reqs, want):
        expect(
            tuple(req.output) == tokens,
            f"{what}: request {req.id} made tokens {req.output[:8]}... where the engine without a budget makes "
            f"{list(tokens[:8])}...: did each chunk start where the last one ended, and did the request decode only "
            "after its last chunk?",
        )


# A mixed trace: short prompts decoding, long ones arriving among them: (prompt tokens, max_new_tokens, step).
_MIXED = [(6, 12, 0), (9, 14, 0), (45, 6, 2), (12, 9, 3), (70, 5, 4), (4, 10, 6), (23, 3, 6)]


@check(LAB, "the tokens: the same greedy tokens as the engine without a budget, for every budget")
def check_tokens(schedule):
    pool = {"num_blocks": 64, "block_size": 8, "max_running": 4}
    for budget in (4, 13, 128, None):
        what = f"seven requests (prompts of 4 to 70 tokens), four seats, max_num_batched_tokens={budget}"
        run, reqs = _drive(schedule, what, _MIXED, budget=budget, **pool)
        expect(
            sorted(_ids(run.finished)) == _ids(reqs),
            f"{what}: every request should finish once; finished: {sorted(_ids(run.finished))}",
        )
        _same_tokens(reqs, _MIXED, 0, what=what, **pool)
        blocks = run.core.alloc
        expect(len(blocks.free_blocks) == blocks.num_blocks, f"{what}: at the end every block should be free again")


@check(LAB, "the budget: decodes first, then the chunks of the prompts prefilling, then admissions, none left over")
def check_budget(schedule):
    # Three short requests decode while a 63-token and a 37-token prompt arrive together: with a budget of 11 and
    # three decodes, 8 tokens a step go to the long prompt, then to the next; seats for five.
    spec = [(5, 30, 0), (7, 30, 0), (3, 30, 0), (63, 4, 2), (37, 4, 2), (9, 6, 3), (2, 5, 9)]
    what = "three requests decoding, a 63-token and a 37-token prompt arriving, max_num_batched_tokens=11"
    run, reqs = _drive(
        schedule, what, spec, num_blocks=48, block_size=8, max_running=5, budget=11, judges=(_judge_budget_use,)
    )
    steps_of_3 = [k for k, (chunks, _, _) in enumerate(run.plans) if 3 in dict(chunks)]
    expect(
        len(steps_of_3) >= math.ceil(63 / 11),
        f"{what}: the 63-token prompt was computed in {len(steps_of_3)} step(s); at most 11 tokens a step, it needs "
        f"{math.ceil(63 / 11)} or more",
    )
    _same_tokens(reqs, spec, 0, 48, 8, 5, what=what)


@check(LAB, "the chunks: a prompt computed in pieces that add up, its first token with its last chunk")
def check_chunks(schedule):
    # Budgets that divide no prompt evenly, one seat or two, blocks of 1 and of 4 tokens.
    cases = [
        ([(17, 3, 0), (10, 4, 0), (1, 3, 1)], 64, 1, 2, 3),
        ([(23, 5, 0), (3, 6, 1), (14, 2, 1)], 16, 4, 1, 5),
        ([(9, 4, 0), (9, 4, 0), (30, 2, 2)], 40, 4, 2, 7),
    ]
    for spec, num_blocks, block_size, max_running, budget in cases:
        what = (
            f"requests {[(p, m) for p, m, _ in spec]} (prompt, max_new_tokens), max_running={max_running}, "
            f"max_num_batched_tokens={budget}"
        )
        run, reqs = _drive(
            schedule, what, spec, num_blocks=num_blocks, block_size=block_size, max_running=max_running, budget=budget
        )
        for req in reqs:
            sizes = [dict(chunks)[req.id] for chunks, _, _ in run.plans if req.id in dict(chunks)]
            expect(
                sum(sizes) == len(req.prompt),
                f"{what}: request {req.id}'s chunks were {sizes}, {sum(sizes)} tokens; its prompt has "
                f"{len(req.prompt)}: the chunks cover the prompt once, each starting where the last one ended",
            )
            last = max(k for k, (chunks, _, _) in enumerate(run.plans) if req.id in dict(chunks))
            first_token = next((k for k, made in enumerate(run.made) if req.id in made), None)
            expect(
                first_token == last,
                f"{what}: request {req.id}'s last chunk ran in step {last + 1} but its first token came in step "
                f"{'never' if first_token is None else first_token + 1}: a request decodes only after its prompt is "
                "complete",
            )
        _same_tokens(reqs, spec, 0, num_blocks, block_size, max_running, what=what)


@check(LAB, "preemption: a pool too small for everyone, prompts preempted while prefilling, the same tokens")
def check_preemption(schedule):
    # The first: the 30-token prompt is preempted with 29 of its tokens computed, when the two older requests'
    # growth needs its blocks. The second: a request preempted after it made tokens is computed again, prompt and
    # output, in three chunks of the budget of 4.
    cases = [
        ([(4, 22, 0), (6, 20, 0), (30, 6, 1), (5, 14, 2), (18, 8, 4)], 14, 4, 3, 6),
        ([(15, 12, 4), (10, 8, 1), (7, 7, 4)], 10, 4, 3, 4),
    ]
    for spec, num_blocks, block_size, max_running, budget in cases:
        what = (
            f"{len(spec)} requests over {num_blocks} blocks of {block_size} tokens, {max_running} seats, "
            f"max_num_batched_tokens={budget}"
        )
        run, reqs = _drive(
            schedule, what, spec, num_blocks=num_blocks, block_size=block_size, max_running=max_running, budget=budget
        )
        expect(
            any(preempted for _, _, preempted in run.plans),
            f"{what}: the requests outgrow the {num_blocks} blocks, yet nobody was preempted: when blocks.append "
            "finds no free block, preempt the newest running request",
        )
        _same_tokens(reqs, spec, 0, num_blocks, block_size, max_running, what=what)


# --------------------------------------------------------------------------- the trace check: the reference's plans


def _rid(x):
    return x.id if isinstance(x, Request) else f"<{type(x).__name__}>"


def _state(waiting, running, blocks) -> tuple:
    """What the engine can see between plans: the queues (ids, in order; each running request's computed and
    total tokens), the free blocks, and each table's blocks and tokens."""
    held = sorted(
        ((k, len(t), blocks.lengths.get(k)) for k, t in blocks.tables.items()), key=lambda h: (repr(type(h[0])), h[0])
    )
    run = tuple(
        (r.id, r.num_computed_tokens, len(r.prompt) + len(r.output)) if isinstance(r, Request) else (_rid(r), 0, 0)
        for r in running
    )
    return tuple(_rid(r) for r in waiting), run, len(blocks.free_blocks), tuple(held)


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


def _made(plan: SchedulerOutput) -> dict:
    """The executor's rule: every decode makes a token; a chunk makes one only when it completes its tokens."""
    tokens = {r.id: 0 for r in plan.decode}
    for req, n in plan.prefill:
        if req.num_computed_tokens + n == len(req.prompt) + len(req.output):
            tokens[req.id] = 0
    return tokens


def _plans(schedule, trace, max_steps: int = 3000) -> list:
    """Run `schedule` over `trace` (num_blocks, block_size, max_running, budget, requests) in the real Scheduler
    without the model, arrivals submitted before each step's plan; record each step: the state before it, the plan,
    the state after it."""
    num_blocks, block_size, max_running, budget, reqs = trace
    blocks = BlockAllocator(num_blocks, block_size)
    sched = Scheduler(blocks, 10**9, max_running, "continuous", schedule, lambda: 0.0, budget)
    pending: dict = {}
    for rid, prompt, new, at in reqs:
        pending.setdefault(at, []).append(Request(rid, [0] * prompt, new))
    steps: list = []
    while sched.waiting or sched.running or pending:
        for req in pending.pop(len(steps), []):
            sched.add_request(req)
        before = _state(sched.waiting, sched.running, blocks)
        try:
            plan = schedule(sched.waiting, sched.running, blocks, max_running, "continuous", **sched.budget)
        except (NotImplementedError, LabCheckFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the learner's code may raise anything: recorded, then compared
            steps.append({"before": before, "bad": f"raised {type(e).__name__}: {e}"})
            return steps
        entry = {"before": before, **_plan_record(plan)}
        steps.append(entry)
        if "bad" in entry:
            return steps
        entry["after"] = _state(sched.waiting, sched.running, blocks)
        try:
            sched.update_from_output(plan, _made(plan))
        except Exception as e:  # noqa: BLE001 - a plan the engine cannot apply
            steps.append({"before": None, "bad": f"the engine could not apply that plan ({type(e).__name__}: {e})"})
            return steps
        if len(steps) >= max_steps:
            steps.append({"before": None, "bad": f"not done after {max_steps} steps"})
            return steps
    return steps


def _say_state(state) -> str:
    waiting, running, free, held = state
    run = ", ".join(f"{rid} ({c} of {t} computed)" for rid, c, t in running)
    tables = ", ".join(f"{k}: {n} token{'s' * (n != 1)} in {b} block{'s' * (b != 1)}" for k, b, n in held)
    return f"waiting {list(waiting)}, running [{run}], {free} block{'s' * (free != 1)} free" + (
        f" (held: {tables})" if tables else ""
    )


def _same_plans(mine, ref) -> str | None:
    """The first step where the plans (or the queues, blocks and computed tokens they leave) differ."""
    return same_plans(mine, ref, _say_state)


def _describe_trace(trace) -> str:
    num_blocks, block_size, max_running, budget, reqs = trace
    each = "; ".join(f"request {rid} (prompt {p}, max_new_tokens {m}) at step {at}" for rid, p, m, at in reqs)
    return (
        f"a trace of {len(reqs)} request(s) over {num_blocks} block(s) of {block_size} token(s), "
        f"max_running={max_running}, max_num_batched_tokens={budget}: {each}"
    )


def _traces():
    """Hypothesis: traces the engine accepts (every request fits the whole pool at its longest, as
    Scheduler.add_request demands; a budget of at least max_running, as the Scheduler demands): prompts of 1 token to
    the pool's size (at most 48), blocks of 1 to 8 tokens, pools of 1 to 24 blocks (tight ones preempt), seats None
    or 1 to 4, budgets None or from the seats to above the longest prompt, arrivals at step 0 and later, ids in order,
    reversed, shuffled or beyond 2**31."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        block_size = d(st.sampled_from([1, 2, 4, 8]))
        max_running = d(st.one_of(st.none(), st.integers(1, 4)))
        num_blocks = d(st.integers(2 if block_size == 1 else 1, 24))
        cap = min(num_blocks * block_size, 48)
        specs = []
        for _ in range(d(st.integers(1, 6))):
            prompt = d(st.integers(1, cap - 1))
            specs.append((prompt, d(st.integers(1, min(10, cap - prompt))), d(st.integers(0, 10))))
        lo, longest = max_running or 1, max(p for p, _, _ in specs)
        budget = d(st.one_of(st.none(), st.integers(lo, lo + 3), st.integers(lo, max(lo, longest + 2))))
        n = len(specs)
        order = d(st.sampled_from(["in order", "reversed", "shuffled", "beyond 2**31"]))
        if order == "shuffled":
            ids = d(st.permutations(range(n)))
        elif order == "in order":
            ids = list(range(n))
        else:
            ids = [(2**31 + 7 * (n - i) if order == "beyond 2**31" else n - 1 - i) for i in range(n)]
        return (num_blocks, block_size, max_running, budget, tuple((ids[i], *specs[i]) for i in range(n)))

    return draw().map(lambda trace: (trace,))


# The contract's corners, tried first (and shown as they are): a budget of 1 with one seat; a budget equal to the
# prompt; a prompt still prefilling preempted by the older decodes' growth; a budget spent by the decodes alone;
# no budget; ids beyond 2**31 against arrival order.
_EDGES = [
    (8, 4, 1, 1, ((0, 5, 3, 0), (1, 2, 2, 0))),
    (16, 4, None, 6, ((0, 6, 4, 0), (1, 6, 3, 0), (2, 1, 2, 1))),
    (6, 2, None, 4, ((0, 2, 7, 0), (1, 2, 7, 0), (2, 7, 2, 1))),
    (32, 4, 3, 3, ((0, 2, 6, 0), (1, 2, 6, 0), (2, 2, 6, 0), (3, 9, 2, 1))),
    (12, 4, 2, None, ((0, 9, 4, 0), (1, 20, 3, 0), (2, 3, 5, 2))),
    (10, 2, 3, 5, ((2**40, 3, 7, 0), (2**31 + 5, 8, 6, 0), (3, 5, 5, 1), (2**32, 2, 2, 2))),
]


@check(LAB, "the same plans as the reference, step by step, on every trace tried")
def check_same_as_reference(schedule):
    from ailab.generation import schedule as reference

    from hypothesis import strategies as st

    mine, ref = (lambda trace: _plans(schedule, trace)), (lambda trace: _plans(reference, trace))
    say = {"describe": _describe_trace, "compare": _same_plans, "arg_names": ("trace",)}
    same_as_reference(mine, ref, _traces(), examples=200, **say)  # first: a difference shows on the smallest trace
    same_as_reference(
        mine, ref, st.just(_EDGES[0]).map(lambda t: (t,)), edges=[(t,) for t in _EDGES], examples=1, **say
    )
