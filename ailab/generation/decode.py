"""Generation as two named steps (gpt-fast style): `prefill` the prompt once, then `decode_one_token` per
new token, each reading and extending the cache. `generate_without_cache` recomputes the whole prefix at every
step: the same tokens, at a cost that grows with the square of the length.

`prefill_paged` and `decode_paged` are the same two steps over paged KV blocks, for sequences of different lengths
in one batch; `step_paged` runs both kinds in one forward, prompts and decodes packed in one row. The server's
executor (executor.py) runs `decode_paged` for a step with only decodes, `step_paged` for a step that admits."""

from __future__ import annotations

import torch

from ailab.generation.kv_cache import KVCache, NoCacheView
from ailab.generation.paged import PackedView, PagedView


def next_token(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None, top_p: float = 1.0
) -> torch.Tensor:
    """(B, vocab) logits -> (B, 1) ids: greedy at temperature 0, else sampled from softmax(logits / T), keeping
    only the smallest set of tokens whose probabilities add up to `top_p` (nucleus sampling)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, vocab)
    if top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= top_p  # the mass before it already reached top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=generator)


@torch.inference_mode()
def prefill(model, cache: KVCache, ids: torch.Tensor) -> torch.Tensor:
    """Run the prompt (B, T) through the model, filling the cache; returns the last position's logits (B, vocab)."""
    if ids.ndim != 2 or ids.shape[0] != cache.batch:
        raise ValueError(f"prompt ids must be (batch={cache.batch}, T); got shape {tuple(ids.shape)}")
    if cache.length:
        raise ValueError(f"prefill starts an empty cache; this one already holds {cache.length} tokens")
    logits = model(ids, cache.view(ids.shape[1]))  # (B, T, vocab)
    cache.advance(ids.shape[1])
    return logits[:, -1]


@torch.inference_mode()
def decode_one_token(model, cache: KVCache, token: torch.Tensor) -> torch.Tensor:
    """One step: the (B, 1) newest token in, the next position's logits (B, vocab) out; the cache grows by one."""
    logits = model(token, cache.view(1))  # (B, 1, vocab)
    cache.advance(1)
    return logits[:, -1]


@torch.inference_mode()
def prefill_paged(model, view: PagedView, ids: torch.Tensor) -> torch.Tensor:
    """`prefill` over paged blocks: prompts (B, T) whose T tokens already have slots (BlockAllocator.allocate), in;
    the last position's logits (B, vocab) out. The view (`cache.view(seq_ids, T)`: block tables, positions, the new
    tokens' slots) is built by the caller, who knows which sequences run this step, so it is built once a step and
    its cost is counted apart from the forward's."""
    if tuple(ids.shape) != tuple(view.positions.shape):
        raise ValueError(f"prompt ids {tuple(ids.shape)} do not match the view's {tuple(view.positions.shape)} slots")
    return model(ids, view)[:, -1]  # (B, T, vocab) -> (B, vocab)


@torch.inference_mode()
def decode_paged(model, view: PagedView, token: torch.Tensor) -> torch.Tensor:
    """`decode_one_token` over paged blocks: each sequence's (B, 1) newest token in, its next position's logits
    (B, vocab) out; the sequences' lengths may differ (each has its own block table). Each must have a slot for
    the token first (BlockAllocator.append): the view is `cache.view(seq_ids, 1)`."""
    if token.ndim != 2 or token.shape[1] != 1 or token.shape[0] != view.positions.shape[0]:
        raise ValueError(
            f"decode takes one token per sequence, ({view.positions.shape[0]}, 1); got {tuple(token.shape)}"
        )
    return model(token, view)[:, -1]  # (B, 1, vocab) -> (B, vocab)


@torch.inference_mode()
def step_paged(model, view: PackedView, ids: torch.Tensor) -> torch.Tensor:
    """A whole step in one forward: each sequence's new tokens (a prompt's, or a decode's one) packed one after the
    other in `ids` (1, N), their slots taken first; each sequence's next-token logits (B, vocab) out, in the order
    of the view's sequences. One forward instead of one per prompt plus one for the decodes: the fixed cost of a
    forward (hundreds of operations, notebook 5/01) is paid once a step."""
    if tuple(ids.shape) != tuple(view.positions.shape):
        raise ValueError(f"packed ids {tuple(ids.shape)} do not match the view's {tuple(view.positions.shape)} slots")
    return model(ids, view)[0, view.last]  # (1, N, vocab) -> (B, vocab)


def _check_prompt(model, ids: torch.Tensor, max_new_tokens: int) -> None:
    if ids.ndim != 2 or ids.shape[1] < 1:
        raise ValueError(f"prompt ids must be (batch, T) with T >= 1; got shape {tuple(ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if ids.shape[1] + max_new_tokens > model.max_positions:
        raise ValueError(
            f"{ids.shape[1]} prompt + {max_new_tokens} new tokens exceed the model's {model.max_positions} positions"
        )


@torch.inference_mode()
def generate(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    cache: KVCache | None = None,
) -> torch.Tensor:
    """Prompt (B, T) -> (B, max_new_tokens) new ids, with the KV cache."""
    _check_prompt(model, ids, max_new_tokens)
    cache = cache or KVCache.for_model(
        model,
        ids.shape[0],
        ids.shape[1] + max_new_tokens,
        dtype=model.hf.transformer.wte.weight.dtype,
        device=ids.device,
    )
    gen = torch.Generator(device=ids.device).manual_seed(seed) if seed is not None else None
    token = next_token(prefill(model, cache, ids), temperature, gen)
    out = [token]
    for _ in range(max_new_tokens - 1):
        token = next_token(decode_one_token(model, cache, token), temperature, gen)
        out.append(token)
    return torch.cat(out, dim=1)


@torch.inference_mode()
def generate_without_cache(model, ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy, recomputing K/V for the whole sequence at every step: the baseline the cache is measured against."""
    _check_prompt(model, ids, max_new_tokens)
    seq = ids
    for _ in range(max_new_tokens):
        logits = model(seq, NoCacheView(seq.shape[0], seq.shape[1], seq.device))  # (B, T, vocab)
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq[:, ids.shape[1] :]
