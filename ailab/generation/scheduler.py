"""The Scheduler (vLLM v1's): it owns the queues and the KV blocks, plans each step, and applies what the
executor returns. It never calls the model; the engine core (engine_core.py) puts it and the executor together.

    add_request        a request joins the waiting queue, refused at once (RequestTooLarge, ValueError) if it can
                       never run here
    schedule           the plan of one step: `planner(waiting, running, blocks, max_running, policy)`, and the
                       token budget `max_num_batched_tokens` when one is set (chunked prefill) (plan.py's
                       `schedule` unless another is given: the scheduler-step lab runs a learner's planning step here
                       in its place), plus the ids that left since the last plan, so the executor forgets them
    update_from_output the plan's moves stamped on the requests, each new token appended, first-token and finish
                       times stamped, and the requests that are done retired: their blocks are freed at once and
                       they leave, handed to the caller once. Nothing keeps a reference to them, so a server that
                       runs for days holds only what waits and runs
    finish_request     a waiting or running request dropped (its client left); its blocks are freed at once

policy="static" is the comparison: a batch is admitted only when the previous one has wholly finished, so short
members sit idle until the longest ends.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

from ailab.generation.paged import BlockAllocator
from ailab.generation.plan import SchedulerOutput, schedule
from ailab.generation.request import FinishReason, Request, RequestStatus


class RequestTooLarge(ValueError):
    """The request needs more KV blocks than the whole pool holds: it can never run here."""


class Scheduler:
    def __init__(
        self,
        blocks: BlockAllocator,
        max_model_len: int,
        max_running: int | None = None,
        policy: str = "continuous",
        planner: Callable[..., SchedulerOutput] = schedule,
        clock=time.perf_counter,
        max_num_batched_tokens: int | None = None,
    ):
        if policy not in ("continuous", "static"):
            raise ValueError(f"policy={policy!r}; choose 'continuous' or 'static'")
        if max_num_batched_tokens is not None and not (
            isinstance(max_num_batched_tokens, int) and max_num_batched_tokens >= (max_running or 1)
        ):
            raise ValueError(
                f"max_num_batched_tokens must be a whole number of at least max_running ({max_running}): every "
                f"running request decodes one token a step; got {max_num_batched_tokens!r}"
            )
        # passed to the planner only when set: a planner written without chunked prefill takes five arguments
        self.budget = {} if max_num_batched_tokens is None else {"max_num_batched_tokens": max_num_batched_tokens}
        self.alloc, self.max_model_len = blocks, max_model_len
        self.max_running, self.policy, self.planner, self.clock = max_running, policy, planner, clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._left: list[int] = []  # ids finished or cancelled since the last plan: the executor forgets them

    def add_request(self, req: Request) -> None:
        total = len(req.prompt) + req.max_new_tokens
        if not req.prompt:
            raise ValueError(f"request {req.id}: needs a non-empty prompt")
        if total > self.max_model_len:
            raise ValueError(f"request {req.id}: {total} tokens exceed the model's {self.max_model_len} positions")
        if self.alloc.blocks_for(total) > self.alloc.num_blocks:
            raise RequestTooLarge(
                f"request {req.id} needs {self.alloc.blocks_for(total)} KV blocks at its longest; "
                f"the pool has {self.alloc.num_blocks}"
            )
        self.waiting.append(req)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> SchedulerOutput:
        plan = self.planner(self.waiting, self.running, self.alloc, self.max_running, self.policy, **self.budget)
        plan.finished_ids, self._left = self._left, []
        return plan

    def update_from_output(self, plan: SchedulerOutput, tokens: dict[int, int]) -> list[Request]:
        """Apply one step: the plan's moves stamped on the requests, each new token appended, the done retired."""
        now = self.clock()
        for req in plan.preempted:
            req.status, req.preemptions, req.num_computed_tokens = RequestStatus.WAITING, req.preemptions + 1, 0
        computed = {req.id: n for req, n in plan.prefill}  # a decode computes 1
        done = []
        for req in plan.scheduled:
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens += computed.get(req.id, 1)
            self.alloc.cache_full_blocks(req.id, req.prompt, req.output, req.num_computed_tokens)
            if req.id not in tokens:  # a chunk of its prompt: no token until the last one is computed
                continue
            req.output.append(tokens[req.id])
            if req.first_token_s is None:
                req.first_token_s = now
            if req.done:
                done.append(req)
        for req in done:
            self._finish(req, req.finish_reason_now(), now)
            self.running.remove(req)
        return done

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        if req.id in self.alloc.tables:
            self.alloc.free(req.id)  # its blocks go back to the free list at once
        req.status, req.finish_reason, req.finished_s = RequestStatus.FINISHED, reason, now
        self._left.append(req.id)

    def finish_request(self, request_id: int, reason: FinishReason = FinishReason.CANCELLED) -> bool:
        """Drop a waiting or running request; its blocks go back to the free list at once."""
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.id == request_id:
                    queue.remove(req)
                    self._finish(req, reason, self.clock())
                    return True
        return False
