"""What `ailab serve --generate` chooses for its engine unless told: the model it builds and where, the core's
threads and its seats. Serving policy, so it lives with the server; the engine core only runs what it is given.
"""

from __future__ import annotations

import os

DEFAULT_SEATS = 8  # sequences decoded together at most (the scheduler's max_running; --generate-seats)


def default_core_threads() -> int:
    """torch's threads for the engine core: every core but one, which the HTTP side and a load generator on the
    same machine need (on 2 cores, 1: measured here, a core with 2 threads beside 16 streaming clients served
    965-1,211 tokens/s, with 1 thread 1,358-1,420)."""
    return max(1, (os.cpu_count() or 2) - 1)


def generation_model(size: str, weights: str | None = None, sha256: str | None = None):
    """The Decoder served: tiny_gpt(size), or weights saved by train.save_lm (hash-checked), where the classifiers
    run (predictors.py picks the same device); the KV block pool follows the model. Picklable through
    functools.partial, so a core process of its own can build it."""
    from ailab.device import pick_device
    from ailab.generation import Decoder
    from ailab.generation.train import load_lm
    from ailab.models import tiny_gpt

    hf = load_lm(weights, sha256, size) if weights else tiny_gpt(size)
    return Decoder(hf.to(pick_device()))
