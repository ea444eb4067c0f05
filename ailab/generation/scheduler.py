"""Continuous (iteration-level) batching over paged KV blocks: the engine's loop, split as vLLM v1 splits it.

One `step()` is three calls, each in a file of its own:

  1. plan     `schedule` (plan.py) decides from the queues and the free blocks alone: a slot for every running
              request's next token (preempting the newest when none is free), then waiting requests admitted
              oldest first while seats and blocks allow. It returns a SchedulerOutput and never calls the model;
  2. execute  the ModelExecutor (executor.py) runs that plan over the paged cache in one forward: `decode_paged`
              when every request decodes, `step_paged` when some are admitted (their prompts and the decodes'
              tokens packed in one row; an admitted request's first token comes out of its prompt's last
              position), and returns each request's new token, changing no request;
  3. apply    this engine appends each token to its request, stamps first-token and finish times, and retires
              the requests that are done (max_new_tokens, or their stop rule): their blocks are freed at once
              and they leave, handed to the caller once in the step's report (`StepReport.done`). The engine
              keeps no reference to them, so a server that runs it for days holds only what waits and runs.

The plan is whatever `planner` returns (plan.schedule unless another is given, called with the same arguments:
the waiting deque, the running list, the block allocator, max_running and policy): the scheduler-step lab runs a
learner's planning step here in its place, inside this same engine.

policy="static" is the comparison: a batch is admitted only when the previous one has wholly finished, so
short members sit idle until the longest ends. A request that could never fit the whole pool is refused
when it is submitted (RequestTooLarge), not left to wait forever.

Each step is timed in parts (`StepReport.times`): the plan, the executor's prepare (token tensors, block tables),
forward and sampling, and applying the output. Everything but the forward is the scheduler's own overhead.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ailab.generation.executor import ModelExecutor, ModelOutput
from ailab.generation.paged import PagedKVCache
from ailab.generation.plan import SchedulerOutput, schedule
from ailab.generation.request import FinishReason, Request, RequestState


class RequestTooLarge(ValueError):
    """The request needs more KV blocks than the whole pool holds: it can never run here."""


@dataclass
class StepTimes:
    """Seconds of one step, by part. `forward_s` is the model's; the rest is the scheduler's own."""

    plan_s: float = 0.0  # schedule(): queues and block tables
    prepare_s: float = 0.0  # token tensors and paged views (block tables, positions, slots) for the forward
    forward_s: float = 0.0  # the model: prefills and the batched decode (its attention gathers the blocks)
    sample_s: float = 0.0  # logits to tokens, and the copy to the host
    apply_s: float = 0.0  # tokens appended, stop checks, times stamped, finished requests retired

    @property
    def overhead_s(self) -> float:
        return self.plan_s + self.prepare_s + self.sample_s + self.apply_s

    @property
    def total_s(self) -> float:
        return self.overhead_s + self.forward_s


@dataclass
class StepReport:
    admitted: int
    decoded: int
    finished: int
    preempted: int
    running: int
    waiting: int
    done: list[Request] = field(default_factory=list)  # the requests that finished in this step, handed over
    times: StepTimes = field(default_factory=StepTimes)


class Scheduler:
    def __init__(
        self,
        model,
        cache: PagedKVCache,
        max_running: int | None = None,
        policy: str = "continuous",
        clock=time.perf_counter,
        planner: Callable[..., SchedulerOutput] = schedule,
        compile: bool = False,
    ):
        if policy not in ("continuous", "static"):
            raise ValueError(f"policy={policy!r}; choose 'continuous' or 'static'")
        self.model, self.cache, self.alloc = model, cache, cache.allocator
        self.max_running, self.policy, self.clock = max_running, policy, clock
        self.planner = planner  # (waiting, running, blocks, max_running, policy) -> SchedulerOutput
        self.executor = ModelExecutor(model, cache, compile)  # compile: the decode step under torch.compile
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._left: list[int] = []  # ids finished or cancelled since the last plan: the executor forgets them

    def submit(self, req: Request) -> None:
        total = len(req.prompt) + req.max_new_tokens
        if req.max_new_tokens < 1 or not req.prompt:
            raise ValueError(f"request {req.id}: needs a non-empty prompt and max_new_tokens >= 1")
        if total > self.model.max_positions:
            raise ValueError(
                f"request {req.id}: {total} tokens exceed the model's {self.model.max_positions} positions"
            )
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
        plan = self.planner(self.waiting, self.running, self.alloc, self.max_running, self.policy)
        plan.finished_ids, self._left = self._left, []
        return plan

    def step(self) -> StepReport:
        t0 = time.perf_counter()
        plan = self.schedule()
        t1 = time.perf_counter()
        out = self.executor.execute(plan)
        t2 = time.perf_counter()
        done = self.update_from_output(plan, out)
        times = StepTimes(t1 - t0, out.prepare_s, out.forward_s, out.sample_s, time.perf_counter() - t2)
        return StepReport(
            len(plan.prefill),
            len(plan.decode),
            len(done),
            len(plan.preempted),
            len(self.running),
            len(self.waiting),
            done,
            times,
        )

    def update_from_output(self, plan: SchedulerOutput, out: ModelOutput) -> list[Request]:
        """Apply one step: the plan's moves stamped on the requests, each new token appended, the done retired."""
        now = self.clock()
        for req in plan.preempted:
            req.state, req.preemptions = RequestState.WAITING, req.preemptions + 1
        done = []
        for req in plan.scheduled:
            req.state = RequestState.RUNNING
            req.output.append(out.tokens[req.id])
            if req.first_token_s is None:
                req.first_token_s = now
            if req.done:
                done.append(req)
        for req in done:
            reason = FinishReason.LENGTH if len(req.output) >= req.max_new_tokens else FinishReason.STOP
            self._finish(req, reason, now)
            self.running.remove(req)
        return done

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        if req.id in self.alloc.tables:
            self.alloc.free(req.id)  # its blocks go back to the free list at once
        req.state, req.finish_reason, req.finished_s = RequestState.FINISHED, reason, now
        self._left.append(req.id)

    def cancel(self, request_id: int) -> bool:
        """Drop a waiting or running request; its blocks go back to the free list at once."""
        for queue in (self.waiting, self.running):
            for req in queue:
                if req.id == request_id:
                    queue.remove(req)
                    self._finish(req, FinishReason.CANCELLED, self.clock())
                    return True
        return False
