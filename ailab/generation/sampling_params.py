"""SamplingParams: how a request's tokens are chosen and when it ends, named as vLLM names them.

One frozen value, made once where a request enters (the OpenAI route, a notebook, a bench) and carried as it is
to the sampler (executor.py) and the stop check (request.py): nothing on the way copies its fields one by one.

Stop strings are bytes. The course's model is byte-level, so a stop string is also a sequence of token ids, and
the engine core can end a request in the very step its stop string is made (vLLM checks stop *token ids* in the
core for the same reason, and stop *strings* in the front end, after detokenizing).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16  # tokens to generate at most
    temperature: float = 0.0  # 0: greedy (OpenAI's routes default to 1.0 and say so themselves)
    top_p: float = 1.0  # nucleus: draw from the fewest tokens whose probabilities reach top_p
    seed: int | None = None  # None: the request's id, so a rerun draws the same tokens
    stop: tuple[bytes, ...] = ()  # the request ends as soon as its output ends with one of these

    def __post_init__(self):
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not self.temperature >= 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"temperature must be >= 0 and top_p in (0, 1]; got {self.temperature}, {self.top_p}")
        object.__setattr__(self, "stop", tuple(bytes(s) for s in self.stop))  # a list from JSON, kept hashable

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def stopped(self, output: list[int]) -> bool:
        """Whether `output` (token ids, i.e. bytes here) now ends with one of the stop strings."""
        return any(len(output) >= len(s) and bytes(output[-len(s) :]) == s for s in self.stop)
