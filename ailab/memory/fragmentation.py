"""'Free memory but still out of memory' on a GPU, and what expandable segments change (CUDA only).

`run_probe(expandable)` runs `probe()` in a fresh process, because PYTORCH_CUDA_ALLOC_CONF is read once, when
CUDA initialises. Both allocator modes hold the *same live set* under the *same cap*, then make the *same
request* (the sizes are `Plan`'s; every figure the verdict rests on is returned):

  1. cap this process's caching allocator at `cap_mib` (set_per_process_memory_fraction);
  2. allocate `blocks` x `block_mib` back to back in one cached range, free every other one: holes of
     `block_mib` between live blocks;
  3. add `fillers` blocks of `filler_mib` (larger than a hole, so none lands in one). Their number is fixed by
     the plan, not "until out of memory": under expandable segments an OOM while filling releases the holes'
     pages and the fillers take them, so the two modes would end up holding different sets (the first GPU
     run, 2026-12-04, measured exactly that: 118 MiB left in the holes instead of 512);
  4. ask for `request_mib`: more than any hole and than the room left under the cap, less than the holes
     together.

Default allocator: a segment is one cudaMalloc and goes back to the driver only when wholly free, so the holes
stay reserved and useless. The request needs a new segment, the cap refuses it, the allocator frees the wholly
free segments (none), retries once (`num_alloc_retries`) and raises OutOfMemoryError with the holes still free.
expandable_segments:True: one segment per stream, a reserved virtual range into which physical pages (20 MiB
each in the large pool) are mapped as needed. On the retry the allocator unmaps the free pages inside the
holes, which gives their memory back under the cap, and maps as much again at the segment's end: the same
request fits. (PyTorch's c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks -> unmap_block.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass

MiB = 2**20


@dataclass(frozen=True)
class Plan:
    """The sizes of the probe, in MiB. Multiples of 2 MiB, so both allocators hand out exactly these blocks."""

    cap_mib: int = 2048
    block_mib: int = 64
    blocks: int = 16
    filler_mib: int = 130  # larger than a hole
    request_mib: int = 192  # 3 holes' worth

    @property
    def fillers(self) -> int:
        return (self.cap_mib - self.blocks * self.block_mib) // self.filler_mib

    @property
    def live_mib(self) -> int:
        """What is still allocated when the request comes: every other block, and the fillers."""
        return (self.blocks - self.blocks // 2) * self.block_mib + self.fillers * self.filler_mib

    def check(self) -> "Plan":
        holes = self.blocks // 2 * self.block_mib
        room = self.cap_mib - self.blocks * self.block_mib - self.fillers * self.filler_mib
        problems = [
            why
            for bad, why in (
                (
                    any(v % 2 for v in (self.cap_mib, self.block_mib, self.filler_mib, self.request_mib)),
                    "every size must be a multiple of 2 MiB (the allocator's rounding above 10 MiB)",
                ),
                (self.block_mib <= 10, "blocks must be over 10 MiB, so each is its own size, not carved from 20 MiB"),
                (self.filler_mib <= self.block_mib, "a filler must be larger than a hole"),
                (self.request_mib <= self.block_mib, "the request must be larger than any hole"),
                (self.request_mib > holes, "the request must fit in the holes together"),
                (room >= self.request_mib, "the room left under the cap must be smaller than the request"),
                (room < 40, "leave 40 MiB under the cap for the expandable segment's 20 MiB page rounding"),
            )
            if bad
        ]
        if problems:
            raise ValueError(f"fragmentation plan {self}: " + "; ".join(problems))
        return self


def cap_process_memory(cap_bytes: int, device: int) -> float:
    """Limit this process's caching allocator on GPU `device` (an index) to about `cap_bytes`; returns the
    fraction set. torch refuses torch.device('cuda') without an index here (ValueError), hence the int."""
    import torch

    if not isinstance(device, int):
        raise TypeError(f"device must be a GPU index (int), got {device!r}")
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = min(1.0, cap_bytes / total)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def _largest_free_block(device: int) -> int | None:
    """The largest cached block not in use (a hole), from the allocator's own snapshot; None where this torch's
    snapshot has another shape (the figure is shown, the verdict does not need it)."""
    import torch

    try:
        sizes = [
            b["size"]
            for seg in torch.cuda.memory_snapshot()
            if seg.get("device", device) == device
            for b in seg["blocks"]
            if b["state"] == "inactive"
        ]
    except (KeyError, TypeError, RuntimeError):
        return None
    return max(sizes, default=0)


def probe(plan: Plan = Plan()) -> dict:
    """Build the live set of `plan`, then make its request; every figure the verdict depends on, in MiB."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("the fragmentation probe needs a CUDA device")
    plan.check()
    dev = torch.cuda.current_device()
    fraction = cap_process_memory(plan.cap_mib * MiB, dev)

    def alloc(mib: int):
        return torch.empty(mib * MiB, dtype=torch.uint8, device=dev)

    try:
        whole = alloc(plan.blocks * plan.block_mib)  # one range, freed: the blocks below are carved from it
        del whole
        held = [alloc(plan.block_mib) for _ in range(plan.blocks)]
        for i in range(0, plan.blocks, 2):
            held[i] = None  # every other block freed: the holes
        fillers = [alloc(plan.filler_mib) for _ in range(plan.fillers)]
    except torch.cuda.OutOfMemoryError as err:
        raise RuntimeError(f"the probe ran out of memory while building its live set ({plan}): {err}") from err
    torch.cuda.synchronize(dev)
    stats = torch.cuda.memory_stats(dev)
    before = {
        "live": torch.cuda.memory_allocated(dev),
        "reserved": torch.cuda.memory_reserved(dev),
        "largest_free": _largest_free_block(dev),
        "retries": stats.get("num_alloc_retries", 0),
        "device_frees": stats.get("num_device_free", 0),
    }
    oom = False
    try:
        big = alloc(plan.request_mib)
        del big
    except torch.cuda.OutOfMemoryError:
        oom = True
    stats = torch.cuda.memory_stats(dev)
    cap = fraction * torch.cuda.get_device_properties(dev).total_memory
    out = {
        "expandable": "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        **asdict(plan),
        "fillers": len(fillers),
        "cap_set_mib": cap / MiB,
        "live_mib": before["live"] / MiB,
        "reserved_mib": before["reserved"] / MiB,
        "free_in_reserved_mib": (before["reserved"] - before["live"]) / MiB,
        "largest_free_block_mib": None if before["largest_free"] is None else before["largest_free"] / MiB,
        "room_under_cap_mib": (cap - before["reserved"]) / MiB,
        "oom": oom,
        "retries": stats.get("num_alloc_retries", 0) - before["retries"],
        # segments freed (cudaFree) or page ranges unmapped while the request was served
        "device_frees": stats.get("num_device_free", 0) - before["device_frees"],
        "reserved_after_mib": torch.cuda.memory_reserved(dev) / MiB,
    }
    del held, fillers
    return out


def compare(plain: dict, expandable: dict) -> dict:
    """The lesson's three claims from the two probes: same live set and request; the default allocator OOMs
    with the request's worth free inside what it reserved; expandable segments serve the same request."""
    same = all(plain[k] == expandable[k] for k in ("live_mib", "request_mib", "cap_mib", "fillers"))
    return {
        "same_live_set_and_request": same,
        "default_ooms_with_free_memory": bool(
            plain["oom"]
            and plain["free_in_reserved_mib"] >= plain["request_mib"]
            and plain["room_under_cap_mib"] < plain["request_mib"]
        ),
        "expandable_avoids_it": bool(same and plain["oom"] and not expandable["oom"]),
    }


def run_probe(expandable: bool, timeout: float = 120) -> dict:
    """`probe()` in a fresh Python process with or without expandable segments."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if expandable else "expandable_segments:False"
    out = subprocess.run(
        [sys.executable, "-m", "ailab.memory.fragmentation"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(probe()))
