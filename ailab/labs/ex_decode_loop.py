"""Exercise checks: the greedy decode loop over a KV cache (topic H3).

The learner writes
  greedy_decode(model, prompt_ids, max_new_tokens) -> LongTensor (B, max_new_tokens)
      with ailab.generation's KVCache, prefill and decode_one_token: the prompt (B, T) is prefilled once,
      then each new token is fed back for one decode step; the next token is the argmax of the logits.
      Only the new tokens are returned, and the prompt is left as it was.

The checks are derived from what the loop must guarantee:
  the tokens equal greedy generation without a cache (the oracle), for a batch of several rows and prompts of
  one token and of many; the shape (B, max_new_tokens), an integer dtype, a tensor; max_new_tokens = 1 means a
  prefill and no decode step; the work: exactly T + max_new_tokens - 1 positions per row go through the model,
  in one prefill and max_new_tokens - 1 steps of one token (a loop that recomputes the prefix, or prefills again,
  processes more); the prompt tensor is not changed; a learner call that raises names the prompt's shape (a cache
  sized for the prompt alone runs out at the first decode step).
"""

from __future__ import annotations

import torch

from ailab.labs.core import answer, check, expect, tiny_decoder, torch_threads

LAB = "ex_decode_loop"


class CountingModel:
    """The decoder, counting what goes through it: calls, and positions per call. It answers what a Decoder
    answers (its sizes, config, device, dtype, parameters, eval, forward), so a right answer that reads any of
    them (`prompt_ids.to(model.device)`, `model.eval()`) runs here as it runs on the real model."""

    def __init__(self, model):
        self.model, self.calls = model, []
        for name in ("n_layer", "n_head", "head_dim", "max_positions", "vocab_size", "hf", "n_embd", "eps"):
            setattr(self, name, getattr(model, name))
        self.config, self.device, self.dtype = model.config, model.device, model.dtype

    def __call__(self, ids, view):
        self.calls.append(tuple(ids.shape))
        return self.model(ids, view)

    forward = __call__

    def eval(self):
        return self

    def parameters(self):
        return self.model.parameters()


def model():
    """One tiny_gpt('1m') decoder for every check (random weights: the loop, not the text, is checked)."""
    return tiny_decoder(3)


def _prompt(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def _run(greedy_decode, prompt, n, what):
    counting = CountingModel(model())
    before = prompt.clone()
    with torch_threads(1):
        out = answer(greedy_decode, counting, prompt, n, what=what)
    expect(
        isinstance(out, torch.Tensor),
        f"{what}: greedy_decode() should return a tensor of token ids; got {type(out).__name__}",
    )
    expect(
        not out.is_floating_point() and out.dtype != torch.bool,
        f"{what}: token ids are integers (the argmax of the logits); got dtype {out.dtype}",
    )
    expect(torch.equal(prompt, before), f"{what}: the prompt tensor was changed; build new tensors instead")
    return out, counting.calls


@check(LAB, "the tokens: equal greedy decoding without a cache")
def check_tokens(greedy_decode):
    from ailab.generation import generate_without_cache

    for batch, length, n, seed in [(1, 12, 10, 0), (3, 7, 6, 1), (2, 1, 5, 2), (1, 40, 1, 3)]:
        prompt = _prompt(batch, length, seed)
        what = f"a prompt of shape ({batch}, {length}) and max_new_tokens={n}"
        out, _ = _run(greedy_decode, prompt, n, what)
        expect(
            tuple(out.shape) == (batch, n),
            f"{what}: expected the {n} new tokens of each of the {batch} rows, shape ({batch}, {n}); got "
            f"{tuple(out.shape)}"
            + (
                ". Return only the new tokens, not the prompt with them"
                if out.ndim == 2 and out.shape[1] == length + n
                else ""
            ),
        )
        with torch_threads(1):
            want = generate_without_cache(model(), prompt, n)
        if not torch.equal(out, want):
            row, col = next((r, c) for r in range(batch) for c in range(n) if out[r, c] != want[r, c])
            expect(
                False,
                f"{what}: row {row}, new token {col}: expected {int(want[row, col])}, got "
                f"{int(out[row, col])}. Which logits give the next token, and which token is fed to the "
                "next step?",
            )


@check(LAB, "the work: one prefill, then one token per step")
def check_work(greedy_decode):
    for batch, length, n in [(2, 20, 8), (1, 5, 1), (3, 1, 4)]:
        what = f"a prompt of shape ({batch}, {length}) and max_new_tokens={n}"
        _, calls = _run(greedy_decode, _prompt(batch, length, 7), n, what)
        want = [(batch, length)] + [(batch, 1)] * (n - 1)
        positions = sum(b * t for b, t in calls)
        expect(
            calls == want,
            f"{what}: the model should see the prompt once, ({batch}, {length}), then {n - 1} step(s) of one token "
            f"each, {want[:3]}{'...' if len(want) > 3 else ''}; it saw {len(calls)} call(s), {calls[:4]}"
            f"{'...' if len(calls) > 4 else ''}: {positions} positions instead of {batch * (length + n - 1)}."
            + (
                " The last token needs no step of its own: nothing is generated after it."
                if len(calls) == n + 1
                else ""
            )
            + (
                " The cache already holds the prefix: feed only the newest token."
                if positions > batch * (length + n)
                else ""
            ),
        )
