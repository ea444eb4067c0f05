"""The front end's one owner of each request's progress (vLLM v1's OutputProcessor): what the core reports after
every step goes in, and each route gets its RequestOutputs out, on its own event loop.

For each live request it keeps a RequestState: its detokenizer (bytes to whole UTF-8, a stop string never shown),
the tokens made so far and the times the metrics need (time to first token as the front end sees it, the gaps
between tokens). It hands a route's event loop everything of one step in ONE call (`call_soon_threadsafe` per
step, not per token or per request), and forgets a request once it has ended: a server that runs for days holds
only what is waiting and running. A request that does not stream gets one RequestOutput, at its end, with all of
its text: it needs nothing sooner, and a wake-up per step would cost the event loop for nothing.

`process_outputs` runs on the core client's thread (the core's own thread, or the thread reading its pipe).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ailab.generation.core_io import EngineCoreOutputs
from ailab.generation.request import FinishReason
from ailab.server.detokenizer import IncrementalDetokenizer


@dataclass
class RequestOutput:
    """What a route reads: new text (all of it, for a request that does not stream), the completion's tokens so
    far, and how the request ended once it has."""

    text: str
    completion_tokens: int
    finish_reason: FinishReason | None = None
    error: str | None = None  # with FinishReason.ERROR


@dataclass
class RequestState:
    """One live request on the front end. `outputs` is the route's queue, on the event loop `loop`."""

    request_id: int
    prompt_tokens: int
    outputs: asyncio.Queue
    loop: asyncio.AbstractEventLoop
    detokenizer: IncrementalDetokenizer
    stream: bool = True
    arrived: float = field(default_factory=time.perf_counter)
    completion_tokens: int = 0
    last_token_s: float | None = None
    held_text: list[str] = field(default_factory=list)  # a whole answer's text, until its end


class OutputProcessor:
    def __init__(self):
        self.request_states: dict[int, RequestState] = {}
        self.metrics = None  # llm_metrics.GenerationMetrics, once the app has a registry
        self._prefix_seen = (0, 0)  # the core's cumulative prefix-cache queries and hits, as last counted

    def add_request(self, state: RequestState) -> None:
        self.request_states[state.request_id] = state
        if self.metrics is not None:
            self.metrics.prompt_tokens.inc(state.prompt_tokens)

    def process_outputs(self, outs: EngineCoreOutputs) -> None:
        now, m = time.perf_counter(), self.metrics
        if m is not None and outs.stats.stepped:
            m.steps.inc()
            m.step_seconds.inc(outs.stats.step_s)
            m.decoded.inc(outs.stats.decoded)
        if m is not None:
            q, h = outs.stats.prefix_cache_queries, outs.stats.prefix_cache_hits
            m.prefix_cache_queries.inc(max(0, q - self._prefix_seen[0]))
            m.prefix_cache_hits.inc(max(0, h - self._prefix_seen[1]))
            self._prefix_seen = (q, h)
        by_loop: dict = defaultdict(list)
        for out in outs.outputs:
            state = self.request_states.get(out.request_id)
            if state is None:  # ended already (aborted on the front end, or the core repeated itself)
                continue
            made = len(out.new_token_ids)
            if made:
                self._observe_tokens(state, made, now)
            reason = out.finish_reason
            text = state.detokenizer.feed(out.new_token_ids, reason if reason != FinishReason.ERROR else None)
            if reason is not None:
                del self.request_states[out.request_id]
                self._count_end(state, reason)
                if reason == FinishReason.CANCELLED:  # nobody is listening any more
                    continue
            if not state.stream:
                state.held_text.append(text)
                if reason is None:
                    continue
                text = "".join(state.held_text)
            if text or reason is not None:
                by_loop[state.loop].append((state, RequestOutput(text, state.completion_tokens, reason, out.error)))
        _hand_over_all(by_loop)

    def abort_all(self, reason: str) -> None:
        """The core is gone: every live request ends with the reason, as an error."""
        by_loop: dict = defaultdict(list)
        for state in list(self.request_states.values()):
            self._count_end(state, FinishReason.ERROR)
            by_loop[state.loop].append((state, RequestOutput("", state.completion_tokens, FinishReason.ERROR, reason)))
        self.request_states.clear()
        _hand_over_all(by_loop)

    def _observe_tokens(self, state: RequestState, made: int, now: float) -> None:
        m = self.metrics
        if m is not None:
            if state.completion_tokens == 0:
                m.ttft.observe(now - state.arrived)
            elif state.last_token_s is not None:
                gap = (now - state.last_token_s) / made
                for _ in range(made):
                    m.itl.observe(gap)
            m.tokens.inc(made)
        state.completion_tokens, state.last_token_s = state.completion_tokens + made, now

    def _count_end(self, state: RequestState, reason: FinishReason) -> None:
        if self.metrics is not None:
            self.metrics.requests.labels(reason).inc()
            self.metrics.e2e.observe(time.perf_counter() - state.arrived)


def _hand_over_all(by_loop: dict) -> None:
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_hand_over, items)
        except RuntimeError:  # that loop has closed (its server stopped): nobody to tell
            pass


def _hand_over(items: list) -> None:
    """On the event loop: each request's output onto its queue."""
    for state, output in items:
        state.outputs.put_nowait(output)
