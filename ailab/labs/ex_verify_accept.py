"""Exercise checks: speculative decoding's verify-and-accept step, greedy and sampled (chapter 5.8, issue 45).

The learner writes
  accept_greedy(proposal, target_logits) -> (kept, next_token)
      proposal: the k token ids guessed after the sequence (k >= 0); target_logits (k + 1, vocab): row i is the
      target's logits for the token after the sequence and proposal[:i]. kept: how many leading guesses equal the
      target's choice (argmax) at their row, stopping at the first that does not; next_token: the target's choice
      at the row after them (the correction where it disagreed, or a bonus after all k). Ints.
  accept_sampled(proposal, draft_probs, target_probs, uniforms) -> (kept, next_probs)
      draft_probs (k, vocab): q_i, the distribution guess i was drawn from; target_probs (k + 1, vocab): p_i;
      uniforms: k numbers in [0, 1). Guess i (token x) is kept while uniforms[i] < p_i(x) / q_i(x) (always when
      p_i(x) >= q_i(x)); at the first guess not kept, the round ends and next_probs is max(0, p_i - q_i), divided by
      its sum (p_i itself where that sum is 0); after all k, next_probs is p_k.

The checks: rounds worked by hand for each rule (a first guess rejected, a middle one, none, all, k = 0, ties in
the target's choice broken to the lowest id, the residual renormalised); the greedy rule run inside the real
speculative decoder (ailab.generation.speculative), which must then give the target's own greedy tokens; then
both rules against the reference on generated rounds.
"""

from __future__ import annotations

import numbers

import torch

from ailab.generation.speculative import accept_greedy as _ref_greedy
from ailab.labs.core import answer, check, expect
from ailab.labs.differential import same_as_reference, short

LAB = "ex_verify_accept"


def _logits_choosing(choices: list[int], vocab: int = 6) -> torch.Tensor:
    """Logits whose argmax at row i is choices[i] (the others lower, and distinct)."""
    rows = torch.arange(vocab, dtype=torch.float32).repeat(len(choices), 1) * 0.01  # (k + 1, vocab)
    for i, c in enumerate(choices):
        rows[i, c] = 5.0
    return rows


def _pair(out, what: str, second: str):
    expect(
        isinstance(out, (tuple, list)) and len(out) == 2,
        f"{what}: return two things, (kept, {second}); got {short(out)}",
    )
    kept = out[0]
    expect(
        isinstance(kept, numbers.Integral) and not isinstance(kept, bool),
        f"{what}: kept should be an int (how many guesses are kept); got {type(kept).__name__} {kept!r}",
    )
    return int(kept), out[1]


def _greedy(fn, proposal, logits, what):
    kept, token = _pair(answer(fn, list(proposal), logits.clone(), what=what), what, "next_token")
    expect(
        isinstance(token, numbers.Integral) and not isinstance(token, bool),
        f"{what}: next_token should be an int (a token id); got {type(token).__name__} {token!r}"
        + (" - a tensor's .item() or int() gives the int" if isinstance(token, torch.Tensor) else ""),
    )
    return kept, int(token)


@check(LAB, "the greedy rule, by hand: the agreeing prefix, then the target's own token")
def check_greedy_by_hand(accept_greedy):
    cases = [  # proposal, the target's choice at each row, (kept, next)
        ([4, 1, 2], [4, 1, 2, 5], (3, 5), "all three guesses agree: the bonus is row 3's choice"),
        ([4, 1, 2], [4, 3, 2, 5], (1, 3), "the second guess disagrees: one kept, and row 1's choice replaces it"),
        ([0, 1, 2], [4, 1, 2, 5], (0, 4), "the first guess disagrees, the later ones agree: nothing is kept"),
        ([], [2], (0, 2), "no guesses (k = 0): a plain decode step, row 0's choice"),
    ]
    for proposal, choices, want, name in cases:
        what = f"{name} (proposal {proposal}, the target's argmax per row {choices})"
        got = _greedy(accept_greedy, proposal, _logits_choosing(choices), what)
        hint = ""
        if got[0] > want[0]:
            hint = " - a guess after a disagreement is conditioned on the wrong token: stop at the first one"
        elif got[0] == want[0] and want[0] < len(proposal) and got[1] == proposal[want[0]] != want[1]:
            hint = " - that is the rejected guess itself: the target's own choice replaces it"
        elif got[0] + 1 < len(choices) and got[1] == choices[got[0] + 1] != want[1]:
            hint = " - the next token is the choice at row `kept`, the row right after the kept guesses"
        expect(got == want, f"{what}: (kept, next_token) = {want}; got {got}{hint}")
    tie = torch.zeros(2, 6)
    tie[0, [1, 3]] = 2.0
    tie[1, [2, 5]] = 2.0
    got = _greedy(accept_greedy, [1], tie, "a tie at both rows")
    expect(got == (1, 2), f"ties in a row go to the lowest token id, as argmax breaks them: (1, 2); got {got}")


@check(LAB, "your greedy rule inside the real speculative decoder gives the target's own tokens")
def check_greedy_in_the_decoder(accept_greedy):
    from ailab.generation import generate
    from ailab.generation.speculative import BigramProposer, NgramProposer, speculative_generate
    from ailab.labs.core import tiny_decoder

    model = tiny_decoder(seed=3)
    noise = torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(9))
    guessers = [  # prompt lookup (often right on a random model's repetitions), a table of noise (mostly wrong)
        ("prompt lookup", NgramProposer, 1),
        ("a bigram table of random bytes", lambda: BigramProposer(noise), 4),
        ("prompt lookup", NgramProposer, 8),
    ]
    for seed, (name, make, k) in enumerate(
        guessers + [("a guesser that knows the answer but errs every third token", None, 4)]
    ):
        ids = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(seed))
        want = generate(model, ids, 24)
        make = make or (lambda: _ErrsEveryThird(want[0].tolist()))
        what = f"{name} guessing {k} token(s) a round, 24 new tokens after a 24-token prompt (seed {seed})"
        out, stats = answer(speculative_generate, model, ids, 24, make(), k=k, accept=accept_greedy, what=what)
        expect(
            torch.equal(out, want),
            f"{what}: the tokens should be generate()'s, {want[0].tolist()}; got {out[0].tolist()} "
            f"({stats.accepted} of {stats.proposed} guesses kept)",
        )


class _ErrsEveryThird:
    """Proposes the target's own next tokens, but the 3rd, 6th, ... of the answer one id off: a wrong guess with
    right ones after it, which only a rule that stops at the first disagreement handles."""

    forwards = 0

    def __init__(self, truth: list[int]):
        self.truth = truth

    def start(self, prompt, max_len):
        self.prompt = len(prompt)

    def propose(self, seq, k, temperature, gen):
        at = len(seq) - self.prompt
        out = [self.truth[i] if i < len(self.truth) else 0 for i in range(at, at + k)]
        return [t if (at + i) % 3 != 2 else (t + 1) % 256 for i, t in enumerate(out)], None


def _probs(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def _sampled(fn, proposal, q, p, u, what):
    kept, dist = _pair(answer(fn, list(proposal), q.clone(), p.clone(), list(u), what=what), what, "next_probs")
    try:
        dist = torch.as_tensor(dist, dtype=torch.float64)
    except Exception:  # noqa: BLE001 - anything the learner returned
        dist = None
    expect(
        dist is not None and tuple(dist.shape) == (p.shape[1],),
        f"{what}: next_probs should be one distribution over the {p.shape[1]} tokens; got {short(out_of(dist))}",
    )
    return kept, dist


def out_of(x):
    return x.tolist() if isinstance(x, torch.Tensor) else x


@check(LAB, "the sampled rule, by hand: keep while u < p / q, then the residual max(0, p - q) renormalised")
def check_sampled_by_hand(accept_sampled):
    q = _probs([[0.5, 0.25, 0.25], [0.2, 0.6, 0.2]])
    p = _probs([[0.25, 0.5, 0.25], [0.1, 0.3, 0.6], [0.7, 0.2, 0.1]])
    cases = [  # proposal, uniforms, (kept, next_probs), why
        (
            [0, 1],
            [0.49, 0.49],
            (2, [0.7, 0.2, 0.1]),
            "both kept (0.49 < 0.25/0.5 and 0.49 < 0.3/0.6): p_2 gives the bonus",
        ),
        (
            [0, 1],
            [0.51, 0.1],
            (0, [0.0, 1.0, 0.0]),
            "the first rejected (0.51 >= 0.5): max(0, p_0 - q_0) = [0, .25, 0]",
        ),
        ([1, 1], [0.99, 0.6], (1, [0.0, 0.0, 1.0]), "p_0(1) >= q_0(1) keeps guess 0 whatever u; guess 1 rejected"),
        ([], [], (0, [0.25, 0.5, 0.25]), "no guesses: the next token is drawn from p_0"),
    ]
    for proposal, u, (kept, probs), why in cases:
        k = len(proposal)
        what = f"{why} (proposal {proposal}, uniforms {u})"
        got_kept, dist = _sampled(accept_sampled, proposal, q[:k], p[: k + 1], u, what)
        expect(
            got_kept == kept,
            f"{what}: {kept} guess(es) kept; got {got_kept}. Guess i is kept while uniforms[i] < p_i(x) / q_i(x)",
        )
        expect(
            torch.allclose(dist, _probs(probs), atol=1e-6),
            f"{what}: next_probs {probs}; got {[round(x, 4) for x in dist.tolist()]}"
            + (
                " - divide the residual by its sum, so that it is a distribution"
                if abs(float(dist.sum()) - 1) > 1e-6
                else ""
            ),
        )
    same = _probs([[0.2, 0.3, 0.5]])
    got_kept, dist = _sampled(accept_sampled, [2], same, _probs([[0.2, 0.3, 0.5], [1, 0, 0]]), [0.999], "q = p")
    expect(got_kept == 1, f"where the draft's distribution equals the target's, every guess is kept; got {got_kept}")


def _reference_sampled(proposal, draft_probs, target_probs, uniforms):
    for i, x in enumerate(proposal):
        if uniforms[i] * float(draft_probs[i, x]) < float(target_probs[i, x]):
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp(min=0)
        total = float(residual.sum())
        return i, (residual / total if total > 0 else target_probs[i].clone())
    return len(proposal), target_probs[len(proposal)].clone()


def _rounds(sampled: bool):
    """Hypothesis: a round from the contract: k 0-5 guesses over a vocabulary of 2-6, distributions with zeros
    (a token the draft never proposes, a row where p = q), and uniforms at 0 and near 1."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        vocab, k = d(st.integers(2, 6)), d(st.integers(0, 5))

        def dist():
            w = d(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=vocab, max_size=vocab))
            w[d(st.integers(0, vocab - 1))] = 1.0  # never all zero
            return [x / sum(w) for x in w]

        p = [dist() for _ in range(k + 1)]
        if not sampled:
            logits = torch.tensor([[round(x * 8) / 8 for x in row] for row in p], dtype=torch.float32)
            proposal = [d(st.integers(0, vocab - 1)) for _ in range(k)]
            agree = d(st.integers(0, k))  # make the first `agree` guesses the target's choice
            proposal[:agree] = logits.argmax(dim=-1).tolist()[:agree]
            return proposal, logits
        q = [p[i] if d(st.booleans()) else dist() for i in range(k)]  # sometimes the draft is the target
        proposal = [d(st.sampled_from([j for j in range(vocab) if q[i][j] > 0])) for i in range(k)]
        u = [d(st.sampled_from([0.0, 0.25, 0.5, 0.999])) for _ in range(k)]
        return proposal, _probs(q).reshape(k, vocab), _probs(p), u

    return draw()


def _same_greedy(mine, ref) -> str | None:
    if not (isinstance(mine, (tuple, list)) and len(mine) == 2):
        return f"return (kept, next_token); got {short(mine)}"
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in mine):
        return f"kept and next_token should be ints; got {short(mine)}"
    return (
        None
        if tuple(int(x) for x in mine) == tuple(ref)
        else f"(kept, next_token) is {tuple(ref)}; yours is {tuple(mine)}"
    )


def _same_sampled(mine, ref) -> str | None:
    if not (isinstance(mine, (tuple, list)) and len(mine) == 2):
        return f"return (kept, next_probs); got {short(mine)}"
    kept, dist = mine
    if not isinstance(kept, numbers.Integral) or isinstance(kept, bool) or int(kept) != ref[0]:
        return f"{ref[0]} guess(es) kept; yours says {short(kept)}"
    try:
        dist = torch.as_tensor(dist, dtype=torch.float64)
    except Exception:  # noqa: BLE001
        return f"next_probs should be a distribution (a 1-D tensor); got {short(dist)}"
    if dist.shape != ref[1].shape or not torch.allclose(dist, ref[1].double(), atol=1e-6):
        return f"next_probs should be {[round(x, 4) for x in ref[1].tolist()]}; yours is {short(out_of(dist))}"
    return None


@check(LAB, "the same (kept, next_token) as the reference on every greedy round tried")
def check_greedy_same_as_reference(accept_greedy):
    same_as_reference(
        lambda proposal, logits: accept_greedy(proposal, logits),
        _ref_greedy,
        _rounds(sampled=False),
        describe=lambda proposal, logits: f"accept_greedy({proposal}, target_logits={logits.tolist()})",
        compare=_same_greedy,
        arg_names=("proposal", "target_logits"),
        examples=150,
    )


@check(LAB, "the same (kept, next_probs) as the reference on every sampled round tried")
def check_sampled_same_as_reference(accept_sampled):
    same_as_reference(
        lambda proposal, q, p, u: accept_sampled(proposal, q, p, u),
        _reference_sampled,
        _rounds(sampled=True),
        describe=lambda proposal, q, p, u: (
            f"accept_sampled({proposal}, draft_probs={[[round(x, 3) for x in r] for r in q.tolist()]}, "
            f"target_probs={[[round(x, 3) for x in r] for r in p.tolist()]}, uniforms={u})"
        ),
        compare=_same_sampled,
        arg_names=("proposal", "draft_probs", "target_probs", "uniforms"),
        examples=150,
    )
