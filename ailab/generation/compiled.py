"""The decode step under `torch.compile` (gpt-fast's idea), beside the eager one: the same `decode_paged` over the
same Decoder, compiled.

At a small batch a decode step is hundreds of small operations (notebook 5/01 measures it): each one's launch and
Python cost is paid whatever its size. Compiling fuses them into fewer kernels; on a CUDA device, mode
"reduce-overhead" also records the step as CUDA graphs and replays it with one launch. A graph is recorded for
fixed shapes, so there the batch is padded up to a bucket (1, 2, 4, 8, ...) by repeating its first row, and the
block table to the model's longest: the repeated row computes the same key and value as the first and writes them
to the same slot, so the padding changes nothing. Its logits are dropped.

Two things make the step compile well:
  - the new tokens' K/V are written into the pool by one custom op (paged.store_kv, as vLLM writes its cache
    with `reshape_and_cache`): traced as an ordinary index write, the pool is a mutated input and Inductor copies
    the whole pool each step (measured here: 2.9 ms a step for a 4 MiB pool, 25 ms for 32 MiB, against 0.6 ms);
  - the host-side position check is left to the caller while compiling (the Scheduler checks when a request is added).

`compile_decode` is what the executor runs when it is asked to (`EngineCore(..., compile=True)`); a step that
admits stays eager (`step_paged`: its packed row's length changes with the prompts it carries).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from ailab.generation.decode import decode_paged
from ailab.generation.paged import PagedKVCache, PagedView

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def bucket_for(batch: int, buckets: tuple[int, ...] = BUCKETS) -> int:
    """The smallest bucket that holds `batch` sequences."""
    for b in buckets:
        if b >= batch:
            return b
    raise ValueError(f"a decode step of {batch} sequences is over the largest bucket, {buckets[-1]}")


def pad_view(view: PagedView, token: torch.Tensor, batch: int, blocks: int) -> tuple[PagedView, torch.Tensor]:
    """The view and tokens (B, 1) grown to `batch` rows (copies of row 0) and `blocks` block-table columns
    (block 0, masked out by position). Row 0's copies write row 0's K/V to row 0's slot: nothing changes."""
    B, width = token.shape[0], view.table.shape[1]
    if batch < B or blocks < width:
        raise ValueError(f"cannot pad {B} rows of {width} blocks down to {batch} rows of {blocks}")
    rows = torch.cat([torch.arange(B), torch.zeros(batch - B, dtype=torch.long)]).to(token.device)  # (batch,)
    padded = copy.copy(view)
    padded.table = torch.nn.functional.pad(view.table, (0, blocks - width))[rows]  # (batch, blocks)
    padded.positions, padded.new_slots = view.positions[rows], view.new_slots[rows]  # (batch, 1) each
    return padded, token[rows]


def compile_decode(model, cache: PagedKVCache, mode: str | None = None, pad: bool | None = None) -> Callable:
    """(view, token (B, 1)) -> logits (B, vocab): decode_paged with the model's forward compiled.

    mode: torch.compile's; default "reduce-overhead" (CUDA graphs) on a CUDA device, Inductor's default elsewhere.
    pad: pad to fixed shapes (bucket_for, the longest block table); default on where CUDA graphs are recorded.
    Elsewhere the shapes are dynamic, padded to at least 2 rows and 2 blocks."""
    on_cuda = cache.k.device.type == "cuda"
    mode = mode if mode is not None else ("reduce-overhead" if on_cuda else None)
    pad = pad if pad is not None else mode == "reduce-overhead"
    if pad or mode == "reduce-overhead":
        # the pool is written in place each replay: a graph may only do that to a tensor whose address is fixed
        torch._dynamo.mark_static_address(cache.k)
        torch._dynamo.mark_static_address(cache.v)
    forward = torch.compile(model, mode=mode, dynamic=not pad, fullgraph=True)
    blocks = -(-model.max_positions // cache.allocator.block_size)  # the longest block table the model allows

    def decode(view: PagedView, token: torch.Tensor) -> torch.Tensor:
        B, width = token.shape[0], view.table.shape[1]
        # Dynamic shapes still compile a size of 1 apart from the others: never give one, and one compilation
        # (about 10 s on a CPU) serves every step.
        rows, cols = (bucket_for(B), blocks) if pad else (max(B, 2), max(width, 2))
        if (rows, cols) != (B, width):
            view, token = pad_view(view, token, rows, cols)
        return decode_paged(forward, view, token)[:B]  # (B, vocab): the padding's rows dropped

    return decode
