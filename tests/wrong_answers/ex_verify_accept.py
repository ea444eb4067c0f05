"""Independent wrong answers for ex_verify_accept, written from labs/5_generation/ex_verify_accept.ipynb's contract
alone."""

import torch


def accept_greedy(proposal, target_logits):
    best = [int(torch.argmax(row)) for row in target_logits]
    n = 0
    for i, tok in enumerate(proposal):
        if tok != best[i]:
            break
        n += 1
    return n, best[n]


def accept_sampled(proposal, draft_probs, target_probs, uniforms):
    for i, tok in enumerate(proposal):
        ratio = target_probs[i, tok] / draft_probs[i, tok]
        if uniforms[i] < ratio:
            continue
        rest = (target_probs[i] - draft_probs[i]).clamp(min=0)
        if rest.sum() == 0:
            return i, target_probs[i]
        return i, rest / rest.sum()
    return len(proposal), target_probs[-1]


def bonus_only_when_something_kept(proposal, target_logits):
    """Gives no extra token when nothing was kept (returns the first guess as the next token)."""
    n, tok = accept_greedy(proposal, target_logits)
    return (n, proposal[0]) if n == 0 and proposal else (n, tok)


def compares_logits_not_argmax(proposal, target_logits):
    """Keeps a guess whose logit is above the row's mean, as 'likely enough'."""
    n = 0
    for i, tok in enumerate(proposal):
        row = target_logits[i]
        if row[tok] <= row.mean():
            break
        n += 1
    return n, int(torch.argmax(target_logits[n]))


def off_by_one_rows(proposal, target_logits):
    """Compares guess i with row i + 1 (as if row 0 were the token already known)."""
    best = [int(torch.argmax(row)) for row in target_logits]
    n = 0
    while n < len(proposal) and n + 1 < len(best) and proposal[n] == best[n + 1]:
        n += 1
    return n, best[n]


def ratio_inverted(proposal, draft_probs, target_probs, uniforms):
    """Uses q / p for the acceptance ratio."""
    for i, tok in enumerate(proposal):
        if uniforms[i] < draft_probs[i, tok] / target_probs[i, tok]:
            continue
        rest = (target_probs[i] - draft_probs[i]).clamp(min=0)
        return i, rest / rest.sum() if rest.sum() > 0 else target_probs[i]
    return len(proposal), target_probs[-1]


def residual_the_other_way(proposal, draft_probs, target_probs, uniforms):
    """Draws the replacement from max(0, q - p)."""
    for i, tok in enumerate(proposal):
        if uniforms[i] < target_probs[i, tok] / draft_probs[i, tok]:
            continue
        rest = (draft_probs[i] - target_probs[i]).clamp(min=0)
        return i, rest / rest.sum() if rest.sum() > 0 else target_probs[i]
    return len(proposal), target_probs[-1]


def equal_ratio_rejected(proposal, draft_probs, target_probs, uniforms):
    """Keeps a guess only where p is strictly above q, or u is below the ratio: p == q with u = 0.999 is rejected."""
    for i, tok in enumerate(proposal):
        p, q = float(target_probs[i, tok]), float(draft_probs[i, tok])
        if p > q or uniforms[i] < p / q - 0.01:
            continue
        rest = (target_probs[i] - draft_probs[i]).clamp(min=0)
        return i, rest / rest.sum() if rest.sum() > 0 else target_probs[i]
    return len(proposal), target_probs[-1]


RIGHT = {"accept_greedy": accept_greedy, "accept_sampled": accept_sampled}
WRONG = [
    ("accept_greedy", bonus_only_when_something_kept, "boundaries"),
    ("accept_greedy", compares_logits_not_argmax, "misread prose"),
    ("accept_greedy", off_by_one_rows, "off-by-one"),
    ("accept_sampled", ratio_inverted, "misread prose"),
    ("accept_sampled", residual_the_other_way, "misread prose"),
    ("accept_sampled", equal_ratio_rejected, "boundaries"),
]
