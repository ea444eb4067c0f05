"""The engine core as a server runs it (vLLM v1's EngineCoreProc busy loop): take requests, step, emit one
EngineCoreOutputs per step, with no HTTP and no asyncio, in a thread of the server or in a process of its own.

    run_busy_loop(core, take, emit, stopped)

`take(wait_s)` returns the commands that have come ((EngineCoreRequestType, payload) pairs), waiting up to wait_s
when the core is idle; `emit` gets each step's EngineCoreOutputs. A request that cannot be added, or a step that
fails, ends its requests with FinishReason.ERROR and the reason, never the loop.

Why a process of its own (`core_process_main`): the core's Python (hundreds of small tensor operations a step)
and the HTTP side's Python (a socket write per streamed chunk) share one GIL in one process. Measured here with
16 streaming clients, the core thread got 0.78 of a core while the event loop held the GIL for 0.15: each step
took a third longer than the same engine alone. vLLM v1 splits them the same way (its EngineCore process).
"""

from __future__ import annotations

import time
from typing import Callable

from ailab.generation.core_io import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    EngineCoreRequestType,
    SchedulerStats,
)
from ailab.generation.engine_core import EngineCore
from ailab.generation.request import FinishReason, Request

ADD, ABORT, CLOSE = EngineCoreRequestType.ADD, EngineCoreRequestType.ABORT, EngineCoreRequestType.CLOSE


def handle(core: EngineCore, kind: EngineCoreRequestType, item, out: EngineCoreOutputs) -> None:
    if kind == ADD:
        req: EngineCoreRequest = item
        try:
            core.add_request(Request(req.request_id, list(req.prompt_token_ids), req.sampling_params, req.arrival_s))
        except ValueError as e:  # checked by the route already; never let it stop the loop
            out.outputs.append(EngineCoreOutput(req.request_id, [], FinishReason.ERROR, str(e)))
    elif kind == ABORT and core.abort_request(item):
        out.outputs.append(EngineCoreOutput(item, [], FinishReason.CANCELLED))


def step(core: EngineCore, out: EngineCoreOutputs) -> None:
    t0 = time.perf_counter()
    try:
        report = core.step()
    except Exception as e:  # noqa: BLE001 - a failed step ends its requests with the reason, never the loop
        why = f"generation failed: {type(e).__name__}: {e}"
        for req in list(core.waiting) + list(core.running):
            core.abort_request(req.id)
            out.outputs.append(EngineCoreOutput(req.id, [], FinishReason.ERROR, why))
        return
    out.outputs.extend(report.outputs)
    out.stats.stepped, out.stats.step_s, out.stats.decoded = True, time.perf_counter() - t0, report.decoded


def with_stats(core: EngineCore, out: EngineCoreOutputs) -> EngineCoreOutputs:
    s, a = out.stats, core.alloc
    s.running, s.waiting, s.blocks_free = len(core.running), len(core.waiting), len(a.free_blocks)
    s.prefix_cache_queries, s.prefix_cache_hits = getattr(a, "queries", 0), getattr(a, "hits", 0)
    return out


def run_busy_loop(
    core: EngineCore,
    take: Callable[[float], list],
    emit: Callable[[EngineCoreOutputs], None],
    stopped: Callable[[], bool],
) -> None:
    while not stopped():
        out = EngineCoreOutputs(stats=SchedulerStats())
        taken = take(0.0 if not core.idle else 0.05)
        for kind, item in taken:
            handle(core, kind, item, out)
        if not core.idle:
            step(core, out)
        if taken or out.stats.stepped:  # idle and nothing asked: nothing to tell
            emit(with_stats(core, out))


def core_process_main(commands, outputs, factory, core_kw: dict, threads: int | None) -> None:
    """The core process: build the model and its core, report the model's limits, then run the loop until told
    to close or until the front end is gone (its end of the pipe closes: a killed server leaves no core behind)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        model = factory()
        core = make_core(model, **core_kw)
    except BaseException as e:  # noqa: BLE001 - told to the front end, which says it in /readyz
        outputs.send(("failed", f"{type(e).__name__}: {e}"))
        return
    outputs.send(("ready", (model.max_positions, model.vocab_size)))
    stop = [False]

    def take(wait_s: float) -> list:
        got = []
        try:
            while commands.poll(wait_s if not got else 0):
                kind, item = commands.recv()
                if kind == CLOSE:
                    stop[0] = True
                    break
                got.append((kind, item))
        except (EOFError, OSError):
            stop[0] = True
        return got

    run_busy_loop(core, take, outputs.send, lambda: stop[0])


def make_core(
    model,
    num_blocks: int,
    block_size: int,
    max_running: int,
    warmup: bool = True,
    prefix_caching: bool = False,
    max_num_batched_tokens: int | None = None,
) -> EngineCore:
    """The core a server runs: its own block pool, warmed up unless told not to."""
    core = EngineCore.for_model(model, num_blocks, block_size, max_running, prefix_caching, max_num_batched_tokens)
    if warmup:
        core.warm_up()
    return core
