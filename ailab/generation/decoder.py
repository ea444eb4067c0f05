"""A GPT-2 decoder whose attention reads K/V from ailab's own cache, not from a hidden `past_key_values`.

The weights are a Hugging Face GPT2LMHeadModel's (ailab.models.tiny_gpt builds one from a config), used
as they are: the forward pass below is written out so that every step of one token's way through the model
is on the page, and Hugging Face's own forward is the oracle the tests compare it with.

    x = wte[ids] + wpe[positions]                         (B, T, C)
    for each block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    logits = ln_f(x) @ wte.T                              (B, T, vocab)

The cache is passed in as a *view* (kv_cache.ContiguousView or paged.PagedView): it knows the positions of
the new tokens, stores their K/V and returns the attention over everything cached so far. The decoder
itself holds no state between calls.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Decoder(nn.Module):
    """GPT-2 forward over a Hugging Face GPT2LMHeadModel's weights (shared, not copied)."""

    def __init__(self, hf_model):
        super().__init__()
        config = hf_model.config
        if getattr(config, "model_type", None) != "gpt2":
            raise TypeError(f"Decoder takes a GPT-2 model (ailab.models.tiny_gpt); got {type(hf_model).__name__}")
        if config.scale_attn_by_inverse_layer_idx or config.reorder_and_upcast_attn:
            raise ValueError("this decoder implements GPT-2's default attention scaling only")
        self.hf = hf_model.eval()
        self.n_layer, self.n_head, self.n_embd = config.n_layer, config.n_head, config.n_embd
        self.head_dim = self.n_embd // self.n_head
        self.max_positions = config.n_positions
        self.vocab_size = config.vocab_size
        self.eps = config.layer_norm_epsilon

    @property
    def config(self):
        return self.hf.config

    @property
    def device(self) -> torch.device:
        return self.hf.transformer.wte.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.transformer.wte.weight.dtype

    def forward(self, ids: torch.Tensor, view) -> torch.Tensor:
        """Logits (B, T, vocab) for `ids` (B, T), whose positions, and whose earlier tokens' K/V, `view` holds."""
        t = self.hf.transformer
        positions = view.positions  # (B, T)
        # read on the host, so not while compiling (compiled.py): there the Scheduler checked every request when it was added
        if not torch.compiler.is_compiling() and int(positions.max()) >= self.max_positions:
            raise ValueError(f"position {int(positions.max())} is past the model's {self.max_positions} positions")
        x = t.wte(ids) + t.wpe(positions)  # (B, T, C)
        for layer, block in enumerate(t.h):
            x = x + self._attention(
                layer, block.attn, F.layer_norm(x, (self.n_embd,), block.ln_1.weight, block.ln_1.bias, self.eps), view
            )
            x = x + self._mlp(block.mlp, F.layer_norm(x, (self.n_embd,), block.ln_2.weight, block.ln_2.bias, self.eps))
        x = F.layer_norm(x, (self.n_embd,), t.ln_f.weight, t.ln_f.bias, self.eps)
        return x @ t.wte.weight.T  # (B, T, vocab): the head is tied to wte

    def _attention(self, layer: int, attn, x: torch.Tensor, view) -> torch.Tensor:
        B, T, C = x.shape
        qkv = _project(attn.c_attn, x.reshape(B * T, C)).view(B, T, 3 * C)
        q, k, v = qkv.split(C, dim=2)  # (B, T, C) each
        q, k, v = (z.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        y = view.attend(layer, q, k, v, scale=1.0 / math.sqrt(self.head_dim))  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B * T, C)
        return _project(attn.c_proj, y).view(B, T, C)

    def _mlp(self, mlp, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = _project(mlp.c_fc, x.reshape(B * T, C))
        h = F.gelu(h, approximate="tanh")  # GPT-2's "gelu_new"
        return _project(mlp.c_proj, h).view(B, T, C)


def _project(layer, x: torch.Tensor) -> torch.Tensor:
    """x (N, in) -> (N, out) through one of GPT-2's linear layers. Its Conv1D stores the weight (in, out), so
    `x @ W + b` is one addmm with no transpose; a weight-only quantized layer (ailab.quantize.weight_only) runs
    its own kernel. (Matched by name: importing transformers here would cost every importer a second.)"""
    if type(layer).__name__ == "Conv1D":
        return torch.addmm(layer.bias, x, layer.weight)
    return layer(x)
