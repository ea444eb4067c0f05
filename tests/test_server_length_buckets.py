"""length_bucket_tokens: the server batches together only texts of like length, so a short text is never
padded to a long one. Proven on the batches the model actually receives."""

import asyncio

import httpx
import pytest

from ailab.server import ServerConfig, create_app, start_in_thread
from ailab.server.run import build_parser
from test_server_helpers import SlowPredictor, tiny

SHORT = ["good", "a fine film", "dull", "so bad"]
LONG = ["a long, winding review that goes on about the plot, the cast, the score and the ending " * 2] * 4


class CountingPredictor(SlowPredictor):
    """A SlowPredictor that notes the word pieces of each batch's texts."""

    def __init__(self, inner, batch_s: float):
        super().__init__(inner, batch_s)
        self.batches = []

    def __call__(self, texts):
        self.batches.append([self.inner.count_tokens(t) for t in texts])
        return super().__call__(texts)


def _send_all_at_once(url: str, texts: list[str]) -> list[int]:
    async def main():
        async with httpx.AsyncClient(timeout=30) as client:
            rs = await asyncio.gather(*(client.post(url + "/v1/predict", json={"inputs": t}) for t in texts))
        return [r.status_code for r in rs]

    return asyncio.run(main())


@pytest.mark.parametrize("width, mixes", [(16, False), (None, True)])
def test_batches_hold_one_length_band_only_when_bucketing_is_on(width, mixes):
    predictor = CountingPredictor(tiny(0), batch_s=0.2)  # a slow model: everything sent queues behind batch 1
    app = create_app(
        {"tiny": lambda: predictor},
        "tiny",
        max_batch_size=32,
        max_wait_ms=50,
        length_bucket_tokens=width,
        torch_threads=1,
    )
    with start_in_thread(app) as handle:
        predictor.batches.clear()  # forget warm-up and self-test batches
        assert _send_all_at_once(handle.url, SHORT + LONG + SHORT + LONG) == [200] * 16
    bands = [{(n - 1) // 16 for n in batch} for batch in predictor.batches]
    assert sum(len(b) for b in predictor.batches) == 16
    assert any(len(b) > 1 for b in bands) == mixes, predictor.batches
    assert max(len(b) for b in predictor.batches) > 1, "like lengths must still share a batch"


def test_the_setting_is_checked_and_reaches_the_cli():
    for bad in (0, -3, 2.5, 513):
        with pytest.raises(ValueError, match="length_bucket_tokens"):
            ServerConfig(length_bucket_tokens=bad)
    assert build_parser().parse_args(["--length-bucket-tokens", "16"]).length_bucket_tokens == 16
    assert build_parser().parse_args([]).length_bucket_tokens is None


def test_a_model_that_is_not_a_predictor_says_what_it_lacks_instead_of_serving():
    """A bare function of texts cannot count word pieces (length buckets need it), name its weights or be warmed
    up: the load fails, and /readyz says what it lacks."""

    def bare(texts):
        return [{"label": "ok"} for _ in texts]

    app = create_app({"tiny": lambda: bare}, "tiny", length_bucket_tokens=16)
    with start_in_thread(app, wait_ready=False) as handle:
        with httpx.Client(timeout=30) as client:
            for _ in range(200):
                r = client.get(handle.url + "/readyz")
                if "count_tokens" in r.text:
                    break
                asyncio.run(asyncio.sleep(0.05))
    reason = r.json()["reason"]
    assert r.status_code == 503 and "is not a Predictor" in reason and "count_tokens" in reason, r.text
