"""'Free memory but still out of memory' on a GPU: a fragmentation probe (CUDA only).

Run as `python -m ailab.memory.fragmentation [--expandable]` in a fresh process, because
PYTORCH_CUDA_ALLOC_CONF is read once, when CUDA initialises. The probe caps this process's share
of the GPU, carves one cached segment into blocks, frees every other one (holes between live
blocks), then asks for a block larger than any hole but smaller than all of them together.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

MiB = 2**20


def probe(block_mib: int = 64, blocks: int = 16, cap_gib: float = 2.0) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("the fragmentation probe needs a CUDA device")
    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gib * 2**30 / total), dev)
    # one big segment, freed: the allocator caches it and carves later blocks out of it
    seg = torch.empty(block_mib * blocks * MiB, dtype=torch.uint8, device=dev)
    del seg
    held = [torch.empty(block_mib * MiB, dtype=torch.uint8, device=dev) for _ in range(blocks)]
    for i in range(0, blocks, 2):
        held[i] = None  # every other block freed: holes of block_mib between live blocks
    request = 3 * block_mib * MiB  # larger than any hole, smaller than all the holes together
    # Fill the rest of the cap with blocks too big for the holes (so the holes stay holes), until
    # what is left outside the cache is smaller than the request: a fresh segment cannot be had either.
    filler, oom = [], False
    try:
        while True:
            filler.append(torch.empty(2 * block_mib * MiB + MiB, dtype=torch.uint8, device=dev))
    except torch.cuda.OutOfMemoryError:
        pass
    free_in_reserved = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    retries_before = torch.cuda.memory_stats(dev).get("num_alloc_retries", 0)
    try:
        big = torch.empty(request, dtype=torch.uint8, device=dev)
        del big
    except torch.cuda.OutOfMemoryError:
        oom = True
    return {"expandable": "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "free_in_reserved_mib": free_in_reserved / MiB, "request_mib": request / MiB, "oom": oom,
            "retries": torch.cuda.memory_stats(dev).get("num_alloc_retries", 0) - retries_before}


def run_probe(expandable: bool, timeout: float = 120) -> dict:
    """Run the probe in a fresh Python process with or without expandable segments."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if expandable else "expandable_segments:False"
    out = subprocess.run([sys.executable, "-m", "ailab.memory.fragmentation"], env=env, capture_output=True,
                         text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(probe()))
