"""AsyncLLM (vLLM v1's name): the generation engine's front end, what the OpenAI routes call.

    llm = AsyncLLM(Decoder(tiny_gpt("1m")), name="ailab-gpt-1m")                     # the core in a thread
    llm = AsyncLLM(partial(generation_model, "1m"), process=True)                    # ... or its own process
    state = llm.add_request(prompt_ids, SamplingParams(max_tokens=32), stream=True)  # on the event loop
    out = await state.outputs.get()     # RequestOutput(text, completion_tokens, finish_reason, error)
    llm.abort(state)                    # the client left: the request ends, its KV blocks are free at once

One request's way: the route checks the body into GenerationParams (openai_protocol.py), whose SamplingParams
travel unchanged; AsyncLLM gives the request an id, registers its RequestState with the OutputProcessor, and
sends an EngineCoreRequest through the core client (core_client.py: a thread here, or a process of its own). The
core (ailab/generation/core_loop.py) adds it to its Scheduler, steps, and sends back EngineCoreOutputs; the
OutputProcessor turns them into text and hands each route its RequestOutputs on its event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

from ailab.generation.core_io import EngineCoreOutputs, EngineCoreRequest
from ailab.generation.sampling_params import SamplingParams
from ailab.server.core_client import make_client
from ailab.server.detokenizer import IncrementalDetokenizer
from ailab.server.edge import ServerBusy
from ailab.server.output_processor import OutputProcessor, RequestState


class AsyncLLM:
    def __init__(
        self,
        model,
        num_blocks: int = 256,
        block_size: int = 16,
        max_running: int = 8,
        max_waiting: int = 64,
        name: str = "ailab-gpt",
        warmup: bool = True,
        threads: int | None = None,
        process: bool = False,
        start_timeout_s: float = 300.0,
        enable_prefix_caching: bool = False,
        max_num_batched_tokens: int | None = None,
        settings: dict | None = None,
    ):
        """`model`: a Decoder (the core runs in a thread of this process), or with `process` a picklable callable
        that builds one (the core runs in a process of its own, which builds it). `threads`: torch's intra-op
        threads for the core alone (None: torch's default). `enable_prefix_caching`: prompts that begin alike share
        their first full KV blocks (ailab/generation/prefix_cache.py), as vLLM's flag of that name.
        `max_num_batched_tokens`: chunked prefill, at most that many tokens a step (ailab/generation/plan.py).
        `settings`: what `ailab serve` chose for it and why (generation_policy), shown in /healthz's private half
        with the pool's size beside them."""
        self.name, self.threads, self.process = name, threads, process
        self.enable_prefix_caching = enable_prefix_caching
        self.max_waiting, self.blocks_total = max_waiting, num_blocks
        self.max_request_tokens = num_blocks * block_size  # a request longer than the whole pool can never run
        # read from any thread (gauges, tests); written after each step
        self.running, self.waiting, self.blocks_free = 0, 0, num_blocks
        self.dead_reason: str | None = None
        self.settings: dict = {**(settings or {}), "num_blocks": num_blocks}
        self.output_processor = OutputProcessor()
        self._ids = itertools.count()
        core_kw = {
            "num_blocks": num_blocks,
            "block_size": block_size,
            "max_running": max_running,
            "warmup": warmup,
            "prefix_caching": enable_prefix_caching,
            "max_num_batched_tokens": max_num_batched_tokens,
        }
        self.client = make_client(model, core_kw, threads, process, self._on_outputs, self._died)
        if process and (not self.client.ready.wait(start_timeout_s) or self.dead_reason):
            self.close()
            raise RuntimeError(f"the generation engine's process did not start: {self.dead_reason or 'timeout'}")

    @property
    def ready(self) -> threading.Event:
        return self.client.ready

    @property
    def max_model_len(self) -> int | None:
        return self.client.max_model_len

    @property
    def vocab_size(self) -> int | None:
        return self.client.vocab_size

    @property
    def metrics(self):
        return self.output_processor.metrics

    @metrics.setter
    def metrics(self, metrics) -> None:
        self.output_processor.metrics = metrics

    @property
    def healthy(self) -> bool:
        return self.dead_reason is None and self.client.alive

    @property
    def core(self):
        """The engine core itself, when it runs in a thread here (tests look inside); None in a process."""
        return getattr(self.client, "core", None)

    @property
    def in_engine(self) -> int:
        """Requests held by the engine (added and not yet ended): 0 once every request has left."""
        return len(self.output_processor.request_states)

    def add_request(self, prompt: list[int], sampling_params: SamplingParams, stream: bool = True) -> RequestState:
        """Queue a request (call on the event loop); ServerBusy when the waiting line is full or the core is gone."""
        if self.dead_reason is not None:
            raise ServerBusy(f"the generation engine has stopped ({self.dead_reason}); the server needs a restart")
        queued = self.in_engine - self.running  # waiting in the core, or on their way to it
        if queued >= self.max_waiting:
            raise ServerBusy(
                f"the server is busy: {queued} generation requests are waiting (the limit is "
                f"{self.max_waiting}); retry later"
            )
        rid = next(self._ids)
        state = RequestState(
            rid, len(prompt), asyncio.Queue(), asyncio.get_running_loop(), IncrementalDetokenizer(sampling_params.stop),
            stream,
        )  # fmt: skip
        self.output_processor.add_request(state)
        self.client.add_request(EngineCoreRequest(rid, list(prompt), sampling_params))
        return state

    def abort(self, state: RequestState) -> None:
        self.client.abort_request(state.request_id)

    def close(self, timeout_s: float = 5.0) -> None:
        self.client.close(timeout_s)

    # ---- on the core client's thread

    def _on_outputs(self, outs: EngineCoreOutputs) -> None:
        self.running, self.waiting, self.blocks_free = outs.stats.running, outs.stats.waiting, outs.stats.blocks_free
        self.output_processor.process_outputs(outs)

    def _died(self, reason: str) -> None:
        self.dead_reason = reason
        self.output_processor.abort_all(reason)
