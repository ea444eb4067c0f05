"""One generation request as the engine core keeps it: what it asked for, where it is, and what it has made.

A request is WAITING (in the queue), RUNNING (its blocks allocated, its prompt prefilled), then FINISHED, with a
finish reason: LENGTH (it has max_tokens), STOP (a stop string matched), CANCELLED (its client left) or ERROR (a
failed step ended it). Both are `StrEnum`s, so a status or a reason is also its plain string:
`FinishReason.LENGTH == "length"`, and JSON, logs, metric labels and OpenAI's `finish_reason` read it as it is.
FinishReason is the one set of reasons from the core to the route: nothing else spells them.

`output` is the request's progress in the core; the front end keeps its own (the text it has handed on, its
timings) in the output processor (ailab/server/output_processor.py), fed by what the core reports each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ailab.generation.sampling_params import SamplingParams


class RequestStatus(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(StrEnum):
    LENGTH = "length"  # it made max_tokens
    STOP = "stop"  # a stop string matched
    CANCELLED = "cancelled"  # its client left, or the server dropped it
    ERROR = "error"  # a step failed: the server's fault, said to the client as such


@dataclass
class Request:
    id: int
    prompt: list[int]
    sampling_params: SamplingParams  # an int n is short for SamplingParams(max_tokens=n): greedy, no stop string
    arrival_s: float = 0.0
    output: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    preemptions: int = 0
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache: all but the last once it decodes

    def __post_init__(self):
        if isinstance(self.sampling_params, int) and not isinstance(self.sampling_params, bool):
            self.sampling_params = SamplingParams(max_tokens=self.sampling_params)
        if not isinstance(self.sampling_params, SamplingParams):
            raise TypeError(f"request {self.id}: sampling_params must be SamplingParams or an int of max tokens")

    @property
    def max_new_tokens(self) -> int:
        return self.sampling_params.max_tokens

    def finish_reason_now(self) -> FinishReason | None:
        """Why the request is done after its latest token, or None while it goes on."""
        if len(self.output) >= self.sampling_params.max_tokens:
            return FinishReason.LENGTH
        if self.output and self.sampling_params.stopped(self.output):
            return FinishReason.STOP
        return None

    @property
    def done(self) -> bool:
        return self.finish_reason_now() is not None
