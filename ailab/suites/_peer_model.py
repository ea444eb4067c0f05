"""What every peer of `ailab bench peers` serves, and with which batch settings (from the environment the suite
sets: AILAB_PEER_MODEL, AILAB_PEER_BATCH, AILAB_PEER_WAIT_MS). Its own module: the peers' spawned worker
processes import it, and the launcher (_peer_servers.py) imports them."""
from __future__ import annotations

import os


def load():
    """The predictor every peer serves, warmed at its batch sizes."""
    from ailab.server.predictors import sentiment_predictor, tiny_predictor

    predictor = tiny_predictor() if os.environ.get("AILAB_PEER_MODEL") == "tiny" else sentiment_predictor("torch")
    predictor.warmup(batch_size())
    return predictor


def batch_size() -> int:
    return int(os.environ.get("AILAB_PEER_BATCH", "32"))


def wait_ms() -> float:
    return float(os.environ.get("AILAB_PEER_WAIT_MS", "10"))
