"""Independent wrong answers for ex_decode_loop, written from labs/5_generation/ex_decode_loop.ipynb's contract alone."""

import torch

from ailab.generation import KVCache, decode_one_token, prefill


def greedy_decode(model, prompt_ids, max_new_tokens):
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens)
    token = prefill(model, cache, prompt_ids).argmax(-1, keepdim=True)  # (B, 1)
    out = [token]
    for _ in range(max_new_tokens - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)  # (B, max_new_tokens)


def returns_whole_sequence(model, prompt_ids, max_new_tokens):
    """Returns the prompt followed by the new tokens, as generate() hands back a continuation."""
    # differs on any prompt (B, T): shape (B, T + max_new_tokens) instead of (B, max_new_tokens)
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens)
    token = prefill(model, cache, prompt_ids).argmax(-1, keepdim=True)
    out = [prompt_ids, token]
    for _ in range(max_new_tokens - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


def prefill_every_step(model, prompt_ids, max_new_tokens):
    """Runs the whole sequence so far through a fresh cache at every step, to be sure the context is complete."""
    # differs on a prompt of 100 tokens and 64 new ones: 100 + 101 + ... + 163 positions through the model
    # instead of 100 + 63 (same tokens)
    batch, length = prompt_ids.shape
    seq = prompt_ids
    out = []
    for _ in range(max_new_tokens):
        cache = KVCache.for_model(model, batch, seq.shape[1])
        token = prefill(model, cache, seq).argmax(-1, keepdim=True)
        out.append(token)
        seq = torch.cat([seq, token], dim=1)
    return torch.cat(out, dim=1)


def decode_steps_only(model, prompt_ids, max_new_tokens):
    """Prefills the cache, then takes each new token from a decode step fed the last token so far."""
    # differs on any prompt: the first token returned is the argmax after feeding the prompt's last token again,
    # not the argmax of the prefill's logits
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens)
    prefill(model, cache, prompt_ids)
    token = prompt_ids[:, -1:]
    out = []
    for _ in range(max_new_tokens):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


def cache_for_one_row(model, prompt_ids, max_new_tokens):
    """Sizes the cache for one sequence: the batch shares it."""
    # differs on a prompt of shape (3, 5): ValueError from prefill instead of (3, max_new_tokens) tokens
    length = prompt_ids.shape[-1]
    cache = KVCache.for_model(model, 1, length + max_new_tokens)
    token = prefill(model, cache, prompt_ids).argmax(-1, keepdim=True)
    out = [token]
    for _ in range(max_new_tokens - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


def stacked_tokens(model, prompt_ids, max_new_tokens):
    """Stacks the chosen tokens along a new step dimension."""
    # differs on any prompt (B, T): shape (B, max_new_tokens, 1) instead of (B, max_new_tokens)
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens)
    token = prefill(model, cache, prompt_ids).argmax(-1, keepdim=True)
    out = [token]
    for _ in range(max_new_tokens - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.stack(out, dim=1)


RIGHT = {"greedy_decode": greedy_decode}
WRONG = [
    ("greedy_decode", returns_whole_sequence, "misread prose"),
    ("greedy_decode", prefill_every_step, "resources"),
    ("greedy_decode", decode_steps_only, "order"),
    ("greedy_decode", cache_for_one_row, "boundaries: batch > 1"),
    ("greedy_decode", stacked_tokens, "parsing: shape"),
]
