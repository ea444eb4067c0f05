"""What the CUDA caching allocator hands out for a request: blocks, not bytes.

`torch.cuda.memory_allocated()` counts the blocks the allocator handed out; `memory_stats()["requested_bytes.*"]`
counts the bytes the tensors asked for. They differ by the allocator's rounding (PyTorch's
c10/cuda/CUDACachingAllocator.cpp, default settings):

- every request is rounded up to a multiple of 512 bytes;
- a request of 1 MiB or less comes from a 2 MiB segment (the small pool) and gets exactly its rounded size;
- a larger one takes the smallest cached free block that fits, else a new segment: 20 MiB for requests under
  10 MiB, else the request rounded up to 2 MiB;
- a large block is split only when more than 1 MiB would be left over; otherwise the whole block is handed
  out, and counted as allocated.

So a 35 MiB tensor alone in a fresh segment is 36 MiB allocated. Notebook 5/01 measured exactly that on an
H200 (its KV cache in bf16, 8 sequences x 448 tokens: K and V asked for 35 MiB each and got 36 MiB each).
With `expandable_segments:True` a block is split whenever 512 bytes or more would be left, so only the 512-byte
rounding shows. `fresh_blocks` predicts the blocks of a sequence of requests made to an empty pool;
`allocated_and_requested` measures both counters around a call, in a private pool so that nothing cached
earlier can serve it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Sequence

MiB = 2**20
MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to this
SMALL_SIZE = 1 * MiB  # kSmallSize: the largest request of the small pool
SMALL_SEGMENT = 2 * MiB  # kSmallBuffer: the small pool's segments
LARGE_SEGMENT = 20 * MiB  # kLargeBuffer: the segment for requests between 1 and 10 MiB
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc: from here on a segment is the request rounded up to...
ROUND_LARGE = 2 * MiB  # kRoundLarge


def round_request(nbytes: int) -> int:
    """A request's size as the allocator files it: at least 512 bytes, a multiple of 512."""
    if nbytes < 0:
        raise ValueError(f"a request of {nbytes} bytes")
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def segment_bytes(size: int) -> int:
    """The segment the allocator asks the driver for when no cached block fits a (rounded) request."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def fresh_blocks(requests: Sequence[int], expandable: bool = False) -> list[int]:
    """The block each request gets when `requests` (bytes) are allocated in order from an empty pool, none freed
    in between: best fit among the free remainders of earlier segments, else a new segment; split or not by the
    allocator's rule. With expandable segments every block is its rounded request (split down to 512 bytes)."""
    out: list[int] = []
    free = {True: [], False: []}  # small pool?, the free remainders (bytes) of its segments
    for nbytes in requests:
        size = round_request(nbytes)
        if expandable:
            out.append(size)
            continue
        small = size <= SMALL_SIZE
        fits = [b for b in free[small] if b >= size]
        if fits:
            block = min(fits)
            free[small].remove(block)
        else:
            block = segment_bytes(size)
        left = block - size
        if (left >= MIN_BLOCK) if small else (left > SMALL_SIZE):  # split: the rest stays free for later ones
            free[small].append(left)
            block = size
        out.append(block)
    return out


@contextmanager
def _private_pool(index: int):
    """A fresh allocator pool for the calls inside (torch.cuda.MemPool), so that no block cached before can
    serve them; where this torch has none, the default pool after empty_cache(). Yields the pool's name."""
    import torch

    try:
        if hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool"):
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool, device=index):
                yield "private pool (torch.cuda.MemPool)"
            del pool
        else:
            torch.cuda.empty_cache()
            yield "default pool after empty_cache()"
    finally:
        torch.cuda.empty_cache()


def allocated_and_requested(fn: Callable[[], object], device) -> dict:
    """Peak bytes allocated (blocks) and requested (bytes asked for) by `fn()` on a CUDA `device`, above what
    was held before, with `fn` served by a fresh pool. What `fn` returns is freed before this returns."""
    import torch

    device = torch.device(device)
    index = torch.cuda.current_device() if device.index is None else device.index  # torch wants an index
    torch.cuda.synchronize(index)
    before = torch.cuda.memory_stats(index)
    with _private_pool(index) as pool:
        torch.cuda.reset_peak_memory_stats(index)
        result = fn()
        torch.cuda.synchronize(index)
        after = torch.cuda.memory_stats(index)
        del result
    return {
        "allocated": after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"],
        "requested": after["requested_bytes.all.peak"] - before["requested_bytes.all.current"],
        "pool": pool,
    }


def block_bounds(requests: Sequence[int]) -> tuple[int, int]:
    """The least and the most the allocator can hand out for `requests`, whatever it had cached before: each
    request rounded to 512 bytes at least; a large one can also get up to 1 MiB more (a cached or fresh block it
    does not split), a small one less than 512 bytes more."""
    rounded = [round_request(n) for n in requests]
    return sum(rounded), sum(r + (SMALL_SIZE if r > SMALL_SIZE else MIN_BLOCK - 1) for r in rounded)
