"""mosec serving the peers' predictor (see _peer_servers.py): a Rust HTTP front, one Python worker process."""

from __future__ import annotations

import sys

from mosec import Server, Worker

from ailab.suites._peer_model import batch_size, load, wait_ms


class Predict(Worker):
    def __init__(self):
        super().__init__()
        self.predictor = load()

    def forward(self, data: list) -> list:  # with max_batch_size > 1: a list of request bodies
        return self.predictor([d["inputs"] for d in data])


def serve(port: int) -> None:
    sys.argv = [sys.argv[0], "--address", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    server = Server()  # it reads its flags from sys.argv
    server.append_worker(Predict, num=1, max_batch_size=batch_size(), max_wait_time=int(wait_ms()))
    server.run()
