"""Attention over what a cache view holds: the one kernel every view (contiguous, paged, packed, none) calls.

It sits below the decoder and the caches because both need it: the decoder hands q/k/v to a view, the view
stores k/v and calls this over everything cached. Nothing here knows how the keys were stored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """softmax(q k^T * scale, where allowed) v. q (B, H, T, D), k/v (B, H, S, D), allowed (B, 1, T, S) bool."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
