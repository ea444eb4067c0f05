"""The course's load generator against an independent one (`hey`, Go, Debian's package) on the same endpoint.

The endpoint is the real ailab server, with a model whose capacity is set by time, not by the CPU (each
batch of one takes 10 ms): both generators must then see the same ~100 req/s at equal concurrency, also
on a loaded 2-core machine. How much CPU each generator needs to drive a CPU-bound model is a benchmark
question (`ailab bench serving`, `ailab bench peers`), not a unit test's.
"""

import shutil
import time

import numpy as np
import pytest

from ailab import bench
from ailab.server import create_app, start_in_thread
from test_server_helpers import PlainPredictor

BODY = {"inputs": "a fine film, warm and funny"}


class TenMsModel(PlainPredictor):
    """texts -> one result each, 10 ms per batch: a server capacity of 100 req/s at max batch 1."""

    name = "ten-ms"

    def __call__(self, texts):
        time.sleep(0.010)
        return [{"label": "positive", "score": 1.0, "probs": [0.0, 1.0], "truncated": False} for _ in texts]


def hey_rps(url: str, clients: int, seconds: float) -> float:
    """hey's req/s through the peers suite's own runner; every answer must be a 200."""
    from ailab.suites.peers import run_hey

    r = run_hey(url, BODY, clients, seconds)
    assert r["n"] > 0 and r["errors"] == 0, r
    return r["rps"]


@pytest.mark.skipif(
    shutil.which("hey") is None, reason="hey is installed by `make services` (Debian: apt-get install hey)"
)
def test_throughput_agrees_with_hey_within_15_percent():
    app = create_app({"ten-ms": TenMsModel}, "ten-ms", max_batch_size=1, max_wait_ms=0)
    server = start_in_thread(app)
    url = server.url + "/v1/predict"
    ratios, ours, theirs = [], [], []
    try:
        for _ in range(2):  # interleaved: a burst of load elsewhere hits both generators alike
            theirs.append(hey_rps(url, 8, 2.0))
            ours.append(bench.in_subprocess("closed_loop", url, [BODY], clients=8, duration_s=2.0, warmup_s=0.3).rps)
            ratios.append(ours[-1] / theirs[-1])
    finally:
        server.stop()
    ratio = float(np.median(ratios))
    assert 0.85 <= ratio <= 1.15, f"ailab.bench {ours} req/s vs hey {theirs} req/s: ratio {ratio:.2f}"
    assert 50 < np.median(theirs) <= 105, theirs  # the endpoint does serve its ~100 req/s
