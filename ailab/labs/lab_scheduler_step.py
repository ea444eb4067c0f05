"""Lab checks: one step of continuous batching under a KV-block budget (topics H3, S2).

The learner writes
  scheduler_step(state) -> None
      one iteration over `state` (an EngineState: waiting, running, blocks, max_running, cancelled, and the
      model calls prefill / decode / finish):
        1. drop cancelled requests, waiting or running, giving back their blocks;
        2. admit waiting requests oldest first while a seat (max_running) and blocks for their tokens are free,
           and prefill each (its first token comes out of the prefill); stop at the first that does not fit;
        3. give every running request a slot for its next token (blocks.append); when none is free, preempt the
           newest running request (free its blocks, put it back at the front of the queue);
        4. decode one token for every running request, in one call;
        5. retire every request that has its max_new_tokens: free its blocks, then finish it.

The checks are derived from what the step must guarantee:
  the tokens equal one-at-a-time greedy generation for a mixed trace; blocks are never asked for beyond what is
  free, and after every step the blocks held are exactly those of the running requests (none leaked on finish,
  cancel or preemption); max_running is never exceeded; each prompt is prefilled once (twice only after a
  preemption) and each step decodes every running request in one call; a long request at the head of the queue
  is not overtaken forever by short ones; a request of one token finishes after its prefill; a pool too small
  for everyone preempts instead of failing.
Greedy tokens come out the same whatever the policy, so the policy is checked step by step (a snapshot before
each step, judged after it):
  admission: the requests admitted are the head of the queue, in order, and at least as many as the free seats
      and free blocks allowed: a seat freed while others still run is filled at the next step (static batching,
      which waits for the whole batch to end, and one admission per step both fail);
  preemption: every request sent back is newer than every request still running, goes back to the front of the
      queue (oldest of them first, ahead of those already waiting), and no more are sent back than needed (the
      step does not end with enough free blocks for the oldest of them to have kept running);
  tokens per step: every running request gets exactly one new token per step, two in the step that admits it
      (the prefill's and the decode's): none left out of the decode, none given two.
"""

from __future__ import annotations

import functools
from collections import deque

import torch

from ailab.generation.decode import decode_paged, next_token, prefill_paged
from ailab.generation.paged import BlockAllocator, OutOfBlocks, PagedKVCache
from ailab.generation.request import Request, RequestState
from ailab.labs.core import LabCheckFailed, check, expect, tiny_decoder, torch_threads

LAB = "lab_scheduler_step"


def model():
    return tiny_decoder(5)


class BudgetViolation(LabCheckFailed):
    pass


class WatchedBlocks(BlockAllocator):
    """The real allocator, refusing with words what the step should never ask."""

    def allocate(self, seq, tokens):
        if not self.can_allocate(tokens):
            raise BudgetViolation(
                f"request {seq} was admitted with {tokens} tokens ({self.blocks_for(tokens)} blocks) "
                f"while {len(self.free_blocks)} blocks were free: check blocks.can_allocate() first, "
                "and stop admitting at the first request that does not fit"
            )
        return super().allocate(seq, tokens)

    def free(self, seq):
        if seq not in self.tables:
            raise BudgetViolation(f"request {seq} was freed twice (or never held blocks)")
        super().free(seq)


class EngineState:
    """What the learner's step works on: the queues, the blocks, and the model calls (which also count)."""

    def __init__(self, num_blocks: int = 64, block_size: int = 8, max_running: int = 4):
        m = model()
        self.blocks = WatchedBlocks(num_blocks, block_size)
        self.cache = PagedKVCache(m.n_layer, m.n_head, m.head_dim, self.blocks)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: list[Request] = []
        self.cancelled: set[int] = set()
        self.max_running = max_running
        self.prefills: list[tuple[int, int]] = []  # (request id, tokens) per prefill
        self.decodes: list[list[int]] = []  # request ids per decode call
        self.steps = 0

    def prefill(self, req: Request) -> None:
        """Run the request's prompt (and what it had generated, after a preemption) through the model; its
        blocks must be allocated for exactly those tokens. Appends the next token to req.output."""
        tokens = req.prompt + req.output
        if self.blocks.lengths.get(req.id) != len(tokens):
            raise LabCheckFailed(
                f"prefill of request {req.id}: allocate blocks for its {len(tokens)} tokens first "
                f"(blocks.allocate(req.id, {len(tokens)}))"
            )
        logits = prefill_paged(model(), self.cache.view([req.id], len(tokens)), torch.tensor([tokens]))  # (1, vocab)
        req.output.append(int(next_token(logits)[0, 0]))
        req.state = RequestState.RUNNING
        self.prefills.append((req.id, len(tokens)))

    def decode(self, reqs: list[Request]) -> None:
        """One token for each of `reqs`, in one forward pass; each must have a slot for it (blocks.append)."""
        if not reqs:
            return
        for r in reqs:
            want = len(r.prompt) + len(r.output)
            if self.blocks.lengths.get(r.id) != want:
                raise LabCheckFailed(
                    f"decode of request {r.id}: it needs a slot for its next token first "
                    f"(blocks.append(req.id)); its blocks hold {self.blocks.lengths.get(r.id)} "
                    f"tokens, {want} are needed"
                )
        last = torch.tensor([[r.output[-1]] for r in reqs])  # (B, 1)
        logits = decode_paged(model(), self.cache.view([r.id for r in reqs], 1), last)  # (B, vocab)
        for r, tok in zip(reqs, next_token(logits)[:, 0].tolist()):
            r.output.append(int(tok))
        self.decodes.append([r.id for r in reqs])

    def finish(self, req: Request) -> None:
        if req.id in self.blocks.tables:
            raise LabCheckFailed(f"request {req.id} finished while it still held its blocks: free them first")
        req.state = RequestState.FINISHED
        self.finished.append(req)

    def submit(self, req: Request) -> None:
        self.waiting.append(req)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running


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


def _held_matches_running(state: EngineState, what: str) -> None:
    held = set(state.blocks.tables)
    running = {r.id for r in state.running}
    expect(
        held == running,
        f"{what}, after step {state.steps}: blocks are held by requests {sorted(held)} but the "
        f"running ones are {sorted(running)}"
        + (
            ". Finished, cancelled and preempted requests give their blocks back (blocks.free)"
            if held - running
            else ". A running request must hold its blocks"
        ),
    )
    expect(
        len(state.running) <= state.max_running,
        f"{what}: {len(state.running)} requests running, max_running is {state.max_running}",
    )


class _Before:
    """What the state held when a step began: enough to judge what the step chose."""

    def __init__(self, state: EngineState):
        self.running = [r.id for r in state.running if r.id not in state.cancelled]
        self.queue = [r for r in state.waiting if r.id not in state.cancelled]  # oldest first
        self.outputs = {r.id: len(r.output) for r in list(state.running) + list(state.waiting)}
        self.free = len(state.blocks.free_blocks) + sum(
            len(state.blocks.tables.get(r.id, ())) for r in state.running if r.id in state.cancelled
        )
        self.prefills, self.decodes = len(state.prefills), len(state.decodes)

    def admitted(self, state: EngineState) -> list[int]:
        """The waiting requests this step prefilled, in the order it did."""
        queued, out = {r.id for r in self.queue}, []
        for rid, _ in state.prefills[self.prefills :]:
            if rid in queued and rid not in out:
                out.append(rid)
        return out


@torch_threads(1)
def _drive(scheduler_step, state: EngineState, what: str, max_steps: int = 2000, arrivals=None, judges=()):
    """Run steps until every request is done; after each step, `judge(before, state, what)` for each of `judges`."""
    arrivals = dict(arrivals or {})
    while not state.idle or arrivals:
        for r in arrivals.pop(state.steps, []):
            state.submit(r)
        before = _Before(state)
        scheduler_step(state)
        state.steps += 1
        expect(
            len(state.decodes) - before.decodes <= 1,
            f"{what}: step {state.steps} called decode {len(state.decodes) - before.decodes} times; one call "
            "decodes every running request at once",
        )
        _held_matches_running(state, what)
        for judge in judges:
            judge(before, state, what)
        expect(state.steps <= max_steps, f"{what}: not done after {max_steps} steps; does every step make progress?")


def _judge_admission(before: _Before, state: EngineState, what: str) -> None:
    """Oldest first, and every seat filled that can be: a request that fits is not left waiting for the running
    ones to finish (that is static batching)."""
    admitted, queue = before.admitted(state), [r.id for r in before.queue]
    expect(
        admitted == queue[: len(admitted)],
        f"{what}, step {state.steps}: the queue was {queue} (oldest first) and your step admitted {admitted}: "
        "admit from the head of the queue, in order",
    )
    seats, free, fits = state.max_running - len(before.running), before.free, []
    for r in before.queue[: max(seats, 0)]:
        need = state.blocks.blocks_for(len(r.prompt) + before.outputs[r.id])
        if need > free:
            break
        free -= need
        fits.append(r.id)
    expect(
        len(admitted) >= len(fits),
        f"{what}, step {state.steps}: the step began with {seats} free seat(s) of {state.max_running}, "
        f"{before.free} free blocks and requests {fits} at the head of the queue, all fitting; your step admitted "
        f"{admitted or 'nobody'} while requests {before.running} ran. Fill a freed seat at once, while the others "
        "still run (continuous batching): waiting for the running batch to finish first is static batching",
    )


def _judge_preemption(before: _Before, state: EngineState, what: str, seen: list | None = None) -> None:
    """A preempted request is the newest running one, and goes back to the front of the queue; each one seen is
    appended to `seen`."""
    last = {rid: i for i, (rid, _) in enumerate(state.prefills)}  # when each request was last admitted
    candidates = set(before.running) | set(before.admitted(state))
    waiting = [r.id for r in state.waiting]
    preempted = [rid for rid in waiting if rid in candidates]
    if not preempted:
        return
    if seen is not None:
        seen.extend(preempted)
    newer = [(p, r.id) for p in preempted for r in state.running if last.get(r.id, -1) > last.get(p, -1)]
    expect(
        not newer,
        f"{what}, step {state.steps}: your step preempted request {newer[0][0] if newer else ''} while request "
        f"{newer[0][1] if newer else ''}, admitted after it, kept running. Preempt the NEWEST running request (the "
        "last admitted, at the end of state.running): it has done the least work, so recomputing it costs least, "
        "and the oldest keep their progress",
    )
    victims = sorted(preempted, key=lambda rid: last.get(rid, -1))
    expect(
        waiting[: len(victims)] == victims,
        f"{what}, step {state.steps}: preempted request(s) {victims} should be at the FRONT of the queue, ahead of "
        f"those that were already waiting (it was admitted before them); the queue is {waiting}. Put a preempted "
        "request back with state.waiting.appendleft(...)",
    )
    oldest = state.waiting[0]
    need = state.blocks.blocks_for(len(oldest.prompt) + len(oldest.output) + 1)
    expect(
        len(state.blocks.free_blocks) < need,
        f"{what}, step {state.steps}: your step preempted requests {victims} and ended with "
        f"{len(state.blocks.free_blocks)} blocks free, enough for request {oldest.id} to have kept running ({need} "
        "blocks with its next slot). Preempt one request at a time, newest first, and only until the request short "
        "of a slot has one",
    )


def _judge_step_tokens(before: _Before, state: EngineState, what: str) -> None:
    """Each step gives every running request one token: two in the step that admits it (its prefill's and the
    decode's), never none, never more."""
    admitted = set(before.admitted(state))
    for r in state.running:
        grew, want = len(r.output) - before.outputs.get(r.id, 0), 2 if r.id in admitted else 1
        if grew < want and r.id in admitted:
            hint = (
                "it was admitted (prefilled) in this step but left out of the step's decode: decode EVERY running "
                "request, the ones just admitted too"
            )
        elif grew < want:
            hint = "it was running and left out of the step's decode: one decode call takes every running request"
        else:
            hint = "a step gives each running request one token (its slot from blocks.append, then the one decode call)"
        expect(
            grew == want,
            f"{what}, step {state.steps}: request {r.id} got {grew} new token(s), it should get {want}: {hint}",
        )


@check(LAB, "the tokens: a mixed trace gives one-at-a-time greedy tokens")
def check_tokens(scheduler_step):
    state = EngineState(num_blocks=64, block_size=8, max_running=3)
    reqs = _requests([(5, 12), (30, 3), (9, 20), (2, 1), (17, 7)])
    for r in reqs:
        state.submit(r)
    _drive(scheduler_step, state, "five requests, three seats")
    expect(
        sorted(r.id for r in state.finished) == [r.id for r in reqs],
        f"every request should finish once; finished: {sorted(r.id for r in state.finished)}",
    )
    for r in reqs:
        want = _expected(r)
        expect(
            len(r.output) == r.max_new_tokens,
            f"request {r.id} asked for {r.max_new_tokens} tokens and got {len(r.output)}"
            + (": retire a request as soon as it has its tokens" if len(r.output) > r.max_new_tokens else ""),
        )
        expect(
            r.output == want, f"request {r.id}: tokens {r.output[:8]}... differ from greedy generation {want[:8]}..."
        )
    expect(len(state.blocks.free_blocks) == state.blocks.num_blocks, "at the end every block should be free again")


@check(LAB, "the work: each prompt prefilled once, every running request decoded together")
def check_work(scheduler_step):
    state = EngineState(num_blocks=64, block_size=8, max_running=4)
    reqs = _requests([(6, 10), (6, 10), (6, 10), (6, 10)], seed=1)
    for r in reqs:
        state.submit(r)
    _drive(scheduler_step, state, "four requests of 10 tokens")
    per_request = {}
    for rid, _ in state.prefills:
        per_request[rid] = per_request.get(rid, 0) + 1
    expect(
        all(n == 1 for n in per_request.values()) and len(per_request) == 4,
        f"with blocks to spare, each prompt should be prefilled once; prefills per request: {per_request}. "
        "The cache keeps a running request's tokens: decode only its newest",
    )
    expect(
        state.decodes and max(len(d) for d in state.decodes) == 4,
        f"the four requests run together: a decode call should hold all four; sizes seen "
        f"{sorted({len(d) for d in state.decodes})}",
    )
    expect(
        len(state.decodes) == 9,
        f"10 tokens each are one prefill and 9 decode steps; saw {len(state.decodes)} decode calls",
    )


@check(LAB, "the budget: never beyond the free blocks, and a pool too small preempts")
def check_budget(scheduler_step):
    state = EngineState(num_blocks=10, block_size=4, max_running=4)
    reqs = _requests([(6, 14), (6, 14), (6, 14), (6, 14)], seed=2)  # 4 x 20 tokens = 20 blocks > 10
    for r in reqs:
        state.submit(r)
    try:
        _drive(scheduler_step, state, "four requests of 20 tokens over 10 blocks of 4")
    except OutOfBlocks as e:
        raise LabCheckFailed(
            f"blocks.append raised OutOfBlocks ({e}) and the step let it escape: when no block is "
            "free, preempt the newest running request (free its blocks, put it back at the front "
            "of the queue) and try again"
        ) from None
    for r in reqs:
        expect(
            r.output == _expected(r),
            f"request {r.id}: after a preemption its tokens must still equal greedy "
            "generation (prefill it again with what it had generated)",
        )
    preempted = [rid for rid, n in state.prefills if n > len(reqs[rid].prompt)]
    expect(preempted, "the pool cannot hold all four at full length: someone had to be preempted and prefilled again")


@check(LAB, "cancel: blocks come back at once, waiting or running")
def check_cancel(scheduler_step):
    state = EngineState(num_blocks=32, block_size=4, max_running=2)
    reqs = _requests([(5, 30), (5, 30), (5, 30)], seed=3)
    for r in reqs:
        state.submit(r)
    scheduler_step(state)
    state.steps += 1
    expect(
        {r.id for r in state.running} == {0, 1},
        f"two seats: requests 0 and 1 should run; running: {[r.id for r in state.running]}",
    )
    state.cancelled |= {0, 2}  # one running, one waiting
    scheduler_step(state)
    state.steps += 1
    _held_matches_running(state, "after cancelling requests 0 (running) and 2 (waiting)")
    expect(
        [r.id for r in state.running] == [1] and not any(r.id == 2 for r in state.waiting),
        f"cancelled requests leave both queues; running {[r.id for r in state.running]}, waiting "
        f"{[r.id for r in state.waiting]}",
    )
    expect(all(0 not in d and 2 not in d for d in state.decodes[1:]), "a cancelled request must not be decoded again")


@check(LAB, "fairness: a long request at the head is not overtaken forever")
def check_no_starvation(scheduler_step):
    # Seats to spare (8), so blocks are what limits: a short request holds 1 to 3 blocks of 4 over its life, and
    # one arrives every step; the long one needs 14 of the 16 blocks for its prompt, free only once those ahead of
    # it have finished and nobody behind it was let in meanwhile.
    state = EngineState(num_blocks=16, block_size=4, max_running=8)
    g = torch.Generator().manual_seed(4)
    short = lambda i: Request(i, torch.randint(0, 256, (4,), generator=g).tolist(), 6)  # noqa: E731
    first = [short(i) for i in range(3)]
    long = Request(99, torch.randint(0, 256, (56,), generator=g).tolist(), 4)
    arrivals = {0: first + [long], **{s: [short(100 + s)] for s in range(1, 60)}}
    _drive(
        scheduler_step,
        state,
        "a 56-token request behind short ones, with short ones arriving every step",
        max_steps=400,
        arrivals=arrivals,
    )
    order = [r.id for r in state.finished]
    expect(
        99 in order and order.index(99) < 30,
        f"the long request finished {'at position ' + str(order.index(99)) if 99 in order else 'never'} of "
        f"{len(order)}: oldest first means that when the head of the queue does not fit, nobody behind it "
        "jumps ahead",
    )


# A mixed trace for the policy checks: (prompt tokens, new tokens), so that requests finish at different steps;
# the 34-token one needs 5 of the 8 blocks of check_continuous, so it waits at the head now and then.
_MIXED = [(5, 3), (7, 16), (3, 9), (6, 5), (4, 12), (30, 4), (9, 2), (5, 8), (2, 1), (8, 6)]


@check(LAB, "continuous: a freed seat is filled at the next step, while the others still run")
def check_continuous(scheduler_step):
    state = EngineState(num_blocks=8, block_size=8, max_running=3)
    reqs = _requests(_MIXED, seed=6)
    _drive(
        scheduler_step,
        state,
        "ten requests of mixed lengths, three seats, 8 blocks of 8 tokens",
        arrivals={0: reqs[:6], 5: reqs[6:]},
        judges=(_judge_admission,),
    )
    expect(
        any(len(d) > 1 for d in state.decodes),
        "no decode call ever held more than one request: with three seats, requests run together",
    )


@check(LAB, "the budget per step: one new token for every running request")
def check_step_tokens(scheduler_step):
    state = EngineState(num_blocks=64, block_size=8, max_running=4)
    reqs = _requests(_MIXED, seed=8)
    _drive(
        scheduler_step,
        state,
        "ten requests of mixed lengths, four seats",
        arrivals={0: reqs[:4], 3: reqs[4:7], 9: reqs[7:]},
        judges=(_judge_step_tokens,),
    )


@check(LAB, "preemption: the newest running request, back at the front of the queue")
def check_preemption(scheduler_step):
    # 10 blocks of 4 tokens, three seats: three requests growing to 16, 22 and 22 tokens need 15 blocks, so the
    # pool runs dry while two more wait for a seat; the oldest is the first short of a slot, and the newest (a
    # request admitted again after its preemption, too) is preempted three times over the run.
    state = EngineState(num_blocks=10, block_size=4, max_running=3)
    reqs = _requests([(4, 12), (4, 18), (8, 14), (4, 6), (3, 5)], seed=7)
    for r in reqs:
        state.submit(r)
    seen: list[int] = []
    try:
        _drive(
            scheduler_step,
            state,
            "five requests over 10 blocks of 4 tokens, three seats",
            judges=(lambda before, st, what: _judge_preemption(before, st, what, seen),),
        )
    except OutOfBlocks as e:
        raise LabCheckFailed(
            f"blocks.append raised OutOfBlocks ({e}) and the step let it escape: preempt the newest "
            "running request and try again"
        ) from None
    expect(
        seen,
        "the three running requests outgrow the 10 blocks, yet no running request went back to the queue: when "
        "blocks.append finds no free block, preempt the newest running request",
    )
