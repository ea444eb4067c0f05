"""ailab.retrieval with numpy brute force as the oracle, on clustered random unit vectors."""

from __future__ import annotations

import numpy as np
import pytest

from ailab import retrieval as R


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((40, 64))
    X = centers[rng.integers(0, 40, 4000)] + 0.6 * rng.standard_normal((4000, 64))
    Q = centers[rng.integers(0, 40, 200)] + 0.6 * rng.standard_normal((200, 64))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    return X, Q


def test_flat_is_exact_against_numpy(corpus):
    X, Q = corpus
    ids = R.search(R.flat_index(X), Q, k=10)
    truth = np.argsort(-(Q @ X.T), axis=1)[:, :10]
    assert R.recall_at_k(ids, truth, 10) == 1.0


def test_recall_at_k_counts_overlap():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 3, 9, 9], [5, 6, 7, 8]])
    assert R.recall_at_k(found, truth, 4) == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert R.recall_at_k(found, truth, 2) == pytest.approx((0 + 1) / 2)
    with pytest.raises(ValueError, match="rows"):
        R.recall_at_k(found[:1], truth, 4)


def test_ivfpq_recall_rises_with_nprobe_and_rerank_recovers_it(corpus):
    X, Q = corpus
    truth = R.search(R.flat_index(X), Q, 10)
    index = R.ivfpq_index(X, nlist=32, m=16, nbits=6)
    recalls = []
    for p in (1, 4, 32):
        R.set_nprobe(index, p)
        recalls.append(R.recall_at_k(R.search(index, Q, 10), truth))
    assert recalls[0] < recalls[1] <= recalls[2] < 1.0  # PQ codes are lossy even scanning every list
    reranked = R.with_rerank(index, X, k_factor=10)
    assert reranked.ntotal == index.ntotal == len(X)  # the base index was not added to twice
    R.set_nprobe(reranked, 32)
    assert R.recall_at_k(R.search(reranked, Q, 10), truth) > max(recalls[2], 0.9)
    # memory: PQ codes (16 codes x 6 bits = 12 bytes, + 8-byte id) vs 64 float32; re-ranking keeps the raw vectors too
    assert R.index_bytes(index) == len(X) * (12 + 8)
    assert R.index_bytes(R.flat_index(X)) == len(X) * 64 * 4
    assert R.index_bytes(reranked) == R.index_bytes(index) + len(X) * 64 * 4


def test_tradeoff_rows_and_figure(corpus):
    X, Q = corpus
    rows = R.nprobe_tradeoff(
        R.flat_index(X), {"IVF-PQ": R.ivfpq_index(X, nlist=16, m=16)}, Q[:50], nprobes=(1, 16), time_queries=10
    )
    assert [r.name for r in rows] == ["Flat (exact)", "IVF-PQ", "IVF-PQ"]
    assert rows[0].recall_at_10 == 1.0 and rows[1].recall_at_10 <= rows[2].recall_at_10 < 1.0
    assert all(r.p50_ms > 0 for r in rows) and len(R.tradeoff_figure(rows).data) == 2


def test_grow_corpus_keeps_the_originals_and_unit_length(corpus):
    X, _ = corpus
    big = R.grow_corpus(X[:100], 5)
    assert big.shape == (500, 64)
    np.testing.assert_allclose(np.linalg.norm(big, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(big[:100], X[:100], atol=1e-6)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda X: R.flat_index(X[0]), "2-D"),
        (lambda X: R.flat_index(np.full((3, 4), np.nan)), "NaN"),
        (lambda X: R.ivfpq_index(X, m=7), "divide"),
        (lambda X: R.ivfpq_index(X[:10], nlist=64, m=16), "nlist"),
        (lambda X: R.search(R.flat_index(X), X[:2], k=0), "k must"),
        (lambda X: R.with_rerank(R.ivfpq_index(X, nlist=8, m=16), X[:5]), "same vectors"),
    ],
)
def test_bad_input_is_named(corpus, call, match):
    with pytest.raises(ValueError, match=match):
        call(corpus[0])
