"""The verify-and-accept exercise's checks pass right answers and reject plausible wrong ones, with the words that
name each mistake.

accept_greedy(proposal, target_logits) -> (kept, next_token);
accept_sampled(proposal, draft_probs, target_probs, uniforms) -> (kept, next_probs)
| question | what the checks try |
|---|---|
| which input varies each field | a guess rejected first, in the middle, none; uniforms either side of p / q |
| boundaries | k = 0; all k kept (the bonus row); p(x) >= q(x) (always kept); a residual that sums to 0 (p = q) |
| a type the notes never show | next_token as an int, not a 0-d tensor; distributions as float64 tensors |
| order or ties | a tie in a row's logits goes to the lowest id; guesses after a disagreement never count |
| errors: type and message | - (nothing to refuse) |
| policy: which item | the extra token from row `kept`, not the rejected guess and not the row after |
"""

import numpy as np
import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import ex_verify_accept as L


def accept_greedy(proposal, target_logits):
    choice = target_logits.argmax(dim=-1).tolist()
    kept = 0
    while kept < len(proposal) and proposal[kept] == choice[kept]:
        kept += 1
    return kept, choice[kept]


def accept_greedy_numpy(proposal, target_logits):
    """Also right: numpy's argmax (ties to the lowest id, as torch's), a for loop with break."""
    choice = np.argmax(target_logits.numpy(), axis=-1)
    kept = 0
    for guess, want in zip(proposal, choice):
        if guess != want:
            break
        kept += 1
    return kept, int(choice[kept])


def accept_sampled(proposal, draft_probs, target_probs, uniforms):
    for i, x in enumerate(proposal):
        if uniforms[i] < target_probs[i, x] / draft_probs[i, x]:
            continue
        residual = torch.clamp(target_probs[i] - draft_probs[i], min=0)
        return i, residual / residual.sum() if residual.sum() > 0 else target_probs[i]
    return len(proposal), target_probs[len(proposal)]


# --------------------------------------------------------------------------- wrong answers, one mistake each


def counts_every_match(proposal, target_logits):
    choice = target_logits.argmax(dim=-1).tolist()
    kept = sum(1 for g, c in zip(proposal, choice) if g == c)
    return kept, choice[kept]


def returns_the_rejected_guess(proposal, target_logits):
    kept, token = accept_greedy(proposal, target_logits)
    return kept, proposal[kept] if kept < len(proposal) else token


def next_row(proposal, target_logits):
    kept, _ = accept_greedy(proposal, target_logits)
    choice = target_logits.argmax(dim=-1).tolist()
    return kept, choice[min(kept + 1, len(choice) - 1)]


def tensor_token(proposal, target_logits):
    kept, _ = accept_greedy(proposal, target_logits)
    return kept, target_logits[kept].argmax()


def ties_to_highest(proposal, target_logits):
    flipped = target_logits.flip(-1)
    choice = (target_logits.shape[-1] - 1 - flipped.argmax(dim=-1)).tolist()
    kept = 0
    while kept < len(proposal) and proposal[kept] == choice[kept]:
        kept += 1
    return kept, choice[kept]


def keeps_when_u_above(proposal, draft_probs, target_probs, uniforms):
    for i, x in enumerate(proposal):
        if uniforms[i] > target_probs[i, x] / draft_probs[i, x]:
            continue
        residual = torch.clamp(target_probs[i] - draft_probs[i], min=0)
        return i, residual / residual.sum() if residual.sum() > 0 else target_probs[i]
    return len(proposal), target_probs[len(proposal)]


def residual_not_normalised(proposal, draft_probs, target_probs, uniforms):
    for i, x in enumerate(proposal):
        if uniforms[i] < target_probs[i, x] / draft_probs[i, x]:
            continue
        return i, torch.clamp(target_probs[i] - draft_probs[i], min=0)
    return len(proposal), target_probs[len(proposal)]


def target_after_rejection(proposal, draft_probs, target_probs, uniforms):
    """Draws the replacement from p itself, as if the rejected token could come back."""
    for i, x in enumerate(proposal):
        if uniforms[i] < target_probs[i, x] / draft_probs[i, x]:
            continue
        return i, target_probs[i]
    return len(proposal), target_probs[len(proposal)]


def bonus_from_last_guess_row(proposal, draft_probs, target_probs, uniforms):
    kept, dist = accept_sampled(proposal, draft_probs, target_probs, uniforms)
    if kept == len(proposal) and proposal:
        return kept, target_probs[kept - 1]
    return kept, dist


def stub(*a, **k):
    raise NotImplementedError("accept_greedy() is not implemented yet")


G_CHECKS = [L.check_greedy_by_hand, L.check_greedy_in_the_decoder, L.check_greedy_same_as_reference]
S_CHECKS = [L.check_sampled_by_hand, L.check_sampled_same_as_reference]


@pytest.mark.parametrize("fn", [accept_greedy, accept_greedy_numpy])
def test_right_greedy_rules_pass(fn):
    for chk in G_CHECKS:
        chk(fn)


def test_the_right_sampled_rule_passes():
    for chk in S_CHECKS:
        chk(accept_sampled)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_greedy_by_hand, counts_every_match, r"stop at the first one"),
        (L.check_greedy_by_hand, returns_the_rejected_guess, r"the target's own choice replaces it"),
        (L.check_greedy_by_hand, next_row, r"the choice at row `kept`"),
        (L.check_greedy_by_hand, tensor_token, r"next_token should be an int"),
        (L.check_greedy_by_hand, ties_to_highest, r"ties in a row go to the lowest token id"),
        (L.check_greedy_in_the_decoder, counts_every_match, r"the tokens should be generate\(\)'s"),
        (L.check_greedy_same_as_reference, next_row, r"\(kept, next_token\) is"),
        (L.check_sampled_by_hand, keeps_when_u_above, r"guess\(es\) kept; got"),
        (L.check_sampled_by_hand, residual_not_normalised, r"divide the residual by its sum"),
        (L.check_sampled_by_hand, target_after_rejection, r"next_probs \[0.0, 1.0, 0.0\]"),
        (L.check_sampled_by_hand, bonus_from_last_guess_row, r"p_2 gives the bonus"),
        (L.check_sampled_same_as_reference, target_after_rejection, r"next_probs should be"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("chk", G_CHECKS + S_CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)
