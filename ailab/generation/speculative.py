"""Speculative decoding: a cheap guess of the next k tokens, checked by the model in one forward.

A decode step at batch 1 reads every weight for one token; a forward over k + 1 tokens reads them once for all of
them, at nearly the same cost. So something cheap proposes k tokens, the target model scores them in one forward,
and the longest prefix the target agrees with is kept, plus one token of the target's own (the correction where it
disagreed, or a bonus after k agreements). Every round makes at least one token; a good guesser makes several.

    proposers    DraftProposer(draft)    a small model's own greedy or sampled guesses (its own KV cache)
                 BigramProposer(text)    a draft that costs nothing to run: the next-byte table of a text
                 NgramProposer()         prompt lookup: the tokens that followed the last n tokens where they
                                         appeared earlier in the context (vLLM's "ngram" method; no model at all)
    verify       greedy: keep the draft tokens while they equal the target's argmax
                 sampled: accept_sampled, the rejection rule that keeps the target's distribution exactly (a draft
                 token x is kept with probability min(1, p(x) / q(x)); on a rejection the token is drawn from
                 max(0, p - q), renormalised)

Greedy speculation gives the target's own greedy tokens, token for token (tests/test_speculative.py); sampled
speculation gives tokens from the target's distribution. One sequence at a time, over the contiguous KVCache,
as gpt-fast's speculative_decode: a rejected guess is undone by moving the cache's length back.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field

import torch

from ailab.generation.decode import _check_prompt
from ailab.generation.kv_cache import KVCache


@dataclass
class SpeculativeStats:
    """What a run proposed and kept: acceptance is accepted / proposed; tokens per target forward is the gain."""

    proposed: int = 0
    accepted: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    accepted_by_round: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0


def _extend(model, cache: KVCache, ids: list[int], device) -> torch.Tensor:
    """Feed `ids` (the tokens after what `cache` holds) in one forward; logits (len(ids), vocab) out."""
    x = torch.tensor([ids], device=device)  # (1, T)
    logits = model(x, cache.view(len(ids)))  # (1, T, vocab)
    cache.advance(len(ids))
    return logits[0]


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


class DraftProposer:
    """Proposals from a small model that shares the target's vocabulary, decoded greedily (or sampled at the run's
    temperature). It keeps its own KV cache and catches up on the tokens it has not seen at each round."""

    def __init__(self, draft):
        self.draft = draft

    def start(self, prompt: list[int], max_len: int) -> None:
        if max_len > self.draft.max_positions:
            raise ValueError(
                f"the draft model has {self.draft.max_positions} positions; this run needs {max_len} (prompt, new "
                "tokens and one round's proposals)"
            )
        self.cache = KVCache.for_model(self.draft, 1, max_len)
        self.forwards = 0

    def propose(self, seq: list[int], k: int, temperature: float, gen) -> tuple[list[int], torch.Tensor | None]:
        """k tokens after `seq`, and (sampling) the draft's distribution each was drawn from, (k, vocab)."""
        self.cache.length = min(self.cache.length, len(seq) - 1)  # forget what the target rejected
        tokens, dists = [], []
        logits = _extend(self.draft, self.cache, seq[self.cache.length :], self.draft.device)[-1]
        self.forwards += 1
        for i in range(k):
            if temperature == 0:
                token = int(logits.argmax())
            else:
                q = _probs(logits, temperature)
                token = int(torch.multinomial(q, 1, generator=gen))
                dists.append(q)
            tokens.append(token)
            if i < k - 1:
                logits = _extend(self.draft, self.cache, [token], self.draft.device)[-1]
                self.forwards += 1
        return tokens, (torch.stack(dists) if dists else None)


class BigramProposer:
    """A draft model reduced to a table: how often each byte followed each byte in a training text (add-one). Its
    guesses chain from the last token: the likeliest next byte (greedy) or a draw from the row (sampling). Counting
    takes milliseconds and a guess is a table lookup, so the whole gain of speculation is left to the target."""

    def __init__(self, text: torch.Tensor, vocab: int = 256):
        if text.dim() != 1 or len(text) < 2:
            raise ValueError(
                f"the bigram table is counted over a 1-D tensor of token ids; got shape {tuple(text.shape)}"
            )
        counts = torch.ones(vocab, vocab)
        counts.index_put_((text[:-1].long(), text[1:].long()), torch.ones(len(text) - 1), accumulate=True)
        self.probs = counts / counts.sum(dim=1, keepdim=True)  # (vocab, vocab): row a, the next byte's probabilities
        self.forwards = 0

    def start(self, prompt: list[int], max_len: int) -> None:
        pass

    def propose(self, seq: list[int], k: int, temperature: float, gen) -> tuple[list[int], torch.Tensor | None]:
        tokens, dists, last = [], [], seq[-1]
        for _ in range(k):
            if temperature == 0:
                last = int(self.probs[last].argmax())
            else:
                q = torch.softmax(self.probs[last].log() / temperature, dim=-1)
                last = int(torch.multinomial(q, 1, generator=gen))
                dists.append(q)
            tokens.append(last)
        return tokens, (torch.stack(dists) if dists else None)


class NgramProposer:
    """Prompt lookup: find the most recent earlier place where the context's last n tokens appeared (n from
    `max_n` down to `min_n`) and propose the k tokens that followed it there; nothing where no n-gram recurs."""

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n; got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n, self.forwards = max_n, min_n, 0

    def start(self, prompt: list[int], max_len: int) -> None:
        pass

    def propose(self, seq: list[int], k: int, temperature: float, gen) -> tuple[list[int], None]:
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):  # most recent match first, never the tail itself
                if seq[start : start + n] == tail:
                    follow = seq[start + n : start + n + k]
                    if follow:
                        return follow, None
        return [], None


def accept_greedy(proposal: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """(how many of `proposal` the target's argmax agrees with, in order; the target's own next token after them).
    target_logits (len(proposal) + 1, vocab): row i predicts the token after proposal[:i]."""
    choice = target_logits.argmax(dim=-1).tolist()
    n = 0
    while n < len(proposal) and proposal[n] == choice[n]:
        n += 1
    return n, choice[n]


def accept_sampled(
    proposal: list[int], draft_probs: torch.Tensor, target_probs: torch.Tensor, gen: torch.Generator | None
) -> tuple[int, int]:
    """The rejection rule (Leviathan et al. 2023; Chen et al. 2023): draft token x_i, drawn from q_i, is kept with
    probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection the token is drawn from max(0, p_i - q_i),
    renormalised, and the round ends; after k acceptances a bonus token is drawn from p_k. The tokens that come
    out are distributed as the target's own samples. draft_probs (k, vocab), target_probs (k + 1, vocab)."""
    for i, x in enumerate(proposal):
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        if float(torch.rand((), generator=gen)) * q < p:  # u < p / q, without dividing by a q of 0
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp(min=0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else target_probs[i]
        return i, int(torch.multinomial(residual, 1, generator=gen))
    return len(proposal), int(torch.multinomial(target_probs[len(proposal)], 1, generator=gen))


@torch.inference_mode()
def speculative_generate(
    target,
    ids: torch.Tensor,
    max_new_tokens: int,
    proposer,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    accept=accept_greedy,
) -> tuple[torch.Tensor, SpeculativeStats]:
    """One prompt (1, T) -> (1, max_new_tokens) new ids, `proposer` guessing up to k tokens a round and the target
    checking them in one forward. Greedy (temperature 0) gives generate()'s tokens exactly. `accept` is the greedy
    rule (accept_greedy's contract; the exercise of chapter 5.8 runs a learner's here)."""
    _check_prompt(target, ids, max_new_tokens)
    if ids.shape[0] != 1:
        raise ValueError(f"speculative_generate decodes one sequence; got a batch of {ids.shape[0]}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k (tokens proposed a round) must be an int >= 1; got {k!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0; got {temperature}")
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    prompt = ids[0].tolist()
    max_len = len(prompt) + max_new_tokens + k + 1
    cache = KVCache.for_model(target, 1, max_len)
    proposer.start(prompt, max_len)
    stats = SpeculativeStats()

    def pick(logits):
        if temperature == 0:
            return int(logits.argmax())
        return int(torch.multinomial(_probs(logits, temperature), 1, generator=gen))

    first = pick(_extend(target, cache, prompt, ids.device)[-1])  # the prefill's own token
    stats.target_forwards += 1
    seq = prompt + [first]
    while len(seq) - len(prompt) < max_new_tokens:
        left = max_new_tokens - (len(seq) - len(prompt))
        proposal, draft_probs = proposer.propose(seq, min(k, left - 1), temperature, gen) if left > 1 else ([], None)
        # the target scores the one token it has not cached (the last) and the proposal, in one forward
        logits = _extend(target, cache, [seq[-1]] + proposal, ids.device)  # (1 + len(proposal), vocab)
        stats.target_forwards += 1
        if temperature == 0:
            n, extra = accept(proposal, logits)
            if not (
                isinstance(n, numbers.Integral) and 0 <= n <= len(proposal) and isinstance(extra, numbers.Integral)
            ):
                raise ValueError(f"accept() should give (tokens kept: 0..{len(proposal)}, the next token as an int)")
            n, extra = int(n), int(extra)
        else:
            if draft_probs is None:  # a proposal without a distribution (n-gram): certain, a one-hot q per token
                draft_probs = torch.nn.functional.one_hot(
                    torch.tensor(proposal, dtype=torch.long), logits.shape[-1]
                ).float()
            n, extra = accept_sampled(proposal, draft_probs.to(logits.device), _probs(logits, temperature), gen)
        cache.length -= len(proposal) - n  # undo the rejected tokens' K/V
        seq += proposal[:n] + [extra]
        stats.proposed += len(proposal)
        stats.accepted += n
        stats.accepted_by_round.append(n)
    stats.draft_forwards = proposer.forwards
    out = seq[len(prompt) : len(prompt) + max_new_tokens]
    stats.new_tokens = len(out)
    stats.seconds = time.perf_counter() - t0
    return torch.tensor([out], device=ids.device), stats


def speculation_by_k(target, proposers: dict, prompts: dict, new_tokens: int = 64, rounds: int = 3) -> list[dict]:
    """Per named set of prompts (each (1, T)) and per named proposer ({name: (make a proposer, k)}): the
    acceptance, the tokens per target forward, and the speed-up of greedy speculation over plain decoding
    (generate), timed in interleaved rounds per prompt (the median of per-round ratios, then the median over the
    prompts). Every speculative run is checked to give generate()'s tokens."""
    import numpy as np

    from ailab.generation.decode import generate
    from ailab.timing import interleaved

    rows = []
    for name, set_prompts in prompts.items():
        per = {v: {"acceptance": [], "tokens_per_target_forward": [], "speedup": []} for v in proposers}
        for ids in set_prompts:
            want = generate(target, ids, new_tokens)
            fns = {"plain": lambda ids=ids: generate(target, ids, new_tokens)}
            for v, (make, k) in proposers.items():
                out, stats = speculative_generate(target, ids, new_tokens, make(), k=k)
                if not torch.equal(out, want):
                    raise AssertionError(f"{v} changed the greedy tokens on a prompt of {name!r}")
                per[v]["acceptance"].append(stats.acceptance)
                per[v]["tokens_per_target_forward"].append(stats.tokens_per_target_forward)
                fns[v] = lambda ids=ids, make=make, k=k: speculative_generate(target, ids, new_tokens, make(), k=k)
            comparison = interleaved(fns, rounds=rounds, warmup=1, device=target.device)
            for v in proposers:
                per[v]["speedup"].append(comparison.ratio("plain", v))
        for v, (_, k) in proposers.items():
            rows.append(
                {"prompts": name, "proposer": v, "k": k} | {key: float(np.median(x)) for key, x in per[v].items()}
            )
    return rows
