"""Continuous (iteration-level) batching over paged KV blocks, as a small explicit state machine.

A request is WAITING, then RUNNING (its blocks allocated, its prompt prefilled), then FINISHED. One `step()`:

  1. admit   while blocks are free (and the running set is below max_running), take the oldest waiting
             request, allocate its blocks and prefill it: its first token comes out of the prefill;
  2. decode  one token for every running sequence, in one batched forward pass; a sequence whose next
             token needs a block when none is free preempts the newest running one (its blocks are freed
             and it waits again, to be prefilled anew with what it had generated: recompute);
  3. retire  sequences that reached max_new_tokens free their blocks at once, and leave: the step's report
             hands them to the caller (`StepReport.done`), and the scheduler keeps no reference to them, so a
             server that runs it for days holds only what is waiting and running.

policy="static" is the comparison: a batch is admitted only when the previous one has wholly finished, so
short members sit idle until the longest ends. A request that could never fit the whole pool is refused
when it is submitted (RequestTooLarge), not left to wait forever.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from ailab.generation.decode import next_token
from ailab.generation.paged import OutOfBlocks, PagedKVCache
from ailab.generation.request import FinishReason, Request, RequestState


class RequestTooLarge(ValueError):
    """The request needs more KV blocks than the whole pool holds: it can never run here."""


@dataclass
class StepReport:
    admitted: int
    decoded: int
    finished: int
    preempted: int
    running: int
    waiting: int
    done: list[Request] = field(default_factory=list)  # the requests that finished in this step, handed over


class Scheduler:
    def __init__(
        self,
        model,
        cache: PagedKVCache,
        max_running: int | None = None,
        policy: str = "continuous",
        clock=time.perf_counter,
    ):
        if policy not in ("continuous", "static"):
            raise ValueError(f"policy={policy!r}; choose 'continuous' or 'static'")
        self.model, self.cache, self.alloc = model, cache, cache.allocator
        self.max_running, self.policy, self.clock = max_running, policy, clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._done: list[Request] = []  # finished in the step under way; handed over by step() and forgotten

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

    # ------------------------------------------------------------------ the three phases of a step

    def _admit(self) -> int:
        if self.policy == "static" and self.running:
            return 0
        admitted = 0
        while self.waiting and (self.max_running is None or len(self.running) < self.max_running):
            req = self.waiting[0]
            tokens = req.prompt + req.output  # after a preemption, what it had generated is recomputed
            if not self.alloc.can_allocate(len(tokens)):
                break
            self.waiting.popleft()
            self.alloc.allocate(req.id, len(tokens))
            with torch.inference_mode():
                ids = torch.tensor([tokens], device=self.cache.k.device)  # (1, T)
                logits = self.model(ids, self.cache.view([req.id], len(tokens)))[:, -1]  # (1, vocab)
            self._emit(req, req.sample(logits))
            req.state = RequestState.RUNNING
            self.running.append(req)
            admitted += 1
        return admitted

    def _reserve_decode_slots(self) -> int:
        preempted = 0
        for req in list(self.running):
            if req.state != RequestState.RUNNING or req.done:
                continue
            while True:
                try:
                    self.alloc.append(req.id)
                    break
                except OutOfBlocks:
                    victim = self.running[-1]
                    self._preempt(victim)
                    preempted += 1
                    if victim is req:
                        break
        return preempted

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.alloc.free(req.id)
        req.state, req.preemptions = RequestState.WAITING, req.preemptions + 1
        self.waiting.appendleft(req)

    def _decode(self) -> int:
        batch = [r for r in self.running if not r.done]
        if not batch:
            return 0
        with torch.inference_mode():
            last = torch.tensor([[r.output[-1]] for r in batch], device=self.cache.k.device)  # (B, 1)
            logits = self.model(last, self.cache.view([r.id for r in batch], 1))[:, -1]  # (B, vocab)
        if all(r.temperature == 0 for r in batch):
            tokens = next_token(logits)[:, 0].tolist()  # greedy: one argmax for the batch
        else:
            tokens = [r.sample(logits[i : i + 1]) for i, r in enumerate(batch)]
        for r, tok in zip(batch, tokens):
            self._emit(r, int(tok))
        return len(batch)

    def _retire(self) -> int:
        done = [r for r in self.running if r.done]
        for r in done:
            self.running.remove(r)
            self.alloc.free(r.id)
            r.state, r.finished_s = RequestState.FINISHED, self.clock()
            r.finish_reason = FinishReason.LENGTH if len(r.output) >= r.max_new_tokens else FinishReason.STOP
            self._done.append(r)
        return len(done)

    def _emit(self, req: Request, token: int) -> None:
        req.output.append(token)
        if req.first_token_s is None:
            req.first_token_s = self.clock()

    def step(self) -> StepReport:
        admitted = self._admit()
        finished = self._retire()  # a request of one new token is done after its prefill
        preempted = self._reserve_decode_slots()
        decoded = self._decode()
        finished += self._retire()
        done, self._done = self._done, []
        return StepReport(admitted, decoded, finished, preempted, len(self.running), len(self.waiting), done)

    def cancel(self, request_id: int) -> bool:
        """Drop a waiting or running request; its blocks go back to the free list at once."""
        for req in list(self.waiting):
            if req.id == request_id:
                self.waiting.remove(req)
                req.state, req.finish_reason, req.finished_s = (
                    RequestState.FINISHED,
                    FinishReason.CANCELLED,
                    self.clock(),
                )
                return True
        for req in self.running:
            if req.id == request_id:
                self.running.remove(req)
                self.alloc.free(req.id)
                req.state, req.finish_reason, req.finished_s = (
                    RequestState.FINISHED,
                    FinishReason.CANCELLED,
                    self.clock(),
                )
                return True
        return False
