"""The engine core: the scheduler's loop with no HTTP and no asyncio, in a thread or in a process of its own.

    core = EngineCore(model, num_blocks=256, block_size=16, max_running=8)
    core.run(commands, emit, stopped)     # take commands, step, emit one StepOutput per step

A command is ("submit", Submit(...)) or ("cancel", request_id). After each step the core emits one StepOutput:
every request's new tokens (a request that is not streamed gets all of them at its end only), how finished ones
ended, and the engine's figures (the step's seconds, sequences decoded, running, waiting, free blocks).
A finished request leaves the core with its output; nothing of it stays.

Why a process of its own (`serve_core_process`): the core's Python (hundreds of small tensor operations a step)
and the HTTP side's Python (a socket write per streamed chunk) share one GIL in one process. Measured here with
16 streaming clients, the core thread got 0.78 of a core while the event loop held the GIL for 0.15: each step
took a third longer than the same scheduler alone. vLLM v1 splits them the same way (its EngineCore process).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ailab.generation import FinishReason, PagedKVCache, Request, Scheduler


@dataclass
class Submit:
    """A request as plain data: what crosses to the core, thread or process."""

    id: int
    prompt: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stops: tuple[bytes, ...] = ()
    incremental: bool = True


@dataclass
class StepOutput:
    """One step's news: (request id, tokens made this step, tokens handed over, finish reason or None) for each
    request that made tokens or ended, then the engine's figures."""

    updates: list[tuple[int, int, list[int], FinishReason | None]] = field(default_factory=list)
    step_s: float = 0.0
    stepped: bool = False
    decoded: int = 0
    running: int = 0
    waiting: int = 0
    blocks_free: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)  # requests ended by a failure, and why


def _stop_rule(stops: tuple[bytes, ...]):
    if not stops:
        return None
    return lambda out: any(len(out) >= len(x) and bytes(out[-len(x) :]) == x for x in stops)


class EngineCore:
    def __init__(self, model, num_blocks: int = 256, block_size: int = 16, max_running: int = 8, warmup: bool = True):
        self.model = model
        self.cache = PagedKVCache.for_model(model, num_blocks, block_size)
        self.scheduler = Scheduler(model, self.cache, max_running)
        # id -> (request, incremental, tokens handed over, tokens counted): what a live request has had so far
        self._live: dict[int, tuple[Request, bool, int, int]] = {}
        if warmup:
            self._warm()

    def _warm(self) -> None:
        """One short request through prefill and decode before the first client's: a GPU's first kernels load
        and tune on first use, and that must not land in anyone's time to first token."""
        s = self.scheduler
        s.submit(Request(-1, [32] * 8, 2))
        while not s.idle:
            s.step()

    @property
    def idle(self) -> bool:
        return self.scheduler.idle

    def handle(self, kind: str, item, out: StepOutput) -> None:
        if kind == "submit":
            req = Request(
                item.id,
                list(item.prompt),
                item.max_new_tokens,
                temperature=item.temperature,
                top_p=item.top_p,
                seed=item.seed,
                stop=_stop_rule(tuple(item.stops)),
            )
            try:
                self.scheduler.submit(req)
            except ValueError as e:  # checked by the route already; never let it stop the loop
                out.errors.append((item.id, str(e)))
                return
            self._live[item.id] = (req, item.incremental, 0, 0)
        elif kind == "cancel" and item in self._live:
            self.scheduler.cancel(item)
            del self._live[item]
            out.updates.append((item, 0, [], FinishReason.CANCELLED))

    def step(self, out: StepOutput) -> None:
        t0 = time.perf_counter()
        try:
            report = self.scheduler.step()
        except Exception as e:  # noqa: BLE001 - a failed step ends its requests with the reason, never the loop
            for rid in list(self._live):
                self.scheduler.cancel(rid)
                out.errors.append((rid, f"generation failed: {type(e).__name__}: {e}"))
            self._live.clear()
            return
        out.step_s, out.stepped, out.decoded = time.perf_counter() - t0, True, report.decoded
        finished = {r.id for r in report.done}
        for rid, (req, incremental, handed, counted) in list(self._live.items()):
            done = rid in finished
            made = len(req.output) - counted
            if not (made or done):
                continue
            give = req.output[handed:] if incremental or done else []  # a whole answer: everything at its end
            out.updates.append((rid, made, give, req.finish_reason if done else None))
            if done:
                del self._live[rid]
            else:
                self._live[rid] = (req, incremental, handed + len(give), len(req.output))

    def figures(self, out: StepOutput) -> StepOutput:
        s = self.scheduler
        out.running, out.waiting = len(s.running), len(s.waiting)
        out.blocks_free = len(self.cache.allocator.free_blocks)
        return out

    def run(
        self, commands: Callable[[float], list], emit: Callable[[StepOutput], None], stopped: Callable[[], bool]
    ) -> None:
        """The loop: commands(wait_s) returns what has come (waiting up to wait_s when there is nothing to do)."""
        while not stopped():
            out = StepOutput()
            taken = commands(0.0 if not self.idle else 0.05)
            for kind, item in taken:
                self.handle(kind, item, out)
            if not self.idle:
                self.step(out)
            if taken or out.stepped:  # idle and nothing asked: nothing to tell
                emit(self.figures(out))


def default_core_threads() -> int:
    """What `ailab serve --generate` gives its engine core unless told: every core but one, which the HTTP side
    and a load generator on the same machine need (on 2 cores, 1: measured here, a core with 2 threads beside
    16 streaming clients served 965-1,211 tokens/s, with 1 thread 1,358-1,420)."""
    import os

    return max(1, (os.cpu_count() or 2) - 1)


def generation_model(size: str, weights: str | None = None, sha256: str | None = None):
    """The Decoder `ailab serve --generate` serves: tiny_gpt(size), or weights saved by train.save_lm (hash-checked),
    where the classifiers run (predictors.py picks the same device); the KV block pool follows the model."""
    from ailab.device import pick_device
    from ailab.generation import Decoder
    from ailab.generation.train import load_lm
    from ailab.models import tiny_gpt

    hf = load_lm(weights, sha256, size) if weights else tiny_gpt(size)
    return Decoder(hf.to(pick_device()))


def core_process_main(commands, outputs, factory, core_kw: dict, threads: int | None) -> None:
    """The core process: build the model, report its limits, then run the loop until told to close or until the
    front-end is gone (its end of the pipe closes: a killed server leaves no engine behind)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        model = factory()
        core = EngineCore(model, **core_kw)
    except BaseException as e:  # noqa: BLE001 - told to the front-end, which says it in /readyz
        outputs.send(("failed", f"{type(e).__name__}: {e}"))
        return
    outputs.send(("ready", (model.max_positions, model.vocab_size)))
    stop = [False]

    def take(wait_s: float) -> list:
        got = []
        try:
            while commands.poll(wait_s if not got else 0):
                kind, item = commands.recv()
                if kind == "close":
                    stop[0] = True
                    break
                got.append((kind, item))
        except (EOFError, OSError):
            stop[0] = True
        return got

    core.run(take, outputs.send, lambda: stop[0])
