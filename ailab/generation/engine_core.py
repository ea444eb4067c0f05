"""The engine core (vLLM v1's EngineCore): one `step()` runs continuous (iteration-level) batching over paged KV
blocks in three calls, each in a file of its own:

  1. schedule  the Scheduler (scheduler.py) plans from the queues and the free blocks alone (plan.py): a slot for
               every running request's next token (preempting the newest when none is free), then waiting
               requests admitted oldest first while seats and blocks allow. It returns a SchedulerOutput;
  2. execute   the ModelExecutor (executor.py) runs that plan over the paged cache in one forward and samples each
               scheduled request's new token, changing no request;
  3. update    the Scheduler applies the tokens: appended, times stamped, the finished retired and handed over
               once in the step's report (`StepReport.done`), with one EngineCoreOutput per request that ran.

    core = EngineCore(model, PagedKVCache.for_model(model, 64, 16), max_running=4)
    core.add_request(Request(0, prompt_ids, SamplingParams(max_tokens=32)))
    while not core.idle:
        report = core.step()

Each step is timed in parts (`StepReport.times`): the plan, the executor's prepare (token tensors, block tables),
forward and sampling, and the update. Everything but the forward is the engine's own overhead.

In a server the core runs this loop behind a pipe (core_loop.py): requests in, EngineCoreOutputs out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ailab.generation.core_io import EngineCoreOutput
from ailab.generation.executor import ModelExecutor
from ailab.generation.paged import BlockAllocator, PagedKVCache
from ailab.generation.plan import SchedulerOutput, schedule
from ailab.generation.prefix_cache import PrefixCachingAllocator
from ailab.generation.request import Request
from ailab.generation.scheduler import Scheduler


@dataclass
class StepTimes:
    """Seconds of one step, by part. `forward_s` is the model's; the rest is the engine's own."""

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
    outputs: list[EngineCoreOutput] = field(default_factory=list)  # each request that ran: its token, its end


class EngineCore:
    def __init__(
        self,
        model,
        cache: PagedKVCache,
        max_running: int | None = None,
        policy: str = "continuous",
        clock=time.perf_counter,
        planner: Callable[..., SchedulerOutput] = schedule,
        compile: bool = False,
        max_num_batched_tokens: int | None = None,
    ):
        """`max_num_batched_tokens`: at most this many tokens computed a step (chunked prefill, plan.py)."""
        self.model, self.cache = model, cache
        self.scheduler = Scheduler(
            cache.allocator, model.max_positions, max_running, policy, planner, clock, max_num_batched_tokens
        )
        self.executor = ModelExecutor(model, cache, compile)  # compile: the decode step under torch.compile

    @classmethod
    def for_model(
        cls,
        model,
        num_blocks: int = 256,
        block_size: int = 16,
        max_running: int = 8,
        prefix_caching: bool = False,
        max_num_batched_tokens: int | None = None,
    ) -> "EngineCore":
        """A core with its own block pool, as a server makes one (`prefix_caching`: prefix_cache.py)."""
        allocator = PrefixCachingAllocator if prefix_caching else BlockAllocator
        cache = PagedKVCache.for_model(model, num_blocks, block_size, allocator=allocator)
        return cls(model, cache, max_running, max_num_batched_tokens=max_num_batched_tokens)

    # the scheduler's queues, read by notebooks, benches and the lab
    @property
    def waiting(self):
        return self.scheduler.waiting

    @property
    def running(self) -> list[Request]:
        return self.scheduler.running

    @property
    def alloc(self):
        return self.scheduler.alloc

    @property
    def idle(self) -> bool:
        return self.scheduler.idle

    def add_request(self, req: Request) -> None:
        self.scheduler.add_request(req)

    def abort_request(self, request_id: int) -> bool:
        return self.scheduler.finish_request(request_id)

    def step(self) -> StepReport:
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        t1 = time.perf_counter()
        out = self.executor.execute(plan)
        t2 = time.perf_counter()
        done = self.scheduler.update_from_output(plan, out.tokens)
        made = out.tokens  # a request that computed only a chunk of its prompt made none
        outputs = [EngineCoreOutput(r.id, [r.output[-1]], r.finish_reason) for r in plan.scheduled if r.id in made]
        times = StepTimes(t1 - t0, out.prepare_s, out.forward_s, out.sample_s, time.perf_counter() - t2)
        s = self.scheduler
        return StepReport(
            len(plan.prefill), len(plan.decode), len(done), len(plan.preempted), len(s.running), len(s.waiting),
            done, times, outputs,
        )  # fmt: skip

    def run(self, arrivals: dict[int, list[Request]] | None = None) -> Iterator[StepReport]:
        """Step until nothing waits, runs or is still to arrive, yielding each step's report: the one loop every
        flat-out driver runs (a warm-up, a bench, the scheduler-step lab's checks). `arrivals`: requests to add
        before step k (counted from 0), by k."""
        arrivals, k = dict(arrivals or {}), 0
        while not self.idle or arrivals:
            for req in arrivals.pop(k, []):
                self.add_request(req)
            k += 1
            yield self.step()

    def run_until_idle(self) -> list[StepReport]:
        """Every step's report until nothing waits or runs."""
        return list(self.run())

    def warm_up(self, requests: int = 1) -> None:
        """Short requests through prefill and decode before the first real one: a GPU's first kernels load and
        tune on first use (and the CPU's allocator grows its pools), which must not land in anyone's time."""
        for i in range(requests):
            self.add_request(Request(-1 - i, [32] * 8, 3))
        self.run_until_idle()
