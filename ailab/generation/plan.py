"""The planning half of a step: what runs, decided from the queues and the free blocks alone (vLLM v1's
`Scheduler.schedule()` and its `SchedulerOutput`). `schedule` moves requests between the queues and takes or frees
KV blocks; it never calls the model and never touches a request's tokens, so it can be read, tested and timed
without one. The executor (executor.py) runs the plan; the Scheduler (scheduler.py) applies what comes back.

What a plan guarantees (the rules the scheduler-step lab grades; its notebook and chapter 5.2 say why):
- running requests are served before waiting ones, and each one that keeps its seat gets a slot for its next token;
- when the blocks run out, running requests give way newest first: each goes back to the head of the queue with
  its blocks freed, to be prefilled again later with what it had generated (recompute);
- waiting requests are admitted in arrival order, each only with a seat (max_running) and blocks for all its
  tokens, and nobody is admitted past the first that does not fit; policy="static" admits only when nobody runs;
- a request admitted in a step is never preempted in it (the running are planned first); one sent back may be
  admitted again at once, with a prefill of all its tokens, when the blocks it freed hold them.

Chunked prefill (`max_num_batched_tokens`, vLLM's name): a step computes at most that many tokens. The running
requests' decodes come first, one token each; then the next chunk of each prompt still prefilling; then
admissions, each getting what is left of the budget, so a long prompt is spread over several steps and never
makes the decodes beside it wait for all of it. An admitted request gets blocks for all its tokens at once (what
it computes later never needs a block it could fail to get), and produces its first token only in the step that
computes its last prompt token. Without a budget, every prompt is computed in the step that admits it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ailab.generation.paged import BlockAllocator, OutOfBlocks
from ailab.generation.request import Request


@dataclass
class SchedulerOutput:
    """One step's plan. Every request in `prefill` and `decode` gets exactly one new token from the executor."""

    prefill: list[tuple[Request, int]] = field(default_factory=list)  # admitted: (request, tokens to compute)
    decode: list[Request] = field(default_factory=list)  # running: one token each, in one batched forward
    preempted: list[Request] = field(default_factory=list)  # sent back to the queue, their blocks freed
    finished_ids: list[int] = field(default_factory=list)  # left since the last plan: the executor forgets them

    @property
    def scheduled(self) -> list[Request]:
        """The requests that run this step, in the order of the executor's logits rows: prefills, then decodes."""
        return [req for req, _ in self.prefill] + self.decode


def schedule(
    waiting: deque[Request],
    running: list[Request],
    blocks: BlockAllocator,
    max_running: int | None = None,
    policy: str = "continuous",
    max_num_batched_tokens: int | None = None,
) -> SchedulerOutput:
    """Plan one step over `waiting` (oldest first) and `running` (in admission order), updating both queues and
    the block tables in place; return the plan. `max_num_batched_tokens`: chunked prefill (below); None: none."""
    plan = SchedulerOutput()
    budget = math.inf if max_num_batched_tokens is None else max_num_batched_tokens
    # chunked: those still prefilling, found before any slot is added (without a budget every prompt is computed
    # in the step that admits it, so none is: a plan is then made from the queues and the blocks alone)
    prefilling = {req.id for req in running if _prefilling(req, blocks)} if max_num_batched_tokens else set()
    i = 0
    while i < len(running):  # 1. a slot for every running request's next token, oldest first
        req = running[i]
        if req.id in prefilling:  # its blocks are reserved already; its next chunk comes in 2.
            i += 1
            continue
        try:
            blocks.append(req.id)
            plan.decode.append(req)
            i += 1
        except OutOfBlocks:
            victim = running.pop()  # the newest: when that is `req` itself, the loop ends here
            blocks.free(victim.id)
            waiting.appendleft(victim)  # the oldest of those sent back ends up first
            plan.preempted.append(victim)
    budget -= len(plan.decode)
    for req in running:  # 2. chunked prefill: the next chunk of each prompt still prefilling, oldest first
        if budget > 0 and req.id in prefilling:
            plan.prefill.append((req, min(blocks.lengths[req.id] - req.num_computed_tokens, budget)))
            budget -= plan.prefill[-1][1]
    if policy == "static" and running:
        return plan
    while waiting and budget > 0 and (max_running is None or len(running) < max_running):  # 3. admit, oldest first
        req = waiting[0]
        ids = req.prompt + req.output  # after a preemption, what it had generated is recomputed
        if not blocks.can_allocate(len(ids), ids):
            break
        waiting.popleft()
        blocks.allocate(req.id, len(ids), ids)  # blocks for all its tokens, even when it is computed in chunks
        req.num_computed_tokens = blocks.computed_tokens(req.id)  # a prefix cache's hit is not computed again
        running.append(req)
        plan.prefill.append((req, min(len(ids) - req.num_computed_tokens, budget)))
        budget -= plan.prefill[-1][1]
    return plan


def _prefilling(req: Request, blocks: BlockAllocator) -> bool:
    """A running request holds slots for tokens whose K/V is not computed yet: a prompt admitted in chunks. (One
    that decodes has computed every slot it holds, and needs a new slot for its last sampled token.)"""
    return req.num_computed_tokens < blocks.lengths[req.id]
