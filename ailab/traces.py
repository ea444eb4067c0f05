"""Request traces: what a load test sends, made in one place for every target (the engine core in process, an
OpenAI server over HTTP, vLLM's own client), so that two runs of the same trace are the same work.

    trace = make_trace(800, prompt_bytes=60, output_tokens=32)                  # flat out: every arrival at 0
    trace = make_trace(24, prompt_bytes=(8, 96), output_tokens=(4, 96), rate_rps=4.0, source="corpus")
    trace = make_trace(200, prompt_bytes=60, prefix_bytes=512)                 # a chat: one system prompt for all

A TraceRequest is a prompt (bytes: the course's models are byte-level, one byte one token), how many tokens to
generate, and when it arrives (seconds after the run starts). A fixed number means every request gets it; a
range (lo, hi) is drawn per request: prompt lengths uniform, output lengths log-uniform (many short answers, a
few long ones, as real traffic has). Arrivals at `rate_rps` are a Poisson process (independent users); at inf
they all arrive at once.

`long_prompt_bytes` makes every `long_every`-th prompt that long instead: a mixed trace, where long prompts
arrive among short ones (what chunked prefill is for). `prefix_bytes` puts the same text before every prompt (a chat service's system prompt: what prefix caching
turns into a lookup); `prompt_bytes` is then the part after it that differs.

Sources, both shipped with the course: "bench" (the review snippets every load test sends, ASCII, joined to the
exact length: the same text is the same work for any byte-level server) and "corpus" (cuts from the language
model's held-out text, ailab.generation.train's test split, where a model trained on the rest meets unseen text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class TraceRequest:
    prompt: bytes  # byte-level: one byte, one token
    max_tokens: int
    arrival_s: float = 0.0

    @property
    def text(self) -> str:
        """The prompt as text, for an HTTP body (a cut that splits a UTF-8 character gets the replacement mark)."""
        return self.prompt.decode("utf-8", errors="replace")


def poisson_arrivals(n: int, rate_rps: float, rng: np.random.Generator) -> np.ndarray:
    """`n` arrival times of a Poisson process at `rate_rps` (exponential gaps); all 0 at rate inf."""
    if math.isinf(rate_rps):
        return np.zeros(n)
    return np.cumsum(rng.exponential(1.0 / rate_rps, n))


def corpus_bytes(split: str = "test") -> bytes:
    """The review snippets of one split, one per line, as UTF-8: the text the byte-level model trains on."""
    from ailab.data import sentiment

    s = sentiment()
    texts = {"train": s.X_train, "test": s.X_test}.get(split)
    if texts is None:
        raise ValueError(f"split={split!r}; choose 'train' or 'test'")
    return "\n".join(texts).encode("utf-8")


def _range(name: str, value) -> tuple[int, int]:
    lo, hi = (value, value) if isinstance(value, int) else tuple(value)
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ValueError(f"{name} must be a whole number >= 1 or a range (lo, hi) with 1 <= lo <= hi; got {value!r}")
    return lo, hi


def make_trace(
    n: int,
    prompt_bytes: int | tuple[int, int] = 60,
    output_tokens: int | tuple[int, int] = 32,
    rate_rps: float = math.inf,
    source: str = "bench",
    seed: int = 0,
    text: bytes | Sequence[int] | None = None,
    prefix_bytes: int = 0,
    long_prompt_bytes: int = 0,
    long_every: int = 8,
) -> list[TraceRequest]:
    """`n` requests from `source` ("bench" or "corpus"; `text`: cut from these bytes instead), arriving at
    `rate_rps` (inf: all at once). Draws come from one generator seeded with `seed`, in a fixed order (arrivals,
    then per request its length, where it is cut, its output length), so a trace is the same on every machine."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number of requests >= 1, got {n!r}")
    if not rate_rps > 0:
        raise ValueError(f"rate_rps must be > 0 requests/s, or inf; got {rate_rps!r}")
    if not isinstance(prefix_bytes, int) or prefix_bytes < 0:
        raise ValueError(f"prefix_bytes must be a whole number >= 0, got {prefix_bytes!r}")
    if long_prompt_bytes and not (isinstance(long_every, int) and long_every >= 1 and long_prompt_bytes >= 1):
        raise ValueError(
            f"long_every must be >= 1 and long_prompt_bytes >= 1; got {long_every!r}, {long_prompt_bytes!r}"
        )
    if source not in ("bench", "corpus"):
        raise ValueError(f"source={source!r}; choose 'bench' (the load tests' snippets) or 'corpus' (held-out text)")
    (p_lo, p_hi), (o_lo, o_hi) = _range("prompt_bytes", prompt_bytes), _range("output_tokens", output_tokens)
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(n, rate_rps, rng)
    snippets = _bench_snippets(n, seed) if source == "bench" and text is None else None
    blob = None if snippets else (corpus_bytes("test") if text is None else bytes(_as_ints(text)))
    # the shared prefix comes from its own snippets, so a trace with one differs from one without only by it
    prefix = _joined(_bench_snippets(64, seed + 1), 0, prefix_bytes - 1) + b"\n" if prefix_bytes else b""
    out = []
    for i in range(n):
        length = p_lo if p_lo == p_hi else int(rng.integers(p_lo, p_hi + 1))
        if long_prompt_bytes and i % long_every == long_every - 1:  # a mixed trace: one long prompt in long_every
            length = long_prompt_bytes
        if snippets:
            prompt = _joined(snippets, i, length)
        else:
            start = int(rng.integers(0, len(blob) - length))
            prompt = blob[start : start + length]
        new = o_lo if o_lo == o_hi else int(round(np.exp(rng.uniform(np.log(o_lo), np.log(o_hi)))))
        out.append(TraceRequest(prefix + prompt, new, float(arrivals[i])))
    return out


def with_arrivals(trace: Sequence[TraceRequest], rate_rps: float, seed: int = 0) -> list[TraceRequest]:
    """The same requests arriving as a Poisson process at `rate_rps` (inf: all at once)."""
    arrivals = poisson_arrivals(len(trace), rate_rps, np.random.default_rng(seed))
    return [TraceRequest(t.prompt, t.max_tokens, float(a)) for t, a in zip(trace, arrivals)]


def _as_ints(text) -> list[int]:
    return text.tolist() if hasattr(text, "tolist") else list(text)


def _bench_snippets(n: int, seed: int) -> list[bytes]:
    from ailab.data import bench_texts

    return [t.encode("ascii", "ignore") for t in bench_texts(max(n, 64), seed=seed)]


def _joined(snippets: list[bytes], i: int, length: int) -> bytes:
    """Snippet i, and the next ones after a space until it is `length` bytes long, cut there."""
    text = snippets[i % len(snippets)]
    while len(text) < length:
        text += b" " + snippets[(i + len(text)) % len(snippets)]
    return text[:length]
