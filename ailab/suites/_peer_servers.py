"""The servers `ailab bench peers` compares, each as its own process: `python -m ailab.suites._peer_servers KIND PORT`.

KIND is ailab, mosec or litserve; each serves the same predictor (AILAB_PEER_MODEL: minilm, the course's MiniLM
sentiment classifier on torch, or tiny, a random 1.5 M-parameter BERT for a quick check) with the same batch
settings (AILAB_PEER_BATCH texts at most per forward pass, AILAB_PEER_WAIT_MS for a batch to fill), on
127.0.0.1 only. Each answers POST {"inputs": "one text"} at its own path (PATHS). Ray Serve, the fourth peer,
is started by the suite itself (suites/scale.RayServe).

Every peer is written the way its documentation shows: mosec's Worker with max_batch_size/max_wait_time
(_peer_mosec.py), LitServe's LitAPI with max_batch_size/batch_timeout (_peer_litserve.py), ailab's create_app as
`ailab serve` builds it (here).
"""

from __future__ import annotations

import sys

from ailab.suites._peer_model import batch_size, load, wait_ms

PATHS = {"ailab": "/v1/predict", "mosec": "/inference", "litserve": "/predict"}


# ----------------------------------------------------------------------------- ailab, as `ailab serve` runs it


def serve_ailab(port: int) -> None:
    from ailab.server import create_app, start_in_thread
    from ailab.server.config import ServerConfig
    from ailab.server.metrics import configure_json_logging

    configure_json_logging(sys.stderr)  # `ailab serve` logs each request (without --quiet): so does this
    config = ServerConfig(max_batch_size=batch_size(), max_wait_ms=wait_ms(), max_queue=1024)
    handle = start_in_thread(
        create_app({"sentiment": load}, "sentiment", config), "127.0.0.1", port, log_level="warning"
    )
    handle.thread.join()


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "mosec":  # their classes live in their own modules: the peers' worker processes are
        from ailab.suites._peer_mosec import serve  # spawned and import them by name
    elif kind == "litserve":
        from ailab.suites._peer_litserve import serve
    else:
        serve = serve_ailab
    serve(port)
