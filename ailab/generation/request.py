"""One generation request's record: what it asked for, where it is, and what it has made so far.

A request is WAITING (in the queue), RUNNING (its blocks allocated, its prompt prefilled), then FINISHED, with a
finish reason: LENGTH (it has max_new_tokens), STOP (its stop rule matched) or CANCELLED. Both are `StrEnum`s, so
a state or a reason is also its plain string: `FinishReason.LENGTH == "length"`, and JSON, logs, metric labels and
OpenAI's `finish_reason` read exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable


class RequestState(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(StrEnum):
    LENGTH = "length"  # it made max_new_tokens
    STOP = "stop"  # its stop rule matched
    CANCELLED = "cancelled"  # its client left, or the server dropped it


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    arrival_s: float = 0.0
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None  # the sampling seed; None: the request's id
    stop: Callable[[list[int]], bool] | None = None  # called with the output so far: True ends the request
    output: list[int] = field(default_factory=list)
    state: RequestState = RequestState.WAITING
    finish_reason: FinishReason | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    preemptions: int = 0

    @property
    def done(self) -> bool:
        return len(self.output) >= self.max_new_tokens or (
            self.stop is not None and bool(self.output) and self.stop(self.output)
        )
