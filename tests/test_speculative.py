"""Speculative decoding (ailab.generation.speculative): greedy speculation gives the target's own greedy tokens
whatever the proposer guesses, and the rejection rule keeps the target's distribution (tested statistically)."""

from __future__ import annotations

import pytest
import torch

from ailab.generation import Decoder, generate
from ailab.generation.speculative import (
    DraftProposer,
    NgramProposer,
    accept_greedy,
    accept_sampled,
    speculative_generate,
)
from ailab.models import tiny_gpt


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    model = tiny_gpt("1m", seed=3)
    with torch.no_grad():  # sharper logits than a fresh init, so that tokens differ from one another
        for p in model.parameters():
            p.mul_(8)
    return Decoder(model)


class Guesses:
    """A proposer for the tests: the right tokens where `right` says so, a wrong one elsewhere."""

    def __init__(self, truth: list[int], right):
        self.truth, self.right, self.forwards = truth, right, 0

    def start(self, prompt, max_len):
        self.prompt = len(prompt)

    def propose(self, seq, k, temperature, gen):
        at = len(seq) - self.prompt
        out = []
        for i in range(k):
            t = self.truth[at + i] if at + i < len(self.truth) else 0
            out.append(t if self.right(at + i) else (t + 1) % 256)
        return out, None


def _prompt(n=12, seed=0):
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("pattern", ["all right", "all wrong", "every third wrong"])
def test_greedy_speculation_gives_the_targets_own_tokens(target, k, pattern):
    ids = _prompt()
    want = generate(target, ids, 30)
    truth = want[0].tolist()
    right = {"all right": lambda i: True, "all wrong": lambda i: False, "every third wrong": lambda i: i % 3 != 2}
    out, stats = speculative_generate(target, ids, 30, Guesses(truth, right[pattern]), k=k)
    assert torch.equal(out, want)
    assert stats.new_tokens == 30 and stats.accepted <= stats.proposed
    if pattern == "all right":
        assert stats.acceptance == 1 and stats.target_forwards <= 2 + 30 // (k + 1)
    if pattern == "all wrong":
        assert stats.accepted == 0 and stats.target_forwards == 30  # one token a round, as plain decoding


@pytest.mark.parametrize("new_tokens", [1, 2, 5])
def test_short_answers_and_a_draft_model(target, new_tokens):
    ids = _prompt(seed=1)
    want = generate(target, ids, new_tokens)
    for proposer in (DraftProposer(Decoder(tiny_gpt("1m", seed=5))), DraftProposer(target), NgramProposer()):
        out, _ = speculative_generate(target, ids, new_tokens, proposer, k=4)
        assert torch.equal(out, want), type(proposer).__name__


def test_a_draft_identical_to_the_target_is_always_right(target):
    ids = _prompt(seed=2)
    out, stats = speculative_generate(target, ids, 40, DraftProposer(target), k=4)
    assert torch.equal(out, generate(target, ids, 40)) and stats.acceptance == 1
    assert stats.tokens_per_target_forward > 4


def test_ngram_lookup_proposes_what_followed_the_last_tokens():
    seq = [1, 2, 3, 9, 9, 1, 2, 3, 7, 1, 2, 3]
    assert NgramProposer(max_n=3).propose(seq, 2, 0.0, None)[0] == [7, 1]  # the most recent earlier match
    assert NgramProposer(max_n=3).propose([5, 6, 7], 2, 0.0, None)[0] == []  # nothing recurs
    assert NgramProposer(max_n=2).propose([4, 8, 4], 3, 0.0, None)[0] == [8, 4]  # 1-gram "4" at the start
    with pytest.raises(ValueError, match="min_n"):
        NgramProposer(max_n=1, min_n=2)


def test_accept_greedy_keeps_the_agreeing_prefix_and_the_targets_next():
    logits = torch.nn.functional.one_hot(torch.tensor([5, 6, 7, 8]), 10).float()  # the target says 5, 6, 7, then 8
    assert accept_greedy([5, 6, 7], logits) == (3, 8)
    assert accept_greedy([5, 0, 7], logits) == (1, 6)
    assert accept_greedy([0, 6, 7], logits) == (0, 5)
    assert accept_greedy([], logits[:1]) == (0, 5)


def test_the_rejection_rule_keeps_the_targets_distribution():
    """Draft q and target p over 5 tokens, 40,000 rounds of one proposal: the first token out follows p, not q."""
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3]])
    counts = torch.zeros(5)
    kept = 0
    for _ in range(40_000):
        x = int(torch.multinomial(q[0], 1, generator=gen))
        n, extra = accept_sampled([x], q, p, gen)
        first = x if n == 1 else extra
        counts[first] += 1
        kept += n
    seen = counts / counts.sum()
    assert (seen - p[0]).abs().max() < 0.01, seen
    # the expected acceptance is sum(min(p, q)) = 0.1 + 0.1 + 0.15 + 0.1 + 0.05
    assert abs(kept / 40_000 - 0.5) < 0.01


def test_sampled_speculation_is_repeatable_and_draws_from_the_target(target):
    ids = _prompt(seed=3)
    a, sa = speculative_generate(target, ids, 20, DraftProposer(Decoder(tiny_gpt("1m", seed=5))), 4, 0.8, seed=7)
    b, _ = speculative_generate(target, ids, 20, DraftProposer(Decoder(tiny_gpt("1m", seed=5))), 4, 0.8, seed=7)
    assert torch.equal(a, b) and a.shape == (1, 20) and 0 <= sa.acceptance <= 1
    c, _ = speculative_generate(target, ids, 20, NgramProposer(), 4, 0.8, seed=7)
    assert c.shape == (1, 20)


def test_bad_arguments_are_refused_in_words(target):
    with pytest.raises(ValueError, match="one sequence"):
        speculative_generate(target, torch.zeros(2, 4, dtype=torch.long), 4, NgramProposer())
    with pytest.raises(ValueError, match="k \\(tokens proposed a round\\)"):
        speculative_generate(target, _prompt(), 4, NgramProposer(), k=0)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, _prompt(), 4, NgramProposer(), temperature=-1)
    with pytest.raises(ValueError, match="positions"):
        speculative_generate(target, _prompt(), 495, DraftProposer(Decoder(tiny_gpt("1m"))), k=8)
