"""LitServe serving the peers' predictor (see _peer_servers.py): uvicorn in front, an inference worker process."""

from __future__ import annotations

import litserve as ls

from ailab.suites._peer_model import batch_size, load, wait_ms


class Predict(ls.LitAPI):
    def setup(self, device):
        self.predictor = load()

    def decode_request(self, request):
        return request["inputs"]

    def batch(self, inputs):  # texts stay a list: the predictor tokenizes them together
        return list(inputs)

    def predict(self, texts):
        return self.predictor(texts)

    def unbatch(self, output):
        return list(output)

    def encode_response(self, output):
        return output


def serve(port: int) -> None:
    api = Predict(max_batch_size=batch_size(), batch_timeout=wait_ms() / 1000)
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(
        host="127.0.0.1", port=port, generate_client_file=False
    )
