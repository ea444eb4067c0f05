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
The differential check (check_same_as_reference) runs the learner's loop and ailab.generation.generate (greedy,
with the KV cache: the contract word for word) on the same tiny decoder over generated prompts (Hypothesis: 1 to 3
rows of 1 to 16 ids, random or a run of one id, the vocabulary's ends included, contiguous or a strided view;
max_new_tokens 1 to 8; and the corners: a prefill only, one-token prompts, a prompt and new tokens filling the
model's 512 positions exactly), and compares the tokens, the calls the model saw, and the prompt after the call.
max_new_tokens = 0 is left out: the contract starts at 1 (generate refuses 0; the solution's loop returns one token).
"""

from __future__ import annotations

import torch

from ailab.labs.core import answer, check, expect, tiny_decoder, torch_threads
from ailab.labs.differential import same_as_reference, short

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


# --------------------------------------------------------------------------- the differential check (issue 42)


def _prompt_tensor(rows, layout: str) -> torch.Tensor:
    prompt = torch.tensor(rows, dtype=torch.long)
    if layout == "a column slice":  # the same ids, as a view whose rows are not contiguous in memory
        prompt = torch.cat([torch.zeros(prompt.shape[0], 1, dtype=torch.long), prompt], dim=1)[:, 1:]
    return prompt


def _decoded(greedy_decode, rows, n, layout) -> dict:
    """What the contract says is observable of one call on the tiny decoder: the tokens (B rows of n ids), the
    calls the model saw (the shape of each ids tensor), and whether the prompt was left as it was."""
    prompt = _prompt_tensor(rows, layout)
    before = prompt.clone()
    counting = CountingModel(model())
    out = greedy_decode(counting, prompt, n)
    seen = {"calls": counting.calls, "prompt left as it was": bool(torch.equal(prompt, before))}
    if not isinstance(out, torch.Tensor):
        return {**seen, "tokens": f"a {type(out).__name__}, not a tensor"}
    if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        return {**seen, "tokens": f"a tensor of dtype {out.dtype}, not integer ids"}
    return {**seen, "tokens": out.tolist(), "shape": tuple(out.shape)}


def _same_decoding(mine: dict, ref: dict) -> str | None:
    if not mine["prompt left as it was"]:
        return "your greedy_decode changed the prompt tensor it was given: build new tensors instead"
    if isinstance(mine["tokens"], str):
        return (
            f"greedy_decode should return a tensor of token ids, shape {ref['shape']}; yours returned {mine['tokens']}"
        )
    if mine["shape"] != ref["shape"]:
        return f"the answer should have shape {ref['shape']} (the new tokens of each row); yours has {mine['shape']}"
    for row, (a, b) in enumerate(zip(mine["tokens"], ref["tokens"])):
        if a != b:
            col = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            hint = (
                f"Token ids run from 0 to {model().vocab_size - 1}: is the dtype wide enough for them?"
                if not isinstance(a[col], int) or not 0 <= a[col] < model().vocab_size
                else "Which logits give the next token, and which token is fed back?"
            )
            return (
                f"row {row}, new token {col}: the reference gives {b[col]}, yours {a[col]} (the reference's row: "
                f"{short(b)}, yours: {short(a)}). {hint}"
            )
    if mine["calls"] != ref["calls"]:
        return (
            f"the same tokens, but the model saw the calls {short(mine['calls'])} where the reference's loop makes "
            f"{short(ref['calls'])}: one prefill of the prompt, then one call per further token, with that token only"
            + (
                ". Yours answered without the model: from something kept from an earlier call?"
                if not mine["calls"]
                else ""
            )
        )
    return None


def _decodings():
    """Hypothesis: (prompt rows, max_new_tokens, layout) for a (B, T) prompt: B 1 to 3, T 1 to 16, ids 0 to 255
    (the vocabulary's ends included), rows of random ids or every row a run of one id (the tiny model then repeats it
    for a while: a token that comes early, where a loop that stops at a token of its own would stop), max_new_tokens
    1 to 8, the prompt contiguous or a view whose rows are not."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        batch, length = d(st.integers(1, 3)), d(st.integers(1, 16))
        if d(st.booleans()):
            ids = st.integers(0, 255)
            rows = [[d(ids) for _ in range(length)] for _ in range(batch)]
        else:
            token = d(st.sampled_from([0, 255, 7, 128]))
            rows = [[token] * length for _ in range(batch)]
        n = d(st.integers(1, 8))
        return rows, n, d(st.sampled_from(["contiguous", "a column slice"]))

    return draw()


def _describe_decoding(rows, n, layout) -> str:
    return f"a prompt of shape ({len(rows)}, {len(rows[0])}) ({layout}), ids {short(rows)}, and max_new_tokens={n}"


# The contract's corners: max_new_tokens = 1 (a prefill only); a one-token prompt; a prompt and new tokens that
# fill the model's 512 positions exactly; a prompt of one repeated id (the model repeats it, then moves on).
_EDGES = [
    ([[5, 17, 200]], 1, "contiguous"),
    ([[0], [255], [9]], 6, "contiguous"),
    ([[(i * 37) % 256 for i in range(506)]], 6, "contiguous"),
    ([[0] * 5, [0] * 5], 8, "a column slice"),
]


@check(LAB, "the same tokens and model calls as the reference loop, on every prompt tried")
def check_same_as_reference(greedy_decode):
    from ailab.generation import generate

    from hypothesis import strategies as st

    mine = lambda rows, n, layout: _decoded(greedy_decode, rows, n, layout)  # noqa: E731
    ref = lambda rows, n, layout: _decoded(generate, rows, n, layout)  # noqa: E731
    say = {"describe": _describe_decoding, "compare": _same_decoding, "arg_names": ("prompt", "max_new_tokens")}
    with torch_threads(1):
        same_as_reference(mine, ref, _decodings(), examples=50, **say)  # first: a difference on the smallest prompt
        same_as_reference(mine, ref, st.just(_EDGES[0]), edges=_EDGES, examples=1, **say)
