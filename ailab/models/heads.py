"""Classifiers trained here: a linear head on MiniLM's embeddings (Rotten Tomatoes sentiment) and an MLP on
scikit-learn's digits, with the embeddings cached on disk after the first run."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ailab import data
from ailab.models.encoders import Encoder, MeanPoolEncoder, load_encoder
from ailab.models.labels import TextLabel, text_labels, truncation_flags
from ailab.models.weights import cache_dir


class SentimentClassifier(nn.Module):
    """Encoder + linear head: (input_ids, attention_mask) -> (B, 2) logits. Exportable to ONNX."""

    def __init__(self, encoder: MeanPoolEncoder, head: nn.Linear):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(input_ids, attention_mask))  # (B, 2)


def cached_embeddings(encoder: Encoder, texts: list[str], tag: str, max_length: int = 64) -> np.ndarray:
    """Embeddings of `texts`, computed once per (weights, texts, max_length) and cached on disk."""
    key = hashlib.sha256((encoder.sha256 + str(max_length) + "\x00".join(texts)).encode()).hexdigest()[:16]
    path = cache_dir() / f"emb-{encoder.name}-{tag}-{key}.npy"
    if path.exists():
        return np.load(path)
    emb = encoder.embed(texts, batch_size=64, max_length=max_length)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
    with open(tmp, "wb") as f:
        np.save(f, emb)
    os.replace(tmp, path)  # atomic: a notebook beside this one (the GPU suite runs several) never reads half a file
    return emb


def train_linear_head(X: np.ndarray, y: np.ndarray, n_classes: int, epochs: int = 300, seed: int = 0) -> nn.Linear:
    """Full-batch logistic regression in torch (L-BFGS): deterministic, a second or two on CPU."""
    torch.manual_seed(seed)
    head = nn.Linear(X.shape[1], n_classes)
    Xt, yt = torch.from_numpy(X).float(), torch.from_numpy(y).long()
    opt = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=epochs)

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(Xt), yt) + 1e-4 * head.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return head.eval()


@dataclass
class TrainedClassifier:
    model: nn.Module
    encoder: Encoder | None
    split: data.Split
    test_accuracy: float
    train_seconds: float


def sentiment_classifier(encoder: Encoder | None = None, max_length: int = 64) -> TrainedClassifier:
    """MiniLM + a logistic-regression head trained on Rotten Tomatoes (embeddings cached after the first run)."""
    encoder = encoder or load_encoder()
    split = data.sentiment()
    t0 = time.perf_counter()
    X_train = cached_embeddings(encoder, split.X_train, "sentiment-train", max_length)
    X_test = cached_embeddings(encoder, split.X_test, "sentiment-test", max_length)
    head = train_linear_head(X_train, split.y_train, 2)
    with torch.no_grad():
        acc = float((head(torch.from_numpy(X_test)).argmax(1).numpy() == split.y_test).mean())
    model = SentimentClassifier(encoder.model, head).eval()
    return TrainedClassifier(model, encoder, split, acc, time.perf_counter() - t0)


def digits_mlp(hidden: int = 128, epochs: int = 60, seed: int = 0) -> TrainedClassifier:
    """A 64 -> hidden -> 10 MLP trained on digits with Adam (a few seconds on CPU)."""
    split = data.digits()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    X, y = torch.from_numpy(split.X_train), torch.from_numpy(split.y_train)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(torch.from_numpy(split.X_test)).argmax(1).numpy() == split.y_test).mean())
    return TrainedClassifier(model, None, split, acc, time.perf_counter() - t0)


@torch.inference_mode()
def predict_sentiment(clf: TrainedClassifier, texts: list[str], max_length: int = 64) -> list[TextLabel]:
    """One TextLabel ({label, score, probs, truncated}) per text, in order: the tour's widget calls this."""
    if isinstance(texts, str):
        raise TypeError("predict_sentiment() takes a list of texts; wrap a single text as [text]")
    if not texts:
        return []
    tok = clf.encoder.tokenizer
    enc = tok(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    probs = torch.softmax(clf.model(enc["input_ids"], enc["attention_mask"]), dim=-1)  # (B, 2)
    return text_labels(probs.numpy(), clf.split.classes, truncation_flags(tok, enc, texts, max_length))
