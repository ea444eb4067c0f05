"""What `ailab serve --generate` chooses for its engine unless told: the model it builds and where, the core's
threads and its seats, from the model's arithmetic and this machine's cores, as vLLM sizes its defaults from the
model and the hardware. Serving policy, so it lives with the server; the engine core only runs what it is given.

Why the model decides. Measured here (Intel Xeon, 2 cores; 16 clients flat out, 60-token prompts, 32 tokens each;
`ailab bench generation-serve --size SIZE --requests N --rounds 3 --compare-flags "FLAGS"`, the two servers taking
turns every round; output tokens/s, the median of the per-round ratios over 8 seats and 1 core thread):

| model (decode step at 8 seats) | 16 seats, 2 threads | 2 threads | 16 seats |
|---|---|---|---|
| `30m` (0.51 GFLOP)  | 1.95x (182 -> 319 tok/s; TTFT p50 1,692 -> 364 ms) | 1.51x | 1.42x |
| `8m` (0.11 GFLOP)   | 1.11x (rounds 1.06-1.34) | 1.08x | 1.08x |
| `1m` (0.014 GFLOP)  | | 0.94x (rounds 0.88-0.97) | 1.15x (TTFT p50 179 -> 28 ms, TPOT p99 5.8 -> 9.1 ms) |

A step of the `1m` model is mostly Python and scheduling: a second torch thread takes a core from the HTTP side and
serves less. Larger steps are arithmetic over every weight, read once per step: more threads share the arithmetic
and more seats share the read. The `1m` model keeps 8 seats although 16 served more on this short trace: the
course's labs and the LLM capstone start from 8 seats and 256 blocks, where 16 seats run out of blocks on longer
prompts (lab_capstone_llm's notes), and its TPOT tail grew by half.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# A decode step whose arithmetic at 8 seats reaches this many GFLOP (2 FLOPs per weight per sequence) gets every
# core and twice the seats: between the 1m model's 0.014 (2 threads served 0.94x) and the 8m model's 0.11 (1.11x).
COMPUTE_BOUND_STEP_GFLOP = 0.05
SMALL_MODEL_SEATS = 8  # sequences decoded together at most (the scheduler's max_running; --generate-seats)
LARGE_MODEL_SEATS = 16


@dataclass(frozen=True)
class EngineDefaults:
    """The seats and core threads --generate SIZE runs with unless told, and why, in words for the start-up line
    and /healthz."""

    size: str
    params: int
    seats: int
    core_threads: int
    step_gflop: float
    why: str


def engine_defaults(size: str, cores: int | None = None) -> EngineDefaults:
    """Seats and core threads for tiny_gpt(size) on a machine of `cores` cores (default: this one's)."""
    from ailab.models import tiny_gpt_params

    cores = cores or os.cpu_count() or 2
    params = tiny_gpt_params(size)
    gflop = 2 * params * SMALL_MODEL_SEATS / 1e9
    if gflop >= COMPUTE_BOUND_STEP_GFLOP:
        seats, threads = LARGE_MODEL_SEATS, cores
        why = (
            f"a decode step of {SMALL_MODEL_SEATS} sequences is {gflop:.2f} GFLOP, at least "
            f"{COMPUTE_BOUND_STEP_GFLOP} GFLOP: the step is arithmetic, so the core takes all {cores} cores and "
            f"{seats} seats share each read of the weights"
        )
    else:
        seats, threads = SMALL_MODEL_SEATS, max(1, cores - 1)
        why = (
            f"a decode step of {SMALL_MODEL_SEATS} sequences is {gflop:.3f} GFLOP, under "
            f"{COMPUTE_BOUND_STEP_GFLOP} GFLOP: the step is mostly Python and scheduling, so the core leaves one "
            f"of {cores} cores to the HTTP side"
        )
    return EngineDefaults(size, params, seats, threads, round(gflop, 4), why)


def default_core_threads(size: str = "1m") -> int:
    """torch's threads for the engine core of tiny_gpt(size) (engine_defaults)."""
    return engine_defaults(size).core_threads


def generation_model(size: str, weights: str | None = None, sha256: str | None = None, quantization: str | None = None):
    """The Decoder served: tiny_gpt(size), or weights saved by train.save_lm (hash-checked), where the classifiers
    run (predictors.py picks the same device); the KV block pool follows the model. With `quantization` ("int8",
    "int4"), the blocks' linear weights are stored in fewer bits (ailab.quantize.weight_only): through PyTorch's
    CPU kernels on a CPU, dequantized before each matmul elsewhere (those kernels are CPU-only). Picklable through
    functools.partial, so a core process of its own can build it."""
    from ailab.device import pick_device
    from ailab.generation import Decoder
    from ailab.generation.train import load_lm
    from ailab.models import tiny_gpt

    hf = load_lm(weights, sha256, size) if weights else tiny_gpt(size)
    device = pick_device()
    if quantization is not None:
        from ailab.quantize.weight_only import quantize_decoder

        hf = quantize_decoder(hf, quantization, kernel="aten" if device.type == "cpu" else "plain")
    return Decoder(hf.to(device))
