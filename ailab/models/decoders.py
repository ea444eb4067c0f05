"""Decoders: GPT-2-architecture models from a config (no download), for speed and memory work."""

from __future__ import annotations

import torch

# GPT-2-architecture decoders from a config, random init, byte-level (vocab 256): sizes for speed and memory work.
TINY_GPT_SIZES = {  # name: (layers, heads, embedding width, positions)
    "1m": (4, 4, 128, 512),  # ~0.9 M parameters
    "8m": (8, 8, 256, 1024),  # ~6.6 M
    "30m": (10, 8, 512, 1024),  # ~32 M
}


def tiny_gpt_params(size: str, vocab_size: int = 256) -> int:
    """Parameters of tiny_gpt(size), from its shape alone (no model built): per layer the Q, K, V, output and two
    MLP matrices (12 d^2) with their biases and two LayerNorms (13 d), then the token and position embeddings
    (the output head shares the token embedding) and the last LayerNorm."""
    if size not in TINY_GPT_SIZES:
        raise ValueError(f"size={size!r}; choose one of {list(TINY_GPT_SIZES)}")
    layers, _, width, positions = TINY_GPT_SIZES[size]
    return layers * (12 * width * width + 13 * width) + (vocab_size + positions) * width + 2 * width


def tiny_gpt(size: str = "1m", seed: int = 0, vocab_size: int = 256):
    """A Hugging Face GPT2LMHeadModel built from a config (no download), randomly initialised, in eval mode.
    ailab.generation.Decoder runs it with ailab's own KV cache; Hugging Face's forward is the oracle."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if size not in TINY_GPT_SIZES:
        raise ValueError(f"size={size!r}; choose one of {list(TINY_GPT_SIZES)}")
    layers, heads, width, positions = TINY_GPT_SIZES[size]
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=positions,
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel(config).eval()
