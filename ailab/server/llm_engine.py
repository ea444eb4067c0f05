"""The generation engine behind the OpenAI routes: the front-end the routes call, and its engine core.

    engine = GenerationEngine(Decoder(tiny_gpt("1m")), name="ailab-gpt-1m")               # the core in a thread
    engine = GenerationEngine(partial(generation_model, "1m"), process=True)              # ... or its own process
    stream = engine.submit(prompt_ids, max_new_tokens, temperature=0.0, top_p=1.0, seed=None, stops=[b"\\n\\n"])
    update = await stream.updates.get()      # Update(tokens=[...], finish_reason=None | "length" | "stop" | ...)
    engine.cancel(stream)                    # the client left: the request ends, its KV blocks are free at once

The core (ailab/generation/engine_core.py) runs the scheduler; after each step it hands over one StepOutput, and the front-end
gives every request its new tokens on its event loop in ONE call (`call_soon_threadsafe` per step, not per
token), keeps the metrics (time to first token as the front-end sees it, gaps between tokens, tokens, ends by
reason), and forgets a request once it has ended: a server that runs for days holds only what is waiting and
running. In a process of its own the core has its own GIL (engine_core.py says when that pays).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge, Histogram

from ailab.server.edge import ServerBusy
from ailab.generation.engine_core import EngineCore, StepOutput, Submit, core_process_main
from ailab.generation.request import FinishReason

TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class Update:
    """What one step did for one request: its new tokens, and how it ended if it did."""

    tokens: list[int]
    finish_reason: str | None = None  # "length", "stop", "cancelled" or "error"
    error: str | None = None


@dataclass
class GenerationStream:
    """The route's handle on one request: updates arrive on `updates`, on the event loop that submitted it.
    `incremental` False: one update only, at the end, with every token (an answer that is not streamed needs
    nothing sooner, and a wake-up per step would cost the event loop for nothing)."""

    id: int
    prompt_tokens: int
    updates: asyncio.Queue
    loop: asyncio.AbstractEventLoop
    incremental: bool = True
    arrived: float = field(default_factory=time.perf_counter)
    made: int = 0  # tokens made so far (the metrics count them)
    last_token_s: float | None = None


class GenerationMetrics:
    """The generation's own Prometheus series, in the app's registry (vLLM exports the same kinds)."""

    def __init__(self, registry, engine: "GenerationEngine"):
        r = registry
        self.ttft = Histogram(
            "ailab_generation_ttft_seconds",
            "Time from a generation request's arrival to its first token",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "ailab_generation_inter_token_seconds",
            "Time between two tokens of one request",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "ailab_generation_e2e_seconds",
            "Time from a generation request's arrival to its end",
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("ailab_generation_tokens", "Tokens generated", registry=r)
        self.prompt_tokens = Counter("ailab_generation_prompt_tokens", "Prompt tokens taken in", registry=r)
        self.requests = Counter(
            "ailab_generation_requests", "Generation requests ended, by finish reason", ["reason"], registry=r
        )
        # What the engine thread did with its time: steps taken and the seconds inside them (the rest it waited
        # for work), and the sequences each step decoded. `ailab bench generation-serve` reads these to say where
        # tokens/s goes between the scheduler alone and the scheduler behind HTTP.
        self.steps = Counter("ailab_generation_steps", "Scheduler steps taken", registry=r)
        self.step_seconds = Counter(
            "ailab_generation_step_seconds", "Seconds the engine thread spent inside steps", registry=r
        )
        self.decoded = Counter("ailab_generation_decoded_sequences", "Sequences decoded, summed over steps", registry=r)
        Gauge("ailab_generation_running", "Sequences running", registry=r).set_function(lambda: engine.running)
        Gauge("ailab_generation_waiting", "Sequences waiting for blocks or a seat", registry=r).set_function(
            lambda: engine.waiting
        )
        Gauge("ailab_kv_blocks_used", "KV blocks held by sequences", registry=r).set_function(
            lambda: engine.blocks_total - engine.blocks_free
        )
        Gauge("ailab_kv_blocks_free", "KV blocks free", registry=r).set_function(lambda: engine.blocks_free)


class GenerationEngine:
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
    ):
        """`model`: a Decoder (the core runs in a thread of this process), or with `process` a picklable callable
        that builds one (the core runs in a process of its own, which builds it). `threads`: torch's intra-op
        threads for the core alone (None: torch's default)."""
        self.name, self.threads, self.process = name, threads, process
        self.max_waiting, self.blocks_total = max_waiting, num_blocks
        self.max_request_tokens = num_blocks * block_size  # a request longer than the whole pool can never run
        # read from any thread (gauges, tests); written after each step
        self.running, self.waiting, self.blocks_free = 0, 0, num_blocks
        self.metrics: GenerationMetrics | None = None
        self.dead_reason: str | None = None
        self.ready = threading.Event()
        self.core: EngineCore | None = None  # the core itself, when it runs in a thread here
        self._streams: dict[int, GenerationStream] = {}
        self._ids = itertools.count()
        self._closed = False
        core_kw = {"num_blocks": num_blocks, "block_size": block_size, "max_running": max_running, "warmup": warmup}
        if process:
            self.max_model_len = self.vocab_size = None  # the core process reports them once the model is built
            self._start_process(model, core_kw)
            if not self.ready.wait(start_timeout_s) or self.dead_reason:
                self.close()
                raise RuntimeError(f"the generation engine's process did not start: {self.dead_reason or 'timeout'}")
        else:
            self.max_model_len, self.vocab_size = model.max_positions, model.vocab_size
            self._inbox: queue.SimpleQueue = queue.SimpleQueue()
            self._wake = threading.Event()
            self._thread = threading.Thread(
                target=self._thread_main, args=(model, core_kw), name="ailab-generation", daemon=True
            )
            self._thread.start()

    @property
    def healthy(self) -> bool:
        alive = self._proc.is_alive() if self.process else self._thread.is_alive()
        return self.dead_reason is None and alive

    @property
    def scheduler(self):
        return self.core.scheduler

    @property
    def in_engine(self) -> int:
        """Requests held by the engine (submitted and not yet ended): 0 once every request has left."""
        return len(self._streams)

    def submit(
        self,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stops: list[bytes] = (),
        incremental: bool = True,
    ) -> GenerationStream:
        """Queue a request (call on the event loop); ServerBusy when the waiting line is full or the core is gone."""
        if self.dead_reason is not None:
            raise ServerBusy(f"the generation engine has stopped ({self.dead_reason}); the server needs a restart")
        queued = len(self._streams) - self.running  # waiting in the core, or on their way to it
        if queued >= self.max_waiting:
            raise ServerBusy(
                f"the server is busy: {queued} generation requests are waiting (the limit is "
                f"{self.max_waiting}); retry later"
            )
        stream = GenerationStream(
            next(self._ids), len(prompt), asyncio.Queue(), asyncio.get_running_loop(), incremental
        )
        self._streams[stream.id] = stream
        self._command(
            "submit",
            Submit(stream.id, list(prompt), max_new_tokens, temperature, top_p, seed, tuple(stops), incremental),
        )
        return stream

    def cancel(self, stream: GenerationStream) -> None:
        self._command("cancel", stream.id)

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed = True
        if self.process:
            try:
                self._commands.send(("close", None))
            except (OSError, ValueError):
                pass
            self._proc.join(timeout_s)
            if self._proc.is_alive():
                self._proc.terminate()
        else:
            self._wake.set()
            self._thread.join(timeout_s)

    # ---- the two ways to the core

    def _command(self, kind: str, item) -> None:
        if self.process:
            with self._send_lock:
                self._commands.send((kind, item))
        else:
            self._inbox.put((kind, item))
            self._wake.set()

    def _thread_main(self, model, core_kw: dict) -> None:
        try:
            if self.threads:
                import torch

                torch.set_num_threads(self.threads)  # this thread's OpenMP team (see server/model_thread.py)
            self.core = EngineCore(model, **core_kw)
            self.ready.set()

            def commands(wait_s: float) -> list:
                if wait_s and self._inbox.empty():
                    self._wake.wait(wait_s)
                self._wake.clear()
                got = []
                while not self._inbox.empty():
                    got.append(self._inbox.get_nowait())
                return got

            self.core.run(commands, self._on_output, lambda: self._closed)
        except BaseException as e:  # noqa: BLE001 - the core's death is reported by /readyz, not lost
            self._died(f"the generation thread stopped: {type(e).__name__}: {e}")

    def _start_process(self, factory, core_kw: dict) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of torch's threads
        self._commands, child_commands = ctx.Pipe(duplex=False)[::-1]
        child_outputs, self._outputs = ctx.Pipe(duplex=False)[::-1]
        self._send_lock = threading.Lock()
        self._proc = ctx.Process(
            target=core_process_main,
            args=(child_commands, child_outputs, factory, core_kw, self.threads),
            name="ailab-engine-core",
            daemon=True,
        )
        self._proc.start()
        child_commands.close()
        child_outputs.close()
        threading.Thread(target=self._read_outputs, name="ailab-generation-outputs", daemon=True).start()

    def _read_outputs(self) -> None:
        try:
            while True:
                message = self._outputs.recv()
                if isinstance(message, StepOutput):
                    self._on_output(message)
                elif message[0] == "ready":
                    self.max_model_len, self.vocab_size = message[1]
                    self.ready.set()
                else:
                    self._died(f"the generation process failed to start: {message[1]}")
                    return
        except (EOFError, OSError):
            if not self._closed:
                self._died("the generation process ended")

    def _died(self, reason: str) -> None:
        self.dead_reason = reason
        self.ready.set()
        by_loop: dict = defaultdict(list)
        for stream in list(self._streams.values()):
            by_loop[stream.loop].append((stream, Update([], "error", reason)))
        self._streams.clear()
        _send(by_loop)

    # ---- what the core said, on its thread (or the thread reading the core process)

    def _on_output(self, out: StepOutput) -> None:
        self.running, self.waiting, self.blocks_free = out.running, out.waiting, out.blocks_free
        now = time.perf_counter()
        m = self.metrics
        if m is not None and out.stepped:
            m.steps.inc()
            m.step_seconds.inc(out.step_s)
            m.decoded.inc(out.decoded)
        by_loop: dict = defaultdict(list)
        for rid, made, tokens, reason in out.updates:
            stream = self._streams.get(rid)
            if stream is None:
                continue
            if made:
                if m is not None:
                    if stream.made == 0:
                        m.ttft.observe(now - stream.arrived)
                    elif stream.last_token_s is not None:
                        gap = (now - stream.last_token_s) / made
                        for _ in range(made):
                            m.itl.observe(gap)
                    m.tokens.inc(made)
                stream.made, stream.last_token_s = stream.made + made, now
            if reason is not None:
                del self._streams[rid]
                self._count_end(stream, reason)
                if reason == FinishReason.CANCELLED:  # nobody is listening any more
                    continue
            if tokens or reason:
                by_loop[stream.loop].append((stream, Update(tokens, reason)))
        for rid, error in out.errors:
            stream = self._streams.pop(rid, None)
            if stream is not None:
                self._count_end(stream, "error")
                by_loop[stream.loop].append((stream, Update([], "error", error)))
        _send(by_loop)

    def _count_end(self, stream: GenerationStream, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.requests.labels(reason).inc()
            self.metrics.e2e.observe(time.perf_counter() - stream.arrived)


def _send(by_loop: dict) -> None:
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_hand_over, items)
        except RuntimeError:  # that loop has closed (its server stopped): nobody to tell
            pass


def _hand_over(items: list) -> None:
    """On the event loop: each request's update onto its stream."""
    for stream, update in items:
        stream.updates.put_nowait(update)
