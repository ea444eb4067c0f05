"""ailab.workers over a real redis-server (ailab.services); the model is a small deterministic function."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ailab import services
from ailab.workers import BatchWorker, QueueClient, ResultCache


@pytest.fixture(scope="module")
def redis_server():
    with services.start_redis() as server:
        yield server


@pytest.fixture
def r(redis_server):
    client = redis_server.client()
    client.flushall()
    return client


class CountingModel:
    """label = len(text) % 2; counts calls and texts; raises on "boom"; optional per-call delay."""

    def __init__(self, delay_s: float = 0.0):
        self.calls, self.texts, self.delay_s = 0, 0, delay_s
        self.lock = threading.Lock()

    def __call__(self, texts):
        with self.lock:
            self.calls += 1
            self.texts += len(texts)
        if "boom" in texts:
            raise ValueError("the model cannot read 'boom'")
        time.sleep(self.delay_s)
        return [{"label": len(t) % 2} for t in texts]


def test_results_come_back_to_the_right_caller(r):
    model = CountingModel()
    worker = BatchWorker(r, model, max_batch=8, max_wait_ms=5).start()
    try:
        client = QueueClient(r)
        texts = [f"text {'x' * i}" for i in range(40)]
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(client.predict, texts))
        assert [g["label"] for g in got] == [len(t) % 2 for t in texts]
        assert not any(g["cached"] for g in got)
    finally:
        worker.stop()
    assert r.llen("ailab:jobs") == 0


def test_worker_batches_what_is_waiting(r):
    model = CountingModel()
    client = QueueClient(r)
    ids = [client.submit(f"job {i}") for i in range(50)]  # queued while no worker runs: nothing is lost
    assert client.depth() == 50
    worker = BatchWorker(r, model, max_batch=16, max_wait_ms=5)
    while client.depth():
        worker.run_batch(worker.collect())
    assert worker.batch_sizes == [16, 16, 16, 2]  # one forward per batch, not one per job
    assert model.calls == 4
    results = [client.result(i, timeout_s=1) for i in ids]
    assert [x["label"] for x in results] == [len(f"job {i}") % 2 for i in range(50)]
    assert results[0]["batch_size"] == 16


def test_one_bad_input_fails_alone(r):
    model = CountingModel()
    client, worker = QueueClient(r), BatchWorker(r, model, max_batch=8, max_wait_ms=5)
    ids = [client.submit(t) for t in ["fine", "boom", "also fine"]]
    worker.run_batch(worker.collect())
    out = [client.result(i, timeout_s=1) for i in ids]
    assert "error" in out[1] and "boom" in out[1]["error"]
    assert out[0]["label"] == 0 and out[2]["label"] == 1


def test_a_poisoned_batch_is_bisected_not_retried_text_by_text(r):
    """The worker isolates like the batcher (ailab.batching.isolation.run_isolated): one bad text in 16 costs
    1 + 2*log2(16) = 9 passes, where retrying each text alone would cost 17."""
    model = CountingModel()
    client, worker = QueueClient(r), BatchWorker(r, model, max_batch=16, max_wait_ms=5)
    texts = [f"review {i}" for i in range(15)] + ["boom"]
    ids = [client.submit(t) for t in texts]
    worker.run_batch(worker.collect())
    out = [client.result(i, timeout_s=1) for i in ids]
    assert "boom" in out[-1]["error"] and all(o["label"] == len(t) % 2 for o, t in zip(out[:-1], texts))
    assert model.calls <= 9, model.calls


def test_a_text_the_model_answers_with_an_exception_fails_alone(r):
    def model(texts):
        return [ValueError("too long for this model") if t == "long" else {"label": 0} for t in texts]

    client, worker = QueueClient(r), BatchWorker(r, model, max_batch=8, max_wait_ms=5)
    ids = [client.submit(t) for t in ["a", "long", "b"]]
    worker.run_batch(worker.collect())
    out = [client.result(i, timeout_s=1) for i in ids]
    assert out[1]["error"] == "ValueError: too long for this model" and out[0]["label"] == out[2]["label"] == 0


def test_cache_skips_the_queue_and_the_model(r):
    model = CountingModel(delay_s=0.02)
    cache = ResultCache(r, model_id="counting-v1", ttl_s=60)
    worker = BatchWorker(r, model, max_batch=8, max_wait_ms=2, cache=cache).start()
    try:
        client = QueueClient(r, cache=cache)
        first = client.predict("a repeated review")
        n_before = model.texts
        second = client.predict("a repeated review")
        assert first["cached"] is False and second["cached"] is True and second["label"] == first["label"]
        assert model.texts == n_before  # the repeat never reached the model
        assert QueueClient(r, cache=ResultCache(r, "counting-v2")).predict("a repeated review")["cached"] is False
    finally:
        worker.stop()
    assert not any(b"a repeated review" in k for k in r.keys("ailab:cache:*"))  # keys hash the text


def test_failures_are_not_cached(r):
    cache = ResultCache(r, "m")
    cache.put_many(["ok", "bad"], [{"label": 1}, {"error": "ValueError: x"}])
    assert cache.get("ok") == {"label": 1} and cache.get("bad") is None


def test_no_worker_gives_a_clear_timeout(r):
    client = QueueClient(r)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="is a worker running"):
        client.predict("nobody home", timeout_s=0.5)
    assert time.perf_counter() - t0 < 2


def test_a_long_wait_outlasts_the_socket_timeout(redis_server):
    client = QueueClient(redis_server.client(socket_timeout=0.3))  # BLPOP is sliced, never one long read
    with pytest.raises(TimeoutError, match="is a worker running"):
        client.result("nobody-home", timeout_s=1.0)


@pytest.mark.parametrize("text, err", [(None, TypeError), (42, TypeError), ("   ", ValueError)])
def test_bad_input_is_refused_before_queueing(r, text, err):
    client = QueueClient(r)
    with pytest.raises(err):
        client.submit(text)
    assert client.depth() == 0


def test_bad_worker_settings(r):
    with pytest.raises(ValueError, match="max_batch"):
        BatchWorker(r, CountingModel(), max_batch=0)
    with pytest.raises(ValueError, match="ttl_s"):
        ResultCache(r, "m", ttl_s=0)
