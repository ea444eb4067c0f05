"""Paged KV blocks (vLLM's PagedAttention idea): the cache is a pool of fixed-size blocks, and each sequence
owns a block table, grown one block at a time as it generates. A sequence wastes at most the unused tail of
its last block, instead of everything between its length and a reserved maximum.

    BlockAllocator   the free list and the block tables: which slots hold which sequence's tokens
    PagedKVCache     the K/V storage: (layers, num_blocks * block_size, heads, head_dim) slots
    PagedView        one forward call's view: new tokens' slots, and every cached block gathered per sequence
    PackedView       the same for sequences that bring different numbers of new tokens (a step that mixes
                     prompts and decodes): their tokens packed in one row, each attending over its own blocks

Running out of blocks raises OutOfBlocks before anything is taken: the caller decides whether the request
waits or is refused. It is never an out-of-memory crash.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Hashable, Sequence

import torch

from ailab.generation.attention import masked_attention
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

    def can_allocate(self, tokens: int, token_ids: Sequence[int] | None = None) -> bool:
        """`token_ids`: the tokens themselves, for an allocator that caches prefixes (prefix_cache.py); unused here."""
        return self.blocks_for(tokens) <= len(self.free_blocks)

    def allocate(self, seq: Hashable, tokens: int, token_ids: Sequence[int] | None = None) -> list[int]:
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

    def computed_tokens(self, seq: Hashable) -> int:
        """Tokens of `seq` whose K/V were already in the cache when it was admitted: none here."""
        return 0

    def cache_full_blocks(self, seq: Hashable, prompt: Sequence[int], output: Sequence[int], computed: int) -> None:
        """Nothing to remember here; a prefix-caching allocator names the blocks full of computed K/V."""

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

    def table_tensor(self, seqs: Sequence[Hashable], device="cpu", tokens: Sequence[int] | None = None) -> torch.Tensor:
        """(B, max blocks) block ids, padded with block 0 (the padding is masked out by position). `tokens`: only
        the blocks that hold each sequence's first so many tokens (a prompt's chunk attends to no block past it)."""
        rows = [self.tables[s] for s in seqs]
        if tokens is not None:
            rows = [row[: self.blocks_for(n)] for row, n in zip(rows, tokens)]
        width = max(len(row) for row in rows)
        return torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)


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
        allocator: type[BlockAllocator] | None = None,
    ) -> "PagedKVCache":
        """A pool of `num_blocks` blocks shaped for `model`; its dtype and device are the model's unless given.
        `allocator`: the class that hands out the blocks (prefix_cache.PrefixCachingAllocator keeps full blocks
        and shares them between prompts that begin alike); BlockAllocator unless given."""
        dtype, device = model_placement(model, dtype, device)
        alloc = (allocator or BlockAllocator)(num_blocks, block_size)
        return cls(model.n_layer, model.n_head, model.head_dim, alloc, dtype, device)

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def view(self, seqs: Sequence[Hashable], new_tokens: int) -> "PagedView":
        """For a forward call whose last `new_tokens` tokens of each of `seqs` already have slots
        (allocate() for a prompt, append() for a decode step)."""
        return PagedView(self, seqs, new_tokens)

    def packed_view(
        self, seqs: Sequence[Hashable], new_tokens: Sequence[int], starts: Sequence[int] | None = None
    ) -> "PackedView":
        """For one forward over `seqs`, the i-th bringing its last `new_tokens[i]` tokens (already with slots), or,
        with `starts`, the ones from position `starts[i]` on (a chunk of a prompt whose blocks are reserved)."""
        return PackedView(self, seqs, new_tokens, starts)


def gather_blocks(store: torch.Tensor, table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Each sequence's blocks, whole and in table order: store (slots, H, D) and table (B, blocks) in,
    (B, blocks * block_size, H, D) out. index_select on the block axis, not store[table]: both copy the same
    bytes, but in eager mode on a CPU the advanced index took about 4x as long (15 tables of 5 blocks: 75 us
    against 17), and a decode step makes two of these per layer. Under torch.compile it is the other way round:
    the compiled step with index_select ran 1.4-2.9x slower than with the index (ailab bench generation), so the
    compiled step keeps the index."""
    B, n = table.shape  # (B, blocks)
    _, H, D = store.shape
    blocks = store.view(-1, block_size, H, D)  # (num_blocks, block_size, H, D)
    if torch.compiler.is_compiling():
        return blocks[table].view(B, n * block_size, H, D)
    return torch.index_select(blocks, 0, table.reshape(-1)).view(B, n * block_size, H, D)


# What attending one more group of sequences costs, in blocks gathered: a group's gathers, mask and attention are
# a handful of operations per layer whatever its size (see width_groups).
GROUP_COST_BLOCKS = 16


def width_groups(widths: Sequence[int], group_cost: int | None = None) -> list[list[int]]:
    """The sequences (indices into `widths`, each a block table's width in blocks) split into groups that attend
    apart, narrowest first. Sequences attended together are padded to the widest of them: one 900-token sequence
    among seven of 100 made every one of them gather and attend over 900 slots, and a decode step cost 6x what it
    did without it (8m model, 2 cores). A sequence starts a group of its own when joining the last one would pad
    that group by more blocks than a group of its own costs."""
    group_cost = GROUP_COST_BLOCKS if group_cost is None else group_cost
    order = sorted(range(len(widths)), key=widths.__getitem__)
    groups = [[order[0]]]
    for i in order[1:]:
        last = groups[-1]
        if len(last) * (widths[i] - widths[last[-1]]) > group_cost:
            groups.append([i])
        else:
            last.append(i)
    return groups


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
        # eager steps attend in groups of like widths; a compiled step keeps one padded batch (one graph)
        groups = width_groups([len(a.tables[s]) for s in seqs])
        self.groups = (
            [(torch.tensor(g, device=device), a.table_tensor([seqs[i] for i in g], device)) for g in groups]
            if len(groups) > 1
            else None
        )

    def attend(self, layer: int, q, k, v, scale: float):
        B, H, T, D = k.shape
        store_k, store_v = self.cache.k[layer], self.cache.v[layer]  # (slots, H, D)
        new_k, new_v = (z.transpose(1, 2).reshape(B * T, H, D) for z in (k, v))  # (B*T, H, D)
        if torch.compiler.is_compiling():
            store_kv(self.cache.k, layer, self.new_slots.reshape(-1), new_k)
            store_kv(self.cache.v, layer, self.new_slots.reshape(-1), new_v)
            return self._attend(layer, q, self.table, self.positions, scale)
        store_k[self.new_slots.reshape(-1)], store_v[self.new_slots.reshape(-1)] = new_k, new_v
        if self.groups is None:
            return self._attend(layer, q, self.table, self.positions, scale)
        y = torch.empty_like(q)  # (B, H, T, D)
        for rows, table in self.groups:
            y.index_copy_(0, rows, self._attend(layer, q[rows], table, self.positions[rows], scale))
        return y

    def _attend(self, layer: int, q, table, positions, scale: float):
        """q (B, H, T, D) over the blocks of `table` (B, blocks), each query at its `positions` (B, T)."""
        # Gathered a whole block at a time (one index per block, not per token): S is the longest table's
        # blocks * block_size; slots past a sequence's length (a tail, or block-0 padding) are masked out.
        width = table.shape[1] * self.block_size
        keys = gather_blocks(self.cache.k[layer], table, self.block_size).transpose(1, 2)  # (B, H, S, D)
        values = gather_blocks(self.cache.v[layer], table, self.block_size).transpose(1, 2)
        key_pos = torch.arange(width, device=q.device)
        allowed = key_pos[None, None, :] <= positions[:, :, None]  # (B, T, S)
        return masked_attention(q, keys, values, allowed[:, None], scale)


class PackedView:
    """A step's new tokens, sequence after sequence, in one row (1, N): a prompt's 60 and a decode's 1 side by side,
    so the model's matrix products run once over N tokens with no padding (vLLM v1 schedules tokens this way).
    Only attention needs each sequence apart. There the sequences are taken in two groups, those with one new
    token (decodes) and those with more (prompts), and each group attends as a PagedView batch would: its queries
    in a (B, T) grid, padded to its longest, over its own gathered blocks. Two groups, not one grid, because a
    decode padded to a prompt's length pays the prompt's attention (measured: a 60-token prompt beside 15 decodes
    in one grid, 1.3x slower than two separate forwards)."""

    def __init__(
        self, cache: PagedKVCache, seqs: Sequence[Hashable], new_tokens: Sequence[int], starts: Sequence[int] | None
    ):
        a, device = cache.allocator, cache.k.device
        counts = list(new_tokens)
        if len(counts) != len(seqs) or not seqs:
            raise ValueError(f"one count of new tokens per sequence: {len(seqs)} sequences, {len(counts)} counts")
        held = [a.lengths[s] for s in seqs]
        if starts is not None:  # a chunk ends where it ends, not at the end of what its sequence holds
            held = [start + n for start, n in zip(starts, counts)]
            if any(h > a.lengths[s] for s, h in zip(seqs, held)):
                raise ValueError(f"a chunk runs past its sequence's slots: ends {held}")
        if any(n < 1 or n > h for n, h in zip(counts, held)):
            raise ValueError(f"each sequence brings 1 to its length of new tokens; got {counts} for lengths {held}")
        # Built on the host from the block tables, then moved in one copy per tensor.
        positions = [p for n, h in zip(counts, held) for p in range(h - n, h)]  # (N,)
        slots = [a.slot(s, p) for s, n, h in zip(seqs, counts, held) for p in range(h - n, h)]  # (N,)
        ends = list(itertools.accumulate(counts))  # each sequence's end in the packed row
        self.positions = torch.tensor([positions], device=device)  # (1, N)
        self.new_slots = torch.tensor([slots], device=device)  # (1, N)
        self.last = torch.tensor([e - 1 for e in ends], device=device)  # (B,) where each one's next-token logits are
        decodes = [i for i, n in enumerate(counts) if n == 1]
        prompts = [i for i, n in enumerate(counts) if n > 1]
        # each kind split by the blocks its tokens attend to (a chunk: only those up to its end; width_groups)
        groups = [
            [kind[j] for j in g]
            for kind in (decodes, prompts)
            if kind
            for g in width_groups([a.blocks_for(held[i]) for i in kind])
        ]
        self.groups = sorted(
            (
                _Group(
                    a,
                    [seqs[i] for i in g],
                    [counts[i] for i in g],
                    [ends[i] for i in g],
                    [held[i] for i in g],
                    positions,
                    device,
                )
                for g in groups
            ),
            key=lambda g: g.first,
        )
        # each group a stretch of the row, one after the other: their outputs are joined, not scattered
        starts = [0] + [g.end for g in self.groups[:-1]]
        self.in_row_order = all(g.contiguous and g.first == s for g, s in zip(self.groups, starts))
        self.block_size, self.cache = a.block_size, cache

    def attend(self, layer: int, q, k, v, scale: float):
        _, H, N, D = k.shape  # (1, H, N, D): the packed row
        store_k, store_v = self.cache.k[layer], self.cache.v[layer]  # (slots, H, D)
        slots = self.new_slots.reshape(-1)
        store_k[slots], store_v[slots] = k[0].transpose(0, 1), v[0].transpose(0, 1)  # (N, H, D) each
        queries = q[0].transpose(0, 1)  # (N, H, D)
        parts = []
        for g in self.groups:
            B, T = g.shape
            width = g.table.shape[1] * self.block_size
            keys = gather_blocks(store_k, g.table, self.block_size).transpose(1, 2)  # (B, H, S, D)
            values = gather_blocks(store_v, g.table, self.block_size).transpose(1, 2)
            allowed = torch.arange(width, device=q.device)[None, None, :] <= g.positions[:, :, None]  # (B, T, S)
            grid_q = g.to_grid(queries).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
            y = masked_attention(grid_q, keys, values, allowed[:, None], scale)  # (B, H, T, D)
            parts.append(g.from_grid(y.transpose(1, 2).reshape(B * T, H, D)))  # (n, H, D)
        if self.in_row_order:  # the usual case (the executor packs prompts, then decodes): no scatter
            y = torch.cat(parts) if len(parts) > 1 else parts[0]
        else:
            y = queries.new_empty(N, H, D)
            for g, part in zip(self.groups, parts):
                y.index_copy_(0, g.tokens, part)
        return y.transpose(0, 1)[None]  # (1, H, N, D)


class _Group:
    """Some of a PackedView's sequences, attended together: their tokens' places in the packed row (`tokens`),
    their cells in a (B, T) grid padded to the longest (`cells`; None when the grid needs no padding), each
    cell's position (a padding cell's is 0, so it attends to one real key and its softmax stays finite; its
    output is dropped) and the sequences' block tables."""

    def __init__(
        self, alloc: BlockAllocator, seqs, counts: list[int], ends: list[int], held: list[int], positions, device
    ):
        B, T = len(seqs), max(counts)
        tokens = [t for n, e in zip(counts, ends) for t in range(e - n, e)]
        cells = [b * T + j for b, n in enumerate(counts) for j in range(n)]
        grid_positions = [0] * (B * T)
        for t, cell in zip(tokens, cells):
            grid_positions[cell] = positions[t]
        self.shape, self.first, self.end = (B, T), tokens[0], tokens[-1] + 1
        self.contiguous = tokens == list(range(self.first, self.end))  # then a slice of the row, not a gather
        self.tokens = torch.tensor(tokens, device=device)  # (n,)
        self.cells = None if len(cells) == B * T else torch.tensor(cells, device=device)  # (n,)
        self.positions = torch.tensor(grid_positions, device=device).view(B, T)  # (B, T)
        self.table = alloc.table_tensor(seqs, device, held)  # (B, blocks): up to each one's last new token

    def to_grid(self, row: torch.Tensor) -> torch.Tensor:
        """(N, H, D) packed -> (B*T, H, D) this group's grid."""
        mine = row[self.first : self.end] if self.contiguous else row[self.tokens]  # (n, H, D)
        if self.cells is None:
            return mine
        return mine.new_zeros(self.shape[0] * self.shape[1], *mine.shape[1:]).index_copy(0, self.cells, mine)

    def from_grid(self, grid: torch.Tensor) -> torch.Tensor:
        """(B*T, H, D) -> (n, H, D), in the order of `tokens`: the padding dropped."""
        return grid if self.cells is None else grid[self.cells]
