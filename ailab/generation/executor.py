"""The executing half of a step: the plan (plan.py) run over the paged KV cache, each scheduled request's new
token returned (vLLM v1's model runner and its `ModelRunnerOutput`). The executor reads the requests (their tokens,
their sampling settings) and changes none of them: the scheduler (scheduler.py) applies what it returns.

    prepare   token ids and one paged view per forward: block tables, positions and the new tokens' slots
    forward   one forward a step: `decode_paged` when every request decodes (with `compile=True`, its forward
              compiled: compiled.py); `step_paged` when the step admits, the prompts and the decodes' tokens
              packed in one row (a forward per prompt would pay a forward's fixed cost again for each)
    sample    one argmax over every row of the step, one copy to the host; a row at temperature > 0 is then
              drawn with its request's own generator (seeded, so a request's draws do not depend on its batch)

Each part is timed (`ModelOutput.prepare_s`, ...). On a GPU the device is synchronised before each clock reading,
or the time of queued kernels would land in whichever part first waits for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ailab.device import sync
from ailab.generation.decode import decode_paged, next_token, step_paged
from ailab.generation.paged import PagedKVCache
from ailab.generation.plan import SchedulerOutput
from ailab.generation.request import Request


@dataclass
class ModelOutput:
    tokens: dict[int, int]  # request id -> its new token
    prepare_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0


class ModelExecutor:
    def __init__(self, model, cache: PagedKVCache, compile: bool = False):
        self.model, self.cache, self.device = model, cache, cache.k.device
        if compile:  # the same decode_paged, its forward compiled (compiled.py); admitting steps stay eager
            from ailab.generation.compiled import compile_decode

            self.decode = compile_decode(model, cache)
        else:
            self.decode = lambda view, token: decode_paged(model, view, token)
        self.step = lambda view, ids: step_paged(model, view, ids)
        self._generators: dict[int, torch.Generator] = {}  # request id -> its sampling state, while it lives

    def _now(self) -> float:
        if self.device.type != "cpu":  # CUDA and MPS run asynchronously: wait for the queued work first
            sync(self.device)
        return time.perf_counter()

    def execute(self, plan: SchedulerOutput) -> ModelOutput:
        for rid in plan.finished_ids:
            self._generators.pop(rid, None)
        rows = plan.scheduled  # one logits row each, in this order
        if not rows:
            return ModelOutput({})
        t0 = self._now()
        if plan.prefill:  # prompts' chunks (after a preemption, what was generated too), then one token per decode
            chunks = [(req, req.num_computed_tokens, n) for req, n in plan.prefill]
            ids = [t for req, start, n in chunks for t in (req.prompt + req.output)[start : start + n]]
            ids = torch.tensor([ids + [r.output[-1] for r in plan.decode]], device=self.device)  # (1, N)
            starts = [start for _, start, _ in chunks] + [r.num_computed_tokens for r in plan.decode]
            view = self.cache.packed_view(
                [r.id for r in rows], [n for *_, n in chunks] + [1] * len(plan.decode), starts
            )
            forward, inputs = self.step, (view, ids)
            # a chunk that leaves part of its prompt for later makes no token: its row is not sampled
            complete = [i for i, (req, start, n) in enumerate(chunks) if start + n == len(req.prompt) + len(req.output)]
            sampled = complete + list(range(len(chunks), len(rows)))
        else:
            last = torch.tensor([[r.output[-1]] for r in plan.decode], device=self.device)  # (B, 1)
            view = self.cache.view([r.id for r in plan.decode], 1)
            forward, inputs, sampled = self.decode, (view, last), None
        t1 = self._now()
        logits = forward(*inputs)  # (rows, vocab): prefills' rows first, as `rows` are
        t2 = self._now()
        if sampled is not None and len(sampled) < len(rows):
            logits, rows = logits[sampled], [rows[i] for i in sampled]
        tokens = self.sample(rows, logits) if rows else []
        t3 = time.perf_counter()  # sample() ends in a copy to the host: nothing is left queued
        return ModelOutput(dict(zip((r.id for r in rows), tokens)), t1 - t0, t2 - t1, t3 - t2)

    def sample(self, rows: list[Request], logits: torch.Tensor) -> list[int]:
        """(rows, vocab) logits -> one token per row: greedy rows from one batched argmax, the others drawn."""
        tokens = next_token(logits)[:, 0].tolist()  # (rows,): one argmax and one host copy for the whole step
        for i, req in enumerate(rows):
            sp = req.sampling_params
            if not sp.greedy:
                tokens[i] = int(next_token(logits[i : i + 1], sp.temperature, self._generator(req, logits), sp.top_p))
        return tokens

    def _generator(self, req: Request, logits: torch.Tensor) -> torch.Generator:
        if req.id not in self._generators:  # on the logits' device: CUDA samples there
            seed = req.sampling_params.seed if req.sampling_params.seed is not None else req.id
            self._generators[req.id] = torch.Generator(logits.device).manual_seed(seed)
        return self._generators[req.id]
