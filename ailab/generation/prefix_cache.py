"""Automatic prefix caching (vLLM's, as v1's KVCacheManager does it over a BlockPool): a chat service sends the
same system prompt with every request, and the KV of those tokens is the same every time. Keep it, and the
repeated prefill becomes a lookup.

    blocks = PrefixCachingAllocator(num_blocks=64, block_size=16)     # a BlockAllocator that remembers

- A full block is named by a hash of its parent block's hash and its own token ids: the chain makes a block's
  name stand for every token before it too, so equal names mean equal prefixes (and so equal K/V).
- A request whose prompt begins with cached blocks takes them (their reference count goes up) and prefills only
  the rest; at least its last token is always computed, for the logits of its first new token.
- A block whose last user leaves keeps its K/V and its name, on the free queue: it is reused only when a new block
  is needed and none is older (least recently freed first), and its name is forgotten then (evicted). A block
  that was never named is reused first: nobody can hit it.
- Blocks are named after a step has written them (`cache_full_blocks`), prompt and generated tokens alike, so a
  preempted request, or the next turn of a chat, finds its own blocks again.

Queries and hits are counted in tokens, as vLLM's `prefix_cache_queries` and `prefix_cache_hits` are.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

from ailab.generation.paged import BlockAllocator, OutOfBlocks


class FreeBlockQueue:
    """The free blocks in the order they will be reused: a deque that can also take a block out of its middle
    (a cached block that a new request hits leaves the queue from wherever it is)."""

    def __init__(self, blocks: Sequence[int] = ()):
        self._order: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self):
        return iter(self._order)

    def __contains__(self, block: int) -> bool:
        return block in self._order

    def popleft(self) -> int:
        return self._order.popitem(last=False)[0]

    def append(self, block: int) -> None:
        self._order[block] = None

    def appendleft(self, block: int) -> None:
        self._order[block] = None
        self._order.move_to_end(block, last=False)

    def extend(self, blocks) -> None:
        for b in blocks:
            self.append(b)

    def remove(self, block: int) -> None:
        del self._order[block]


def block_hash(parent: int | None, tokens: Sequence[int]) -> int:
    """A full block's name: its parent's name and its own tokens. Python's hash of a tuple of ints is the same in
    every process (only str and bytes hashes are salted); a 64-bit collision is as unlikely as vLLM's default."""
    return hash((parent, tuple(tokens)))


class PrefixCachingAllocator(BlockAllocator):
    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.free_blocks = FreeBlockQueue(range(num_blocks))
        self.ref_count = [0] * num_blocks
        self.hash_of: dict[int, int] = {}  # block -> its name, while it holds named K/V
        self.cached: dict[int, int] = {}  # name -> block
        self.hashes: dict[Hashable, list[int]] = {}  # sequence -> the names of its full blocks, in order
        self.computed: dict[Hashable, int] = {}  # sequence -> tokens whose K/V it found cached when admitted
        self.queries = self.hits = 0  # tokens asked for, tokens found (cumulative)

    def cache_hit(self, token_ids: Sequence[int]) -> list[int]:
        """The cached blocks that `token_ids` begins with, in order: full blocks only, and never all of the
        tokens (the last one is computed for its logits). Looks, changes nothing."""
        hit, parent = [], None
        for i in range((len(token_ids) - 1) // self.block_size):
            parent = block_hash(parent, token_ids[i * self.block_size : (i + 1) * self.block_size])
            block = self.cached.get(parent)
            if block is None:
                break
            hit.append(block)
        return hit

    def can_allocate(self, tokens: int, token_ids: Sequence[int] | None = None) -> bool:
        return self._fits(tokens, self.cache_hit(token_ids) if token_ids is not None else [])

    def _fits(self, tokens: int, hit: list[int]) -> bool:
        taken_from_free = sum(self.ref_count[b] == 0 for b in hit)  # a cached block nobody holds sits in the queue
        return self.blocks_for(tokens) - len(hit) + taken_from_free <= len(self.free_blocks)

    def allocate(self, seq: Hashable, tokens: int, token_ids: Sequence[int] | None = None) -> list[int]:
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already has blocks; free it first")
        if tokens < 1:
            raise ValueError(f"a sequence starts with at least one token, got {tokens}")
        hit = self.cache_hit(token_ids) if token_ids is not None else []  # the hash chain, walked once here
        if not self._fits(tokens, hit):
            raise OutOfBlocks(self.blocks_for(tokens), len(self.free_blocks))
        for b in hit:
            if self.ref_count[b] == 0:
                self.free_blocks.remove(b)
            self.ref_count[b] += 1
        fresh = [self._take_free() for _ in range(self.blocks_for(tokens) - len(hit))]
        self.tables[seq], self.lengths[seq] = hit + fresh, tokens
        self.hashes[seq] = [self.hash_of[b] for b in hit]
        self.computed[seq] = len(hit) * self.block_size
        if token_ids is not None:
            self.queries, self.hits = self.queries + tokens, self.hits + self.computed[seq]
        return self.tables[seq]

    def computed_tokens(self, seq: Hashable) -> int:
        return self.computed.get(seq, 0)

    def append(self, seq: Hashable) -> int:
        pos, table = self.lengths[seq], self.tables[seq]
        if pos == len(table) * self.block_size:
            if not self.free_blocks:
                raise OutOfBlocks(1, 0)
            table.append(self._take_free())
        self.lengths[seq] = pos + 1
        return self.slot(seq, pos)

    def cache_full_blocks(self, seq: Hashable, prompt: Sequence[int], output: Sequence[int], computed: int) -> None:
        """Name the blocks of `seq` that are full of written K/V (its first `computed` tokens: the prompt, then the
        output), so later requests can hit them. Cheap when no block has filled since the last call."""
        names, table = self.hashes[seq], self.tables[seq]
        full = computed // self.block_size
        if full <= len(names):
            return
        token_ids = list(prompt) + list(output)
        for i in range(len(names), full):
            name = block_hash(names[-1] if names else None, token_ids[i * self.block_size : (i + 1) * self.block_size])
            names.append(name)
            block = table[i]
            if name not in self.cached and block not in self.hash_of:  # the first copy keeps the name
                self.cached[name], self.hash_of[block] = block, name

    def free(self, seq: Hashable) -> None:
        """The sequence's blocks lose a user each; a block nobody holds goes on the free queue, its tail first,
        so that a prefix's first blocks are the last to be reused."""
        for b in reversed(self.tables.pop(seq)):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                if b in self.hash_of:
                    self.free_blocks.append(b)  # keeps its K/V: least recently freed is reused first
                else:
                    self.free_blocks.appendleft(b)  # holds nothing anyone can hit: reused first
        del self.lengths[seq], self.hashes[seq], self.computed[seq]

    def _take_free(self) -> int:
        b = self.free_blocks.popleft()
        if b in self.hash_of:  # evicted: its K/V is about to be overwritten
            del self.cached[self.hash_of.pop(b)]
        self.ref_count[b] = 1
        return b
