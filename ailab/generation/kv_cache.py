"""The KV cache, contiguous: every sequence of a batch reserves `max_len` slots up front (topic H3).

Each layer's attention needs the keys and values of every earlier token. Without a cache they are
recomputed from the whole prefix at every step (O(n^2) work for n tokens); with one, a step computes K/V
for its one new token and reads the rest (O(n)). The price is memory that grows with every token:

    bytes per token = 2 (K and V) x layers x heads x head_dim x bytes per value

the formula of notebook 1/03 (ailab.memory.kv_cache_bytes), which KVCache.nbytes must match.

A *view* is what the decoder sees for one forward call: the positions of the new tokens, and
attend(layer, q, k, v), which stores k/v and returns attention over all that is cached.
"""

from __future__ import annotations

import torch

from ailab.generation.attention import masked_attention


def model_placement(model, dtype: torch.dtype | None = None, device: str | torch.device | None = None):
    """(dtype, device) for a cache of `model`: the model's own where not given, so that a model moved to a GPU
    (or cast to fp16) gets a cache beside it without every caller saying so."""
    return (
        dtype or getattr(model, "dtype", torch.float32),
        torch.device(device) if device is not None else getattr(model, "device", torch.device("cpu")),
    )


def kv_bytes_per_token(model, dtype: torch.dtype = torch.float32) -> int:
    """2 x layers x heads x head_dim x itemsize: the cache's cost of one more token of one sequence."""
    return 2 * model.n_layer * model.n_head * model.head_dim * torch.empty((), dtype=dtype).element_size()


class KVCache:
    """K and V for a static batch, (layers, batch, heads, max_len, head_dim) each; every row holds `length`
    tokens (one prompt length for the batch, as in a padded static batch)."""

    def __init__(
        self,
        n_layer: int,
        batch: int,
        n_head: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        if min(n_layer, batch, n_head, head_dim, max_len) < 1:
            raise ValueError(
                "every dimension of a KV cache must be >= 1 "
                f"(layers={n_layer}, batch={batch}, heads={n_head}, head_dim={head_dim}, max_len={max_len})"
            )
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len, self.batch, self.length = max_len, batch, 0

    @classmethod
    def for_model(
        cls,
        model,
        batch: int,
        max_len: int | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
    ) -> "KVCache":
        """An empty cache shaped for `model`; its dtype and device are the model's unless given."""
        dtype, device = model_placement(model, dtype, device)
        return cls(model.n_layer, batch, model.n_head, model.head_dim, max_len or model.max_positions, dtype, device)

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def view(self, new_tokens: int) -> "ContiguousView":
        if self.length + new_tokens > self.max_len:
            raise ValueError(
                f"the cache holds {self.max_len} tokens per sequence; {self.length} are cached and "
                f"{new_tokens} more do not fit"
            )
        return ContiguousView(self, self.length, new_tokens)

    def advance(self, new_tokens: int) -> None:
        self.length += new_tokens


class ContiguousView:
    def __init__(self, cache: KVCache, start: int, new_tokens: int):
        self.cache, self.start, self.new = cache, start, new_tokens
        pos = torch.arange(start, start + new_tokens, device=cache.k.device)
        self.positions = pos.expand(cache.batch, new_tokens)  # (B, T)

    def attend(self, layer: int, q, k, v, scale: float):
        c, end = self.cache, self.start + self.new
        c.k[layer, :, :, self.start : end] = k  # (B, H, T, D) into the slab
        c.v[layer, :, :, self.start : end] = v
        keys, values = c.k[layer, :, :, :end], c.v[layer, :, :, :end]  # (B, H, S, D), S = end
        key_pos = torch.arange(end, device=q.device)
        allowed = key_pos[None, :] <= self.positions[0][:, None]  # (T, S): causal
        return masked_attention(q, keys, values, allowed[None, None], scale)


class NoCacheView:
    """Attention over the tokens of this call only: the whole prefix must be passed (and recomputed) each step."""

    def __init__(self, batch: int, tokens: int, device: str | torch.device = "cpu"):
        self.positions = torch.arange(tokens, device=device).expand(batch, tokens)  # (B, T)

    def attend(self, layer: int, q, k, v, scale: float):
        T = q.shape[2]
        allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return masked_attention(q, k, v, allowed[None, None], scale)
