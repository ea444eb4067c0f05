"""What the server serves: a text classifier as one batch function, texts -> per-text results.

The predictor runs on the batcher's worker thread and does the whole per-batch job there:
tokenize (padding to the longest text in THIS batch), forward, softmax. Tokenizing per batch in
the worker keeps the event loop free and pays the tokenizer's per-call overhead once per batch.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable

import numpy as np
import torch
from torch import nn

from ailab.engine.text import StageTimings, TextClassifierRunner
from ailab.models.labels import TextLabel
from ailab.memory.estimate import param_bytes


class InputTooLongError(ValueError):
    """A text has more word pieces than the model takes and the server is set to refuse it (HTTP 413)."""


def state_sha256(model: nn.Module) -> str:
    """SHA-256 over every tensor of a state dict (names and bytes): the identity of the weights in memory."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class TextClassifierPredictor:
    """texts -> [TextLabel | InputTooLongError] (ailab.models.labels), one batch at a time.

    The work is the engine's TextClassifierRunner (tokenize, forward, softmax, each stage timed); this
    adds what serving needs: per-text results and refusals, identity (name, weights SHA-256, bytes),
    warm-up and a self-test. After each batch, on_stages(StageTimings) is called on the worker thread
    when set (the server's metrics set it: tokenize and forward time per batch in /metrics).

    too_long: "truncate" keeps the first max_length word pieces and flags the output;
              "reject" fails that text alone with InputTooLongError.
    """

    def __init__(
        self,
        clf: TextClassifierRunner,
        name: str,
        sha256: str,
        too_long: str = "truncate",
        engine: str = "torch_eager",
        n_bytes: int = 0,
        load_seconds: float = 0.0,
        engine_choice: dict | None = None,
    ):
        if too_long not in ("truncate", "reject"):
            raise ValueError(f"too_long={too_long!r}; choose 'truncate' or 'reject'")
        self.clf, self.tokenizer, self.labels, self.max_length = clf, clf.tokenizer, clf.classes, clf.max_length
        self.name, self.sha256, self.too_long = name, sha256, too_long
        self.engine, self.n_bytes, self.load_seconds = engine, n_bytes, load_seconds
        self.engine_choice = engine_choice  # engine "auto": what was measured at start-up, and what was picked
        self.on_stages: Callable[[StageTimings], None] | None = None

    def tokenize(self, texts: list[str]) -> tuple[dict[str, np.ndarray], list[bool]]:
        """(B, T) int64 token arrays padded to this batch's longest text, and which texts were cut."""
        return self.clf.encode(list(texts))

    def count_tokens(self, text: str) -> int:
        """Word pieces this text costs in a batch (after truncation): what padding is measured in."""
        return len(self.tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"])

    def __call__(self, texts: list[str]) -> list[TextLabel | InputTooLongError]:
        pred = self.clf.predict(list(texts), drop_truncated=self.too_long == "reject")
        if self.on_stages is not None:
            self.on_stages(pred.timings)
        # one error per refused text: a shared instance would pile every text's traceback onto one object
        out: list = [
            InputTooLongError(
                f"text has more than {self.max_length} word pieces, the most {self.name} "
                f"takes; shorten it (this server refuses, not truncates)"
            )
            for _ in texts
        ]
        for i, label in zip(pred.kept, pred.results()):
            out[i] = label
        return out

    def warmup(self, max_batch_size: int = 32) -> float:
        """Run the shapes the server will see once, so the first real request does not pay for them."""
        t0 = time.perf_counter()
        for n in sorted({1, max_batch_size}):
            self(["warm-up text for the model"] * n)
        return time.perf_counter() - t0

    def verify(self) -> None:
        """A cheap self-test before a model takes traffic: shapes, finite probabilities that sum to 1."""
        probe = ["a wonderful, moving film", "dull and far too long", "x"]
        res = self(probe)
        if len(res) != len(probe) or any(not isinstance(r, dict) for r in res):
            raise RuntimeError(f"{self.name}: self-test returned {res!r}")
        for r in res:
            p = np.asarray(r["probs"])
            if p.shape != (len(self.labels),) or not np.all(np.isfinite(p)) or abs(p.sum() - 1) > 1e-3:
                raise RuntimeError(f"{self.name}: self-test probabilities look wrong: {r['probs']}")


def tiny_predictor(seed: int = 0, max_length: int = 64, too_long: str = "truncate") -> TextClassifierPredictor:
    """A ~1.5 M-parameter random BERT + linear head: loads in well under a second, for fast tests."""
    from ailab.models import SentimentClassifier, tiny_bert

    t0 = time.perf_counter()
    enc = tiny_bert(seed=seed)
    torch.manual_seed(seed)
    model = SentimentClassifier(enc.model, nn.Linear(enc.model.config.hidden_size, 2)).eval()
    from ailab.device import pick_device
    from ailab.engine import TorchRunner

    runner = TorchRunner(model, name="torch-tiny-bert", device=pick_device())
    clf = TextClassifierRunner(runner, enc.tokenizer, max_length, ["negative", "positive"])
    return TextClassifierPredictor(
        clf,
        f"tiny-seed{seed}",
        state_sha256(model),
        too_long,
        "torch_eager",
        param_bytes(model),
        time.perf_counter() - t0,
    )


def engine_choices() -> list[str]:
    """What `--engine` takes: every variant of ailab.variants by name, and auto (the fastest of them here that
    passes the accuracy gate, measured at start-up)."""
    from ailab.variants import VARIANTS

    return [*VARIANTS, "auto"]


def sentiment_predictor(
    engine: str = "torch_eager",
    max_length: int = 64,
    too_long: str = "truncate",
    trained=None,
    threads: int | None = None,
) -> TextClassifierPredictor:
    """The course's MiniLM sentiment classifier, ready to serve, on `engine`: a variant of ailab.variants by
    name (built by its one factory, build_variant), or auto (the fastest variant on this machine that passes
    the accuracy gate, measured now). torch_eager runs on the best device here (cuda -> mps -> cpu)."""
    from ailab.device import pick_device
    from ailab.models import sentiment_classifier
    from ailab.variants import auto_choice, build_variant

    if engine not in engine_choices():
        raise ValueError(f"engine={engine!r}; choose one of {engine_choices()}")
    t0 = time.perf_counter()
    trained = trained if trained is not None else sentiment_classifier(max_length=max_length)
    model, choice = trained.model.eval(), None
    if engine == "auto":
        variant, choice = auto_choice(trained, threads=threads)
    else:
        device = pick_device().type if engine == "torch_eager" else "cpu"
        variant = build_variant(trained, engine, threads, device=device, max_length=max_length)
    if variant.path is None:  # a torch variant: its identity is the weights in memory
        sha, n_bytes = state_sha256(model), param_bytes(model)
    else:  # the identity of what is served is the ONNX file the session loaded, not the torch weights
        from ailab.data import sha256_of

        sha, n_bytes = sha256_of(variant.path), variant.runner.size_bytes
    return TextClassifierPredictor(
        variant.classifier, "minilm-sentiment", sha, too_long, variant.name, n_bytes, time.perf_counter() - t0, choice
    )
