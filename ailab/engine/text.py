"""A text classifier with per-stage timing (tokenize / forward / post-process), the slow vs fast
tokenizer comparison, and the course's sentiment model exported for ONNX Runtime (topics E1, E5). Every way to
run that model (PyTorch, ONNX Runtime, INT8, fused) is built in one place: ailab.variants.build_variant.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ailab.models.labels import TextLabel, text_labels, truncation_flags
from ailab.timing import LatencyStats, latency_stats

from ailab.engine.export import export_onnx
from ailab.engine.runners import InputSpec, Runner


class ClassifierWithEmbedding(nn.Module):
    """SentimentClassifier that also returns its sentence embedding, so fidelity can compare embeddings."""

    def __init__(self, classifier: nn.Module):
        super().__init__()
        self.encoder, self.head = classifier.encoder, classifier.head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        emb = self.encoder(input_ids, attention_mask)  # (B, H)
        return self.head(emb), emb  # (B, C), (B, H)


def text_input_spec() -> list[InputSpec]:
    return [
        InputSpec("input_ids", np.dtype("int64"), ("batch", "seq")),
        InputSpec("attention_mask", np.dtype("int64"), ("batch", "seq")),
    ]


@dataclass
class StageTimings:
    """Milliseconds per stage for one batch; per_request_ms divides the total by the batch size."""

    batch_size: int
    tokenize_ms: float
    forward_ms: float
    postprocess_ms: float

    @property
    def total_ms(self) -> float:
        return self.tokenize_ms + self.forward_ms + self.postprocess_ms

    @property
    def per_request_ms(self) -> float:
        return self.total_ms / max(self.batch_size, 1)

    def as_dict(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "tokenize_ms": self.tokenize_ms,
            "forward_ms": self.forward_ms,
            "postprocess_ms": self.postprocess_ms,
            "total_ms": self.total_ms,
            "per_request_ms": self.per_request_ms,
        }


@dataclass
class TextPrediction:
    probs: np.ndarray  # (K, C) softmax probabilities of the K texts that were run
    label_ids: np.ndarray  # (K,) argmax
    labels: list[str]
    timings: StageTimings
    truncated: list[bool] = field(default_factory=list)  # (N,) one per text given: cut to max_length?
    kept: list[int] = field(default_factory=list)  # (K,) which of the N texts the rows are (all, unless
    # drop_truncated removed some)
    classes: list[str] = field(default_factory=list)

    def results(self) -> list[TextLabel]:
        """One TextLabel per row that was run (the K kept texts, in order)."""
        return text_labels(self.probs, self.classes, [self.truncated[i] for i in self.kept])


def int64_inputs(enc) -> dict[str, np.ndarray]:
    """A tokenizer's numpy output as the int64 `input_ids`/`attention_mask` every runner expects: (B, T) each.
    (Tokenizers give int32 or int64 depending on the backend; the exported graphs take int64.)"""
    return {
        "input_ids": np.asarray(enc["input_ids"]).astype(np.int64),
        "attention_mask": np.asarray(enc["attention_mask"]).astype(np.int64),
    }


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)  # subtract the max: exp() cannot overflow
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class TextClassifierRunner:
    """texts -> tokens -> logits -> probabilities, timing each stage. Wraps any Runner whose inputs are
    input_ids/attention_mask and whose first output is (B, C) logits."""

    def __init__(self, runner: Runner, tokenizer, max_length: int = 64, classes: Sequence[str] | None = None):
        if not isinstance(runner, Runner):
            raise TypeError(f"runner must be an ailab.engine Runner, got {type(runner).__name__}")
        if not 2 <= max_length <= 512:
            raise ValueError(f"max_length must be between 2 and 512 word pieces, got {max_length}")
        self.runner, self.tokenizer, self.max_length = runner, tokenizer, max_length
        self.classes = list(classes) if classes is not None else ["negative", "positive"]
        self.name, self.device, self.precision = runner.name, runner.device, runner.precision

    def tokenize(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return self.encode(texts)[0]

    def encode(self, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], list[bool]]:
        """Token arrays padded to the longest text of THIS batch, (B, T) int64 each, and per text whether
        it was cut to max_length (the fast tokenizer keeps what it cut off)."""
        if isinstance(texts, str):
            raise TypeError("predict() takes a list of texts; wrap a single text as [text]")
        if not texts:
            raise ValueError("predict() got no texts; send at least one")
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise TypeError(f"texts must all be str; item {bad[0]} is {type(texts[bad[0]]).__name__}")
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="np"
        )
        return int64_inputs(enc), truncation_flags(self.tokenizer, enc, texts, self.max_length)

    def predict(self, texts: Sequence[str], drop_truncated: bool = False) -> TextPrediction:
        """Tokenize, forward, softmax, each stage timed. drop_truncated: texts over max_length are not run
        (a server that refuses them, instead of answering for their first max_length word pieces)."""
        t0 = time.perf_counter()
        batch, truncated = self.encode(texts)
        kept = [i for i, cut in enumerate(truncated) if not (drop_truncated and cut)]
        if len(kept) < len(truncated):
            batch = {k: v[kept] for k, v in batch.items()}  # (K, T) each
        t1 = time.perf_counter()
        logits = self.runner.run(batch) if kept else np.zeros((0, len(self.classes)), np.float32)  # (K, C)
        t2 = time.perf_counter()  # the runner synced the device
        probs = softmax(logits.astype(np.float32))  # (K, C)
        ids = probs.argmax(-1)
        labels = [self.classes[i] for i in ids]
        t3 = time.perf_counter()
        timings = StageTimings(len(texts), (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)
        return TextPrediction(probs, ids, labels, timings, truncated, kept, self.classes)

    __call__ = predict

    def predict_texts(self, texts: Sequence[str]) -> tuple[np.ndarray, StageTimings]:
        pred = self.predict(texts)
        return pred.probs, pred.timings


def stage_breakdown(
    clf: TextClassifierRunner, texts: Sequence[str], batch_size: int, iters: int = 10, warmup: int = 2
) -> dict[str, LatencyStats]:
    """Latency statistics per stage over `iters` batches of `batch_size` texts (cycled from `texts`)."""
    if batch_size < 1 or not texts:
        raise ValueError("stage_breakdown needs batch_size >= 1 and at least one text")
    rows: dict[str, list[float]] = {"tokenize": [], "forward": [], "postprocess": [], "total": []}
    for i in range(warmup + iters):
        chunk = [texts[(i * batch_size + j) % len(texts)] for j in range(batch_size)]
        t = clf.predict(chunk).timings
        if i >= warmup:
            for k, v in zip(rows, (t.tokenize_ms, t.forward_ms, t.postprocess_ms, t.total_ms)):
                rows[k].append(v)
    return {k: latency_stats(v) for k, v in rows.items()}


# ----------------------------------------------------------------------------- tokenizers: slow (Python) vs fast (Rust)


def slow_tokenizer():
    """transformers' pure-Python WordPiece (BertTokenizerLegacy) over MiniLM's hash-checked vocab.txt."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    from ailab.models import TRUSTED_SHA256, minilm_dir, verify_file

    vocab = minilm_dir() / "vocab.txt"
    verify_file(vocab, TRUSTED_SHA256["minilm"]["vocab.txt"])
    return BertTokenizerLegacy(vocab_file=str(vocab), do_lower_case=True, model_max_length=512)


@dataclass
class TokenizerComparison:
    n_texts: int
    fast_ms: float  # median over repeats, whole list
    slow_ms: float
    same_ids: bool  # the two produce identical input_ids and attention masks

    @property
    def speedup(self) -> float:
        return self.slow_ms / self.fast_ms


def compare_tokenizers(fast, slow, texts: Sequence[str], max_length: int = 64, repeats: int = 3) -> TokenizerComparison:
    """Time both tokenizers on the same texts (median of `repeats`) and check they agree id for id."""
    if not texts:
        raise ValueError("compare_tokenizers needs at least one text")
    texts = list(texts)

    def timed(tok):
        times, out = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="np")
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times)), out

    fast_ms, a = timed(fast)
    slow_ms, b = timed(slow)
    same = all(a[k].shape == b[k].shape and bool((a[k] == b[k]).all()) for k in ("input_ids", "attention_mask"))
    return TokenizerComparison(len(texts), fast_ms, slow_ms, same)


# ----------------------------------------------------------------------------- the course's sentiment model, ready to serve


def weights_key(model: nn.Module) -> str:
    """16 hex digits of a hash of the weights rounded to 3 decimals: a cache key for files built from them."""
    import hashlib

    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(np.round(v.detach().float().cpu().numpy(), 3).tobytes())
    return h.hexdigest()[:16]


def sentiment_onnx(classifier=None, max_length: int = 64) -> Path:
    """The sentiment classifier (logits + embedding) exported once and cached under cache_dir()/onnx.

    The file name carries a hash of the weights rounded to 3 decimals: the head's L-BFGS training is not
    bit-identical across thread counts, and a 1e-7 difference should not cost a new export, while a
    retrained head does get one. Returns the path of the .onnx file.
    """
    from ailab.models import cache_dir, sentiment_classifier

    classifier = classifier if classifier is not None else sentiment_classifier(max_length=max_length).model
    path = cache_dir() / "onnx" / f"sentiment-{weights_key(classifier)}.onnx"
    if not path.exists():
        sample = {
            "input_ids": torch.randint(1000, 5000, (2, 16)),
            "attention_mask": torch.ones(2, 16, dtype=torch.long),
        }
        tmp = path.with_name(path.stem + f".tmp{os.getpid()}.onnx")
        export_onnx(ClassifierWithEmbedding(classifier), sample, tmp, output_names=("logits", "sentence_embedding"))
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return path


STAGES = ("tokenize", "forward", "postprocess")


def stage_view(rows: Sequence[dict], model: str, batch_size: int) -> dict:
    """What the stage widget draws, replaying measured `rows` ({model, batch_size, tokenize, forward,
    postprocess} in ms, from stage_breakdown's medians): each stage's share of the request time at every
    batch size measured for `model`, titled with the chosen batch's milliseconds. Returns viz.bar_chart kwargs
    (stack the bars)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    if model not in models:
        raise ValueError(f"model {model!r} was not measured; choose one of {models}")
    line = sorted((r for r in rows if r["model"] == model), key=lambda r: r["batch_size"])
    sizes = [r["batch_size"] for r in line]
    if batch_size not in sizes:
        raise ValueError(f"batch_size={batch_size!r} was not measured for {model}; choose one of {sizes}")
    c = next(r for r in line if r["batch_size"] == batch_size)
    total = sum(c[s] for s in STAGES)
    return {
        "categories": [f"batch {b}" for b in sizes],
        "series": {s: [100 * r[s] / sum(r[t] for t in STAGES) for r in line] for s in STAGES},
        "title": f"{model}, batch {batch_size}: "
        + ", ".join(f"{s} {c[s]:.2f} ms ({c[s] / total:.0%})" for s in STAGES)
        + f"; {total / batch_size:.2f} ms per text",
        "y_title": "% of request time",
    }
