"""ailab.engine: runners agree with PyTorch, export keeps axes dynamic, bad input gets a clear error."""

import numpy as np
import pytest
import torch
from torch import nn

from ailab import engine, models


class Counter(nn.Module):
    """Python state that torch.export bakes into the graph as a constant: eager and ONNX disagree."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(4, 3), 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x) + self.calls


@pytest.fixture(scope="module")
def mlp_export(tmp_path_factory):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
    res = engine.export_onnx(model, torch.randn(3, 4), tmp_path_factory.mktemp("mlp") / "mlp.onnx")
    return model, res


@pytest.fixture(scope="module")
def tiny():
    return models.tiny_bert(seed=0)


@pytest.fixture(scope="module")
def tiny_export(tiny, tmp_path_factory):
    clf = models.SentimentClassifier(tiny.model, nn.Linear(tiny.model.config.hidden_size, 2))
    sample = tiny.tokenize(["a fine film", "dull, flat and far too long"], 16)
    res = engine.export_onnx(clf, sample, tmp_path_factory.mktemp("tiny") / "tiny.onnx", output_names=("logits",))
    return clf, res


def test_export_is_dynamic_and_matches_torch(mlp_export):
    model, res = mlp_export
    assert res.path.exists() and not res.path.with_name(res.path.name + ".data").exists()  # a single file
    assert res.max_abs_diff < 1e-5 and res.input_names == ["input"]
    assert [s["input"][0] for s in res.parity_shapes] == [3, 4]  # checked at the sample size and a new one
    runner = engine.OnnxRunner(res.path)
    x = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)  # a batch size never seen
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(runner.run({"input": x}), ref, atol=1e-5)
    assert runner.input_spec[0].shape == ("batch", 4)


def test_text_model_has_dynamic_batch_and_sequence(tiny, tiny_export):
    clf, res = tiny_export
    assert res.dynamic_axes["input_ids"] == {0: "batch", 1: "seq"}
    onnx_runner, torch_runner = (
        engine.OnnxRunner(res.path),
        engine.TorchRunner(clf, engine.text_input_spec(), device="cpu"),
    )
    batch = {
        k: v.numpy() for k, v in tiny.tokenize(["one", "two words", "a somewhat longer third sentence"], 32).items()
    }
    np.testing.assert_allclose(onnx_runner.run(batch), torch_runner.run(batch), atol=1e-4)


def test_runner_attributes_report_the_provider_in_use(mlp_export):
    _, res = mlp_export
    r = engine.OnnxRunner(res.path, threads=1)
    assert r.provider == r.session.get_providers()[0] == "CPUExecutionProvider"
    assert (r.device, r.precision) == ("cpu", "fp32")
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        # asked for CUDA, fell back: the runner reports what it actually runs on
        r2 = engine.OnnxRunner(res.path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        assert r2.provider == "CPUExecutionProvider" and r2.device == "cpu"


def test_torch_runner_is_in_eval_mode_and_deterministic(mlp_export):
    model, _ = mlp_export
    model.train()  # dropout on: two calls would differ
    r = engine.TorchRunner(model, device="cpu")
    x = {"input": np.ones((4, 4), np.float32)}
    assert not r.model.training
    np.testing.assert_array_equal(r.run(x), r.run(x))
    assert r.run(x).dtype == np.float32


def test_torch_runner_fp16_and_bf16_stay_close(mlp_export):
    model, _ = mlp_export
    x = {"input": np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)}
    ref = engine.TorchRunner(model, device="cpu").run(x)
    for p in ("bf16", "fp16"):
        out = engine.TorchRunner(model, device="cpu", precision=p).run(x)
        assert out.dtype == np.float32 and 0 < np.abs(out - ref).max() < 0.1, p
        assert next(model.parameters()).dtype == torch.float32  # the caller's model was not cast


def test_runner_wrong_dtype_names_the_signature(mlp_export):
    _, res = mlp_export
    r = engine.OnnxRunner(res.path)
    with pytest.raises(TypeError, match=r"float64.*float32.*input: float32\[batch, 4\]"):
        r.run({"input": np.zeros((2, 4))})  # numpy's default float64


def test_runner_wrong_shape_and_names(mlp_export, tiny_export):
    _, res = mlp_export
    r = engine.OnnxRunner(res.path)
    with pytest.raises(ValueError, match=r"axis 1 is 5 .*fixed size 4"):
        r.run({"input": np.zeros((2, 5), np.float32)})
    with pytest.raises(ValueError, match="3 axes"):
        r.run({"input": np.zeros((2, 4, 1), np.float32)})
    with pytest.raises(ValueError, match="missing"):
        r.run({"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(TypeError, match="dict"):
        r.run(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="empty batch"):
        r.run({"input": np.zeros((0, 4), np.float32)})
    _, tres = tiny_export
    t = engine.OnnxRunner(tres.path)
    with pytest.raises(ValueError, match="must agree"):
        t.run({"input_ids": np.ones((2, 5), np.int64), "attention_mask": np.ones((3, 5), np.int64)})
    tr = engine.TorchRunner(
        nn.Linear(4, 2), [engine.InputSpec("input", np.dtype("float32"), ("batch", 4))], device="cpu"
    )
    with pytest.raises(TypeError, match="int64 but float32"):
        tr.run({"input": torch.zeros(2, 4, dtype=torch.long)})


def test_errors_inside_the_model_are_rephrased(tiny_export, mlp_export):
    _, tres = tiny_export
    t = engine.OnnxRunner(tres.path)
    ids = np.full((2, 5), 10**6, np.int64)  # token ids beyond the vocabulary: fails inside the graph
    with pytest.raises(ValueError, match=r"could not run inputs .*expects input_ids: int64\[batch, seq\]"):
        t.run({"input_ids": ids, "attention_mask": np.ones((2, 5), np.int64)})
    model, _ = mlp_export
    r = engine.TorchRunner(model, device="cpu")  # no input_spec: the model itself rejects the shape
    with pytest.raises(ValueError, match=r"could not run inputs \{'input': 'float32\[2, 5\]'\}"):
        r.run({"input": np.zeros((2, 5), np.float32)})


def test_fixed_batch_export_is_caught_by_the_runner(tmp_path):
    res = engine.export_onnx(nn.Linear(4, 2), torch.randn(3, 4), tmp_path / "fixed.onnx", dynamic_axes={})
    r = engine.OnnxRunner(res.path)
    assert r.input_spec[0].shape == (3, 4)
    with pytest.raises(ValueError, match="fixed size 3"):
        r.run({"input": np.zeros((2, 4), np.float32)})


def test_export_rejects_a_sample_that_does_not_fit(tmp_path):
    with pytest.raises(ValueError, match="does not fit the model.*Linear.forward\\(input\\).*float32\\[3, 5\\]"):
        engine.export_onnx(nn.Linear(4, 2), torch.randn(3, 5), tmp_path / "a.onnx")
    with pytest.raises(ValueError, match="forward takes"):
        engine.export_onnx(nn.Linear(4, 2), {"x": torch.randn(3, 4)}, tmp_path / "b.onnx")
    with pytest.raises(ValueError, match="at least 2"):
        engine.export_onnx(nn.Linear(4, 2), torch.randn(1, 4), tmp_path / "c.onnx")
    with pytest.raises(TypeError, match="nn.Module"):
        engine.export_onnx(lambda x: x, torch.randn(3, 4), tmp_path / "d.onnx")
    with pytest.raises(ValueError, match="output_names"):
        engine.export_onnx(nn.Linear(4, 2), torch.randn(3, 4), tmp_path / "e.onnx", output_names=("a", "b"))


def test_export_parity_failure_is_reported(tmp_path):
    with pytest.raises(engine.ExportParityError, match="differs from PyTorch"):
        engine.export_onnx(Counter(), torch.randn(3, 4), tmp_path / "counter.onnx")


def test_text_classifier_runner_stages(tiny, tiny_export):
    _, res = tiny_export
    clf = engine.TextClassifierRunner(engine.OnnxRunner(res.path), tiny.tokenizer, max_length=32)
    pred = clf.predict(["great", "awful and boring", "fine"])
    assert pred.probs.shape == (3, 2) and np.allclose(pred.probs.sum(1), 1, atol=1e-6)
    assert pred.labels == [clf.classes[i] for i in pred.label_ids]
    t = pred.timings
    assert t.batch_size == 3 and min(t.tokenize_ms, t.forward_ms, t.postprocess_ms) > 0
    assert t.per_request_ms == pytest.approx(t.total_ms / 3)
    probs, timings = clf.predict_texts(["ok"])
    assert probs.shape == (1, 2) and timings.batch_size == 1
    stats = engine.stage_breakdown(clf, ["a", "b c"], batch_size=4, iters=3, warmup=1)
    assert set(stats) == {"tokenize", "forward", "postprocess", "total"} and stats["total"].n == 3
    with pytest.raises(TypeError, match="list of texts"):
        clf.predict("just a string")
    with pytest.raises(ValueError, match="no texts"):
        clf.predict([])
    with pytest.raises(TypeError, match="item 1"):
        clf.predict(["ok", 3])


def test_softmax_is_stable():
    p = engine.softmax(np.array([[1000.0, 0.0], [0.0, 0.0]]))
    np.testing.assert_allclose(p, [[1.0, 0.0], [0.5, 0.5]])


def test_slow_tokenizer_matches_fast_id_for_id(tiny):
    from ailab import data

    texts = data.sentiment().X_test[:300] + ["Café déjà vu — naïve résumé!", "中文 字符 and emoji 🙂", "   ", "a" * 400]
    cmp = engine.compare_tokenizers(tiny.tokenizer, engine.slow_tokenizer(), texts, max_length=64, repeats=1)
    assert cmp.same_ids, "the pure-Python tokenizer must produce exactly the fast tokenizer's ids"
    assert cmp.n_texts == len(texts) and cmp.fast_ms > 0 and cmp.slow_ms > 0


def test_bench_engine_quick_has_every_figure():
    from ailab import variants
    from ailab.suites import engine as suite

    # torch.compile is left out here: it recompiles at each new shape the quick run meets (~50 s of make test), and
    # tests/test_variants.py checks it against eager on its own. Every other variant is built, timed and gated.
    names = [v for v in variants.VARIANTS if v != "torch_compile"]
    out = suite.run(quick=True, argv=["--variants", ",".join(names)])
    assert [r["variant"] for r in out["variants"]] == names
    for name in names:
        for key in (
            "ms_b1",
            "ms_b32",
            "accuracy",
            "drop_points",
            "gate_passed",
            "build_s",
            "speedup_b32",
            "gflops_b32",
            "fraction_of_matmul_peak",
        ):
            assert f"{name}_{key}" in out, (name, key)
    assert out["torch_eager_speedup_b32"] == 1.0 and out["torch_eager_drop_points"] == 0
    assert out["auto_choice"] in variants.AUTO_CANDIDATES and out[f"{out['auto_choice']}_gate_passed"]
    assert out["goal_met"] == (out["auto_speedup_vs_torch_eager_b32"] >= 2.0)
    assert out["fusion"]["fused"]["Attention"] == 6 and out["fusion"]["nodes_after"] < out["fusion"]["nodes_before"]
    assert 40 < out["gflop_per_batch32"] < 50 and out["matmul_peak_gflops"] > 0 and out["onnx_matmul_peak_gflops"] > 0
    for key in (
        "int8_speedup_vs_torch_fp32_b32",
        "int8_speedup_vs_ort_fp32_b32",
        "fp32_accuracy",
        "int8_accuracy",
        "int8_accuracy_drop_points",
        "int8_prediction_agreement",
        "size_ratio_fp32_over_int8",
        "device",
        "threads",
    ):
        assert key in out, key
    assert out["int8_speedup_vs_ort_fp32_b32"] == pytest.approx(
        out["ort_plain_ms_b32"] / out["ort_int8_dynamic_ms_b32"], rel=0.01
    )
    assert out["size_ratio_fp32_over_int8"] > 3.5  # INT8 weights: a measured fact, not a timing
    assert 0.6 < out["fp32_accuracy"] < 0.9 and out["provider"] == "CPUExecutionProvider"
    import json

    json.dumps(out)


def test_bench_engine_variants_flag():
    from ailab.suites import engine as suite

    assert suite.parse_args(["--", "--variants", "ort_plain"]).variants == ["torch_eager", "ort_plain"]
    with pytest.raises(SystemExit):
        suite.parse_args(["--variants", "tensorrt"])


def test_one_factory_builds_the_sentiment_model_on_every_engine():
    """ailab.variants.build_variant is the only way to get the sentiment model on an engine: its runner and its
    texts -> labels classifier answer alike on torch, ONNX Runtime and INT8; the old short names are gone."""
    from ailab import variants as V
    from ailab.server import sentiment_predictor

    trained = models.sentiment_classifier()
    texts = ["A wonderful, moving film with brilliant performances.", "A dull, tedious mess that wastes its cast."]
    for name in ("torch_eager", "ort_plain", "ort_int8_dynamic"):
        v = V.build_variant(trained, name)
        assert v.name == name and v.classifier.runner is v.runner and v.build_seconds > 0
        pred = v.classifier.predict(texts)
        assert pred.labels == ["positive", "negative"] and pred.probs.shape == (2, 2), name
        assert [r["label"] for r in pred.results()] == pred.labels, name
        assert (v.path is None) == name.startswith("torch"), name
    for old in ("torch", "onnx", "int8", "tensorrt"):
        with pytest.raises(ValueError, match="choose from"):
            V.build_variant(trained, old)
        with pytest.raises(ValueError, match="choose one of"):
            sentiment_predictor(old, trained=trained)
    assert not hasattr(engine, "sentiment_runner")


def test_a_slow_tokenizer_classifies_and_reports_truncation_like_a_fast_one(tiny):
    """A Python tokenizer has no .encodings to say what it cut; the flags must still be right."""
    from ailab.models import SentimentClassifier

    torch.manual_seed(0)
    model = SentimentClassifier(tiny.model, torch.nn.Linear(tiny.model.config.hidden_size, 2)).eval()
    runner = engine.TorchRunner(model, name="tiny", device="cpu")
    texts = ["short", "word " * 100, "a few more words here"]
    fast = engine.TextClassifierRunner(runner, tiny.tokenizer, max_length=16)
    slow = engine.TextClassifierRunner(runner, engine.slow_tokenizer(), max_length=16)
    assert fast.encode(texts)[1] == slow.encode(texts)[1] == [False, True, False]
    exactly = " ".join(["word"] * 14)  # 14 word pieces + [CLS] + [SEP] = 16: full, not cut
    assert slow.encode([exactly])[1] == fast.encode([exactly])[1] == [False]
    assert slow.predict(texts).kept == [0, 1, 2] and slow.predict(texts, drop_truncated=True).kept == [0, 2]
