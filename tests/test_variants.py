"""ailab.variants: every engine variant is the same model (PyTorch is the oracle), the fused graph really is
fused, the choice takes the fastest that passes the gate, and the server says what `--engine auto` picked."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from ailab import models, variants as V
from ailab.engine import ClassifierWithEmbedding, fusion


@pytest.fixture(scope="module")
def trained():
    return models.sentiment_classifier()


@pytest.fixture(scope="module")
def built(trained):
    return V.build_variants(trained, [n for n in V.VARIANTS if n != "torch_compile"])


def _padded_batch(tok, texts, width):
    enc = tok(texts, padding="max_length", truncation=True, max_length=width, return_tensors="np")
    return {k: np.asarray(enc[k], np.int64) for k in ("input_ids", "attention_mask")}


def test_the_fused_graph_is_fused(trained, built):
    before = fusion.export_for_fusion(trained.model)
    summary = fusion.fusion_summary(before, built["ort_fused"].path)
    layers = trained.model.encoder.config.num_hidden_layers
    # one fused attention and bias+GELU per layer, two residual+layer norms per layer, one embedding layer norm
    assert summary["fused"] == {
        "EmbedLayerNormalization": 1,
        "Attention": layers,
        "SkipLayerNormalization": 2 * layers,
        "BiasGelu": layers,
    }
    assert summary["nodes_after"] < summary["nodes_before"] / 3
    assert summary["matmul_after"] < summary["matmul_before"]  # Q, K and V became one weight inside Attention
    q = fusion.fusion_summary(built["ort_fused"].path, built["ort_fused_int8"].path)
    assert q["fused"].get("QAttention") == layers and "Attention" not in q["fused"]


def test_fp32_variants_equal_pytorch_on_padded_batches_of_other_widths(trained, built):
    """Fusion rewrites attention and its mask handling: the padded rows are where a wrong rewrite shows."""
    tok = trained.encoder.tokenizer
    batch = _padded_batch(tok, ["fine", "a long and winding review of a film that goes nowhere at all"] * 3, 37)
    oracle = ClassifierWithEmbedding(trained.model).eval()
    with torch.no_grad():
        want = [t.numpy() for t in oracle(*(torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask")))]
    for name in ("torch_eager", "ort_plain", "ort_fused"):
        got = built[name].runner.run_all(batch)
        for w, g in zip(want, got):
            assert np.abs(w - g).max() < 1e-4, name


def test_int8_variants_stay_close_and_are_smaller(trained, built):
    tok = trained.encoder.tokenizer
    batch = _padded_batch(tok, list(trained.split.X_test[:16]), 64)
    ref = built["ort_plain"].runner.run_all(batch)[1]  # (16, 384) embeddings
    # measured mean cosines: dynamic ~0.99, static (fixed ranges) ~0.93; a broken quantization lands far below
    for name, least in (("ort_int8_dynamic", 0.97), ("ort_fused_int8", 0.97), ("ort_int8_static", 0.85)):
        runner = built[name].runner
        assert runner.precision == "int8", name
        assert runner.size_bytes * 3.5 < built["ort_plain"].runner.size_bytes, name
        emb = runner.run_all(batch)[1]
        cos = (emb * ref).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.mean() > least, (name, cos.mean())


def test_compare_variants_rows_and_the_gate(trained, built):
    pick = {n: built[n] for n in ("torch_eager", "ort_plain", "ort_int8_dynamic")}
    rows = V.compare_variants(pick, trained, batch_sizes=(1, 4), iters=2, warmup=1, max_seconds=2, eval_rows=120)
    assert [r["variant"] for r in rows] == list(pick)
    base = rows[0]
    assert base["drop_points"] == 0 and base["agreement"] == 1 and base["speedup_b4"] == 1 and base["gate_passed"]
    for r in rows:
        assert r["ms_b1"] > 0 and r["ms_b4"] > 0 and r["p99_ms_b4"] >= r["ms_b4"] and r["eval_rows"] == 120
        assert r["drop_points"] == pytest.approx(100 * (base["accuracy"] - r["accuracy"]), abs=0.02)  # both rounded
        assert r["speedup_b4"] == pytest.approx(base["ms_b4"] / r["ms_b4"], rel=1e-2)
    assert rows[1]["agreement"] == 1.0  # ORT FP32 is the same function
    with pytest.raises(ValueError, match="at least one"):
        V.compare_variants({}, trained)


def test_choose_takes_the_fastest_that_passed():
    rows = [
        {"variant": "a", "ms_b32": 100.0, "gate_passed": True},
        {"variant": "b", "ms_b32": 40.0, "gate_passed": False},  # fastest, but it lost accuracy
        {"variant": "c", "ms_b32": 60.0, "gate_passed": True},
    ]
    assert V.choose(rows)["variant"] == "c"
    assert V.choose(rows[:2])["variant"] == "a"
    with pytest.raises(ValueError, match="no variant passed"):
        V.choose([rows[1]])


def test_unknown_variant_is_named(trained):
    with pytest.raises(ValueError, match="tensorrt.*choose from"):
        V.build_variants(trained, ["tensorrt"])


def test_forward_flops_match_the_encoder_formula(trained):
    """2 FLOPs per multiply-add: every Linear on every token, plus Q.K and attention.V per layer."""
    model = trained.model
    cfg = model.encoder.config
    b, t, h, layers = 4, 16, cfg.hidden_size, cfg.num_hidden_layers
    linear = sum(m.weight.numel() for m in model.encoder.modules() if isinstance(m, torch.nn.Linear))
    expected = 2 * b * t * linear + layers * 2 * (2 * b * t * t * h) + 2 * b * model.head.weight.numel()
    assert V.forward_flops(model, b, t) == pytest.approx(expected, rel=0.01)


def test_torch_compile_variant_equals_eager(trained):
    v = V.build_variants(trained, ["torch_compile"])["torch_compile"]
    assert v.build_seconds > 0 and v.path is None
    batch = _padded_batch(trained.encoder.tokenizer, ["a fine film", "dull"], 64)
    oracle = ClassifierWithEmbedding(trained.model).eval()
    with torch.no_grad():
        want = oracle(*(torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask")))[0].numpy()
    assert np.abs(v.runner.run(batch) - want).max() < 1e-4


def test_auto_choice_reports_every_candidate(trained):
    variant, report = V.auto_choice(trained, candidates=("torch_eager", "ort_plain"), iters=2, eval_rows=100)
    assert report["picked"] == variant.name and set(report["candidates"]) == {"torch_eager", "ort_plain"}
    fastest = min(report["candidates"], key=lambda n: report["candidates"][n]["ms_b32"])
    assert variant.name == fastest  # both are FP32: both pass the gate
    assert all(c["gate_passed"] and c["ms_b32"] > 0 for c in report["candidates"].values())


def test_server_reports_the_engine_it_runs():
    """/healthz and /metrics say which engine serves, and with auto what was measured."""
    import httpx

    from ailab.server import create_app, start_in_thread, tiny_predictor

    def load():
        p = tiny_predictor()
        p.engine, p.engine_choice = "ort_fused", {"picked": "ort_fused", "candidates": {"ort_fused": {"ms_b32": 1.0}}}
        return p

    handle = start_in_thread(create_app({"tiny": load}, torch_threads=1))
    try:
        with httpx.Client(timeout=30) as c:
            deadline = time.monotonic() + 60
            while c.get(handle.url + "/readyz").status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.05)
            health = c.get(handle.url + "/healthz").json()
            assert health["engine"] == "ort_fused" and health["engine_choice"]["picked"] == "ort_fused"
            text = c.get(handle.url + "/metrics").text
            assert 'ailab_model_engine_info{asked="auto",engine="ort_fused",model="tiny"} 1.0' in text
    finally:
        handle.stop()


def test_sentiment_predictor_takes_variant_names(trained):
    from ailab.server import sentiment_predictor

    p = sentiment_predictor("ort_fused", trained=trained)
    assert p.engine == "ort_fused" and p.engine_choice is None and p.n_bytes > 0
    assert [r["label"] for r in p(["a wonderful, moving film", "a dull, tedious mess"])] == ["positive", "negative"]
    with pytest.raises(ValueError, match="tensorrt.*choose one of"):
        sentiment_predictor("tensorrt", trained=trained)
