"""The serving notebooks' helpers: the widget callback, metric parsing, padding and batch sweeps, the naive server."""

import pytest

from ailab.server.metrics import ServerMetrics
from ailab.suites import naive_server, serving, serving_view
from test_server_helpers import tiny

ROWS = [
    {
        "max_wait_ms": w,
        "max_batch_size": b,
        "rps": 10.0 * b + w,
        "p50_ms": 5.0 + b + w,
        "p99_ms": 9.0 + 2 * b + w,
        "mean_batch_size": b / 2,
    }
    for w in (0, 5)
    for b in (1, 8, 32)
]


def test_grid_figure_replays_the_chosen_cell():
    fig = serving_view.grid_figure(ROWS, 5, 8)
    p50 = next(t for t in fig.data if t.name == "p50 ms")
    assert list(p50.x) == [1, 8, 32] and list(p50.y) == [11.0, 18.0, 42.0]
    assert "85 req/s" in fig.layout.title.text and "max_batch=8" in fig.layout.title.text
    rps = next(t for t in fig.data if t.name == "requests/s")
    assert list(rps.y) == [15.0, 85.0, 325.0]


def test_grid_figure_refuses_unmeasured_values():
    with pytest.raises(ValueError, match="max_wait_ms=7"):
        serving_view.grid_figure(ROWS, 7, 8)
    with pytest.raises(ValueError, match="max_batch_size=4"):
        serving_view.grid_figure(ROWS, 0, 4)


def test_read_metrics_and_histogram():
    m = ServerMetrics()
    for size in (1, 3, 3, 32):
        m.on_batch(size, [1.0] * size, 0.01)
    parsed = serving.read_metrics(m.exposition().decode())
    assert parsed["ailab_batch_size_count"] == 4 and parsed["ailab_batch_size_sum"] == 39
    bounds, counts = serving.histogram_from_metrics(parsed, "ailab_batch_size")
    assert sum(counts) == 4 and counts[bounds.index(1.0)] == 1 and counts[bounds.index(4.0)] == 2
    assert counts[bounds.index(32.0)] == 1


def test_padding_counter_and_bucketing_cut_waste():
    texts = ["short one"] * 16 + ["a much longer text " * 8] * 16
    texts = [t for pair in zip(texts[:16], texts[16:]) for t in pair]
    plain = serving.bucketing_run(tiny(0), texts, None, max_batch_size=8, max_wait_ms=5)
    bucketed = serving.bucketing_run(tiny(0), texts, 16, max_batch_size=8, max_wait_ms=5)
    assert plain["real_tokens"] == bucketed["real_tokens"]
    assert bucketed["padding_waste"] < 0.1 < plain["padding_waste"]
    counter = serving.PaddingCounter(tiny(0))
    counter(["a b c", "a"])
    assert counter.slots == 2 * 5 and counter.real == 5 + 3  # [CLS] a b c [SEP] / [CLS] a [SEP] + 2 pads


def test_batch_sweep_and_batcher_run_on_tiny_model():
    rows = serving.batch_sweep(tiny(0), ["some text to classify"] * 8, sizes=(1, 4), seconds=0.3, rounds=2)
    assert [r["batch_size"] for r in rows] == [1, 4] and all(r["items_per_s"] > 0 for r in rows)
    r = serving.batcher_run(tiny(0), ["a text"] * 10, 8, 2, concurrency=8, seconds=0.5, warmup_s=0.1, threads=1)
    assert r["rps"] > 0 and 1 <= r["mean_batch_size"] <= 8 and not r["errors"]


def test_bench_texts_are_8_to_40_words():
    texts = serving.bench_texts(100)
    assert len(texts) == 100 and all(8 <= len(t.split()) <= 40 for t in texts)


def test_naive_server_answers_per_request_and_leaves_the_predictor_as_it_was():
    from fastapi.testclient import TestClient

    predictor = tiny(0)
    tokenize = predictor.tokenize
    with TestClient(naive_server.naive_app(predictor)) as client:
        assert client.get("/readyz").json() == {"ready": True}
        one = client.post("/v1/predict", json={"inputs": "a fine film"})
        two = client.post("/v1/predict", json={"inputs": ["a fine film", "dull"]})
    assert one.status_code == 200 and len(one.json()["outputs"]) == 1
    assert two.status_code == 200 and len(two.json()["outputs"]) == 2
    assert two.json()["outputs"][0] == one.json()["outputs"][0]
    assert predictor.tokenize == tokenize  # the lock went on a copy, not on the predictor the batched servers share
