"""The planning half of a step: what runs, decided from the queues and the free blocks alone (vLLM v1's
`Scheduler.schedule()` and its `SchedulerOutput`). `schedule` moves requests between the queues and takes or frees
KV blocks; it never calls the model and never touches a request's tokens, so it can be read, tested and timed
without one. The executor (executor.py) runs the plan; the engine (scheduler.py) applies what comes back.

  1. decode   every running request gets a slot for its next token, oldest first. When no block is free, the
              newest running request is preempted: its blocks are freed and it goes back to the FRONT of the
              queue, to be prefilled again later with what it had generated (recompute). The newest has done the
              least work, so recomputing it costs least, and the oldest keep their progress.
  2. admit    while a seat (max_running) and blocks for all its tokens are free, the oldest waiting request gets
              its blocks and a prefill; the first that does not fit stops admission, so nobody behind it jumps
              ahead and a long request at the head is not overtaken forever. policy="static" admits only when
              nobody runs: a batch starts when the previous one has wholly finished.

Running requests are planned before waiting ones (as vLLM v1 does), so a request is never admitted and then
preempted in the same step for an older one's slot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ailab.generation.paged import BlockAllocator, OutOfBlocks
from ailab.generation.request import Request


@dataclass
class SchedulerOutput:
    """One step's plan. Every request in `prefill` and `decode` gets exactly one new token from the executor."""

    prefill: list[tuple[Request, int]] = field(default_factory=list)  # admitted: (request, tokens to prefill)
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
) -> SchedulerOutput:
    """Plan one step over `waiting` (oldest first) and `running` (in admission order), updating both queues and
    the block tables in place; return the plan."""
    plan = SchedulerOutput()
    i = 0
    while i < len(running):  # 1. a slot for every running request's next token, oldest first
        req = running[i]
        try:
            blocks.append(req.id)
            plan.decode.append(req)
            i += 1
        except OutOfBlocks:
            victim = running.pop()  # the newest: when that is `req` itself, the loop ends here
            blocks.free(victim.id)
            waiting.appendleft(victim)  # the oldest of those sent back ends up first
            plan.preempted.append(victim)
    if policy == "static" and running:
        return plan
    while waiting and (max_running is None or len(running) < max_running):  # 2. admit, oldest first
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)  # after a preemption, what it had generated is recomputed
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan
