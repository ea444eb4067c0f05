"""Paged KV blocks (vLLM's PagedAttention idea): the cache is a pool of fixed-size blocks, and each sequence
owns a block table, grown one block at a time as it generates. A sequence wastes at most the unused tail of
its last block, instead of everything between its length and a reserved maximum.

    BlockAllocator   the free list and the block tables: which slots hold which sequence's tokens
    PagedKVCache     the K/V storage: (layers, num_blocks * block_size, heads, head_dim) slots
    PagedView        one forward call's view: new tokens' slots, and every cached block gathered per sequence

Running out of blocks raises OutOfBlocks before anything is taken: the caller decides whether the request
waits or is refused. It is never an out-of-memory crash.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable, Sequence

import torch

from ailab.generation.decoder import masked_attention
from ailab.generation.kv_cache import model_placement


@torch.library.custom_op("ailab::store_kv", mutates_args=("pool",))
def store_kv(pool: torch.Tensor, layer: int, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """pool[layer, slots] = rows, in place: pool (layers, slots, H, D), slots (N,), rows (N, H, D). A custom op so
    that torch.compile leaves the write as it is (compiled.py says why): eager code writes with plain indexing."""
    pool[layer].index_copy_(0, slots, rows)


class OutOfBlocks(RuntimeError):
    """Not enough free blocks for what was asked; nothing was allocated."""

    def __init__(self, needed: int, free: int):
        super().__init__(f"needs {needed} free KV blocks, {free} are free")
        self.needed, self.free = needed, free


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1 (got {num_blocks}, {block_size})")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_allocate(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= len(self.free_blocks)

    def allocate(self, seq: Hashable, tokens: int) -> list[int]:
        """Blocks for a new sequence's first `tokens` tokens (its prompt)."""
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already has blocks; free it first")
        if tokens < 1:
            raise ValueError(f"a sequence starts with at least one token, got {tokens}")
        need = self.blocks_for(tokens)
        if need > len(self.free_blocks):
            raise OutOfBlocks(need, len(self.free_blocks))
        self.tables[seq] = [self.free_blocks.popleft() for _ in range(need)]
        self.lengths[seq] = tokens
        return self.tables[seq]

    def append(self, seq: Hashable) -> int:
        """A slot for one more token of `seq` (a new block when its last one is full); returns the slot."""
        pos, table = self.lengths[seq], self.tables[seq]
        if pos == len(table) * self.block_size:
            if not self.free_blocks:
                raise OutOfBlocks(1, 0)
            table.append(self.free_blocks.popleft())
        self.lengths[seq] = pos + 1
        return self.slot(seq, pos)

    def slot(self, seq: Hashable, pos: int) -> int:
        return self.tables[seq][pos // self.block_size] * self.block_size + pos % self.block_size

    def free(self, seq: Hashable) -> None:
        """Return a finished or cancelled sequence's blocks to the free list."""
        self.free_blocks.extend(self.tables.pop(seq))
        del self.lengths[seq]

    @property
    def used_tokens(self) -> int:
        return sum(self.lengths.values())

    @property
    def reserved_tokens(self) -> int:
        return sum(len(t) for t in self.tables.values()) * self.block_size

    def table_tensor(self, seqs: Sequence[Hashable], device="cpu") -> torch.Tensor:
        """(B, max blocks) block ids, padded with block 0 (the padding is masked out by position)."""
        width = max(len(self.tables[s]) for s in seqs)
        return torch.tensor([self.tables[s] + [0] * (width - len(self.tables[s])) for s in seqs], device=device)


class PagedKVCache:
    def __init__(
        self,
        n_layer: int,
        n_head: int,
        head_dim: int,
        allocator: BlockAllocator,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ):
        slots = allocator.num_blocks * allocator.block_size
        self.k = torch.zeros(n_layer, slots, n_head, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.allocator = allocator

    @classmethod
    def for_model(
        cls,
        model,
        num_blocks: int,
        block_size: int = 16,
        dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
    ) -> "PagedKVCache":
        """A pool of `num_blocks` blocks shaped for `model`; its dtype and device are the model's unless given."""
        dtype, device = model_placement(model, dtype, device)
        return cls(model.n_layer, model.n_head, model.head_dim, BlockAllocator(num_blocks, block_size), dtype, device)

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def view(self, seqs: Sequence[Hashable], new_tokens: int) -> "PagedView":
        """For a forward call whose last `new_tokens` tokens of each of `seqs` already have slots
        (allocate() for a prompt, append() for a decode step)."""
        return PagedView(self, seqs, new_tokens)


class PagedView:
    def __init__(self, cache: PagedKVCache, seqs: Sequence[Hashable], new_tokens: int):
        a, device = cache.allocator, cache.k.device
        held = [a.lengths[s] for s in seqs]
        if min(held) < new_tokens:  # checked on the host: reading a GPU tensor here would wait for the device
            raise ValueError(f"a sequence holds fewer than the {new_tokens} new tokens")
        lengths = torch.tensor(held, device=device)  # (B,)
        self.table = a.table_tensor(seqs, device)  # (B, blocks)
        self.positions = lengths[:, None] - new_tokens + torch.arange(new_tokens, device=device)  # (B, T)
        self.new_slots = (
            self.table.gather(1, self.positions // a.block_size) * a.block_size + self.positions % a.block_size
        )  # (B, T)
        self.block_size, self.cache = a.block_size, cache

    def attend(self, layer: int, q, k, v, scale: float):
        B, H, T, D = k.shape
        store_k, store_v = self.cache.k[layer], self.cache.v[layer]  # (slots, H, D)
        new_k, new_v = (z.transpose(1, 2).reshape(B * T, H, D) for z in (k, v))  # (B*T, H, D)
        if torch.compiler.is_compiling():
            store_kv(self.cache.k, layer, self.new_slots.reshape(-1), new_k)
            store_kv(self.cache.v, layer, self.new_slots.reshape(-1), new_v)
        else:
            store_k[self.new_slots.reshape(-1)], store_v[self.new_slots.reshape(-1)] = new_k, new_v
        # Gathered a whole block at a time (one index per block, not per token): S is the longest table's
        # blocks * block_size; slots past a sequence's length (a tail, or block-0 padding) are masked out.
        width = self.table.shape[1] * self.block_size
        keys = store_k.view(-1, self.block_size, H, D)[self.table].view(B, width, H, D).transpose(1, 2)  # (B, H, S, D)
        values = store_v.view(-1, self.block_size, H, D)[self.table].view(B, width, H, D).transpose(1, 2)
        key_pos = torch.arange(width, device=q.device)
        allowed = key_pos[None, None, :] <= self.positions[:, :, None]  # (B, T, S)
        return masked_attention(q, keys, values, allowed[:, None], scale)
