"""What every peer of `ailab bench peers` serves, and with which batch settings (from the environment the suite
sets: AILAB_PEER_MODEL, AILAB_PEER_BATCH, AILAB_PEER_WAIT_MS, AILAB_PEER_TRACE). Its own module: the peers'
spawned worker processes import it, and the launcher (_peer_servers.py) imports them."""

from __future__ import annotations

import os
import time

from ailab.server.predictor import Delegating


def load():
    """The predictor every peer serves, warmed at its batch sizes; traced when AILAB_PEER_TRACE names a file."""
    from ailab.server.predictors import sentiment_predictor, tiny_predictor

    predictor = tiny_predictor() if os.environ.get("AILAB_PEER_MODEL") == "tiny" else sentiment_predictor("torch_eager")
    predictor.warmup(batch_size())
    trace = os.environ.get("AILAB_PEER_TRACE")
    return TracedPredictor(predictor, trace) if trace else predictor


class TracedPredictor(Delegating):
    """The predictor, appending one line per batch to a file: its start and end (time.monotonic, one clock for
    every process on the machine) and its size. Read with read_trace: whatever the server around it, the
    suite sees how busy the model was and how long it sat idle between batches.

    Everything but the call is the predictor's own (ailab's server sets its stage observer on it, and it
    reaches the predictor), so each server does the same work it does untraced, plus one short write a batch."""

    def __init__(self, predictor, path: str):
        super().__init__(predictor)
        self._file = open(path, "a", buffering=1)  # a line is written whole, at once

    def __call__(self, texts):
        start = time.monotonic()
        out = self.inner(texts)
        self._file.write(f"{start:.6f} {time.monotonic():.6f} {len(texts)}\n")
        return out


NO_TRACE = {"model_busy": None, "batch_mean": None, "gap_ms_p50": None}  # too few batches, or not traced


def read_trace(path, since: float, until: float) -> dict:
    """The batches that started in [since, until] (time.monotonic): the model's busy share from the first
    batch's start to the last one's end, the mean batch, and the median idle gap between one batch's end and
    the next one's start. None for each where fewer than two batches ran."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and since <= float(parts[0]) <= until:
                rows.append((float(parts[0]), float(parts[1]), int(parts[2])))
    if len(rows) < 2:
        return dict(NO_TRACE)
    rows.sort()
    span = rows[-1][1] - rows[0][0]
    gaps = sorted(b[0] - a[1] for a, b in zip(rows, rows[1:]))
    return {
        "model_busy": sum(end - start for start, end, _ in rows) / span,
        "batch_mean": sum(n for _, _, n in rows) / len(rows),
        "gap_ms_p50": 1000 * gaps[len(gaps) // 2],
    }


def batch_size() -> int:
    return int(os.environ.get("AILAB_PEER_BATCH", "32"))


def wait_ms() -> float:
    return float(os.environ.get("AILAB_PEER_WAIT_MS", "10"))
