"""What crosses between the front end and the engine core, as vLLM v1 names it: plain data that pickles small,
because in a server the core runs in a process of its own and every step's news goes through a pipe.

    front end -> core   EngineCoreRequest  one request: its id, its prompt's token ids, its SamplingParams
                        (EngineCoreRequestType.ADD), or an id to drop (ABORT), or CLOSE
    core -> front end   EngineCoreOutputs  after each step: one EngineCoreOutput per request that made a token
                        or ended (its new token ids, its FinishReason once it has one), and SchedulerStats

A finished request leaves the core with its last EngineCoreOutput: nothing of it stays there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from ailab.generation.request import FinishReason
from ailab.generation.sampling_params import SamplingParams


class EngineCoreRequestType(StrEnum):
    ADD = "add"  # an EngineCoreRequest
    ABORT = "abort"  # a request id: its client left
    CLOSE = "close"  # nothing: stop the loop


@dataclass
class EngineCoreRequest:
    request_id: int
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_s: float = 0.0


class EngineCoreOutput(NamedTuple):  # a tuple: one per request per step, so cheap to make and to pickle
    request_id: int
    new_token_ids: list[int]
    finish_reason: FinishReason | None = None
    error: str | None = None  # with FinishReason.ERROR: what failed


@dataclass
class SchedulerStats:
    """The engine's figures after a step (or after commands, when it did not step)."""

    stepped: bool = False
    step_s: float = 0.0  # seconds inside the step
    decoded: int = 0  # sequences that made a token in it
    running: int = 0
    waiting: int = 0
    blocks_free: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache, since the core started
    prefix_cache_hits: int = 0  # of those, tokens whose K/V were found there


@dataclass
class EngineCoreOutputs:
    outputs: list[EngineCoreOutput] = field(default_factory=list)
    stats: SchedulerStats = field(default_factory=SchedulerStats)
