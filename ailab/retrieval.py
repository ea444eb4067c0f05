"""Vector search: exact (faiss Flat) vs approximate (faiss IVF-PQ), and what the approximation costs.

- `flat_index(X)`: exact inner-product search; every query scans every vector (cost grows with N).
- `ivfpq_index(X, nlist, m, nbits)`: vectors are clustered into `nlist` lists (IVF) and each is
  compressed to `m` bytes of product-quantisation codes (PQ). A query scans only the `nprobe` nearest
  lists and compares compressed codes: much less work and memory, at the price of some wrong neighbours.
- `recall_at_k(found, truth, k)`: the share of the true top-k that the approximate search returned.
- `time_search(index, Q, k)`: per-query latency (ms) measured with ailab.timing.

Embeddings are L2-normalised (MiniLM's are), so inner product = cosine similarity.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np

from ailab.timing import LatencyStats, measure_latency


def _as_matrix(X, name: str) -> np.ndarray:
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float32))
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n_vectors, dim); got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def flat_index(X):
    """Exact search by inner product over all of `X` (N, D)."""
    import faiss

    X = _as_matrix(X, "X")
    index = faiss.IndexFlatIP(X.shape[1])
    index.add(X)
    return index


def ivfpq_index(
    X,
    nlist: int = 64,
    m: int = 48,
    nbits: int = 6,
    nprobe: int = 8,
    train_size: int | None = None,
    niter: int = 15,
    seed: int = 0,
):
    """IVF (nlist clusters) + PQ (m sub-vectors of nbits each) over `X` (N, D), trained on `X` itself.

    PQ needs D divisible by m, and about 39 * 2**nbits training vectors per codebook and 39 * nlist
    for the clusters, or faiss warns that the clustering is poor.
    """
    import faiss

    X = _as_matrix(X, "X")
    n, d = X.shape
    if d % m:
        raise ValueError(f"m={m} must divide the vector dimension {d} (PQ cuts each vector into m equal parts)")
    if nlist < 1 or nlist > n:
        raise ValueError(f"nlist={nlist} must be between 1 and the number of vectors ({n})")
    if nprobe < 1:
        raise ValueError(f"nprobe={nprobe} must be >= 1 (how many of the {nlist} lists a query scans)")
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFPQ(quantizer, d, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    train = X if train_size is None or train_size >= n else X[rng.choice(n, train_size, replace=False)]
    index.cp.seed, index.cp.niter = seed, niter  # deterministic k-means, bounded training time
    index.pq.cp.seed, index.pq.cp.niter = seed, niter
    with faiss_threads(1):
        index.train(train)
        index.add(X)
    index.nprobe = nprobe
    return index


@contextlib.contextmanager
def faiss_threads(n: int):
    """Run faiss with `n` OpenMP threads inside the block.

    Single-threaded is the honest (and on a shared machine, the faster) choice here: OpenMP threads
    busy-wait, and on a loaded 2-core machine they fight each other and the timing loses meaning.
    """
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def with_rerank(index, X, k_factor: int = 10):
    """Re-rank IVF-PQ's top (k * k_factor) candidates by exact inner product with the raw vectors.

    PQ codes are approximate, so the true neighbour is often found but ranked wrongly; re-ranking a
    short list with the full vectors fixes most of that for little extra time (the raw vectors must be
    kept, in RAM or on disk, so the memory saving of PQ is given back).
    """
    import faiss

    X = _as_matrix(X, "X")
    if index.ntotal != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} vectors but the index holds {index.ntotal}: pass the same vectors")
    # This constructor copies X into the flat re-ranking store only (`.add` would add to the base too).
    refine = faiss.IndexRefineFlat(index, faiss.swig_ptr(X))
    refine.k_factor = float(k_factor)
    return refine


def set_nprobe(index, nprobe: int) -> None:
    """How many IVF lists a query scans (through a re-ranking wrapper too)."""
    import faiss

    faiss.extract_index_ivf(index).nprobe = int(nprobe)


def search(index, Q, k: int = 10) -> np.ndarray:
    """(n_queries, k) ids of the nearest vectors (-1 where fewer than k were found)."""
    Q = _as_matrix(Q, "Q")
    if k < 1:
        raise ValueError(f"k must be >= 1 (got {k})")
    return index.search(Q, k)[1]


def recall_at_k(found: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    """Mean over queries of |found[:k] ∩ truth[:k]| / k: 1.0 means the same top-k as exact search."""
    found, truth = np.asarray(found), np.asarray(truth)
    if found.shape[0] != truth.shape[0] or found.shape[1] < k or truth.shape[1] < k:
        raise ValueError(
            f"found {found.shape} and truth {truth.shape} need the same number of rows and >= k={k} columns"
        )
    hits = [len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth)]
    return float(np.mean(hits) / k)


def time_search(index, Q, k: int = 10, iters: int = 5, warmup: int = 1) -> LatencyStats:
    """Per-query latency of searching one query at a time (a service answers one user at a time)."""
    Q = _as_matrix(Q, "Q")
    i = [0]

    def one():
        index.search(Q[i[0] % len(Q) : i[0] % len(Q) + 1], k)
        i[0] += 1

    # One thread per query: a service runs queries side by side, and faiss's OpenMP threads on a
    # busy machine add jitter that has nothing to do with the index.
    with faiss_threads(1):
        return measure_latency(one, iters=max(iters, 1) * len(Q), warmup=warmup, max_seconds=3.0)


def index_bytes(index) -> int:
    """Bytes the index's vectors (or codes) take: what it costs to hold in memory."""
    import faiss

    if isinstance(index, faiss.IndexFlat):
        return index.ntotal * index.d * 4
    ivf = faiss.extract_index_ivf(index)
    size = ivf.ntotal * ivf.code_size + ivf.ntotal * 8  # codes + stored ids
    if isinstance(index, faiss.IndexRefine):
        size += index.ntotal * index.d * 4  # the raw vectors kept for re-ranking
    return size


def grow_corpus(X: np.ndarray, factor: int, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    """`factor` perturbed copies of `X`, re-normalised: a bigger corpus with the same geometry.

    Only for showing how search cost grows with N; recall is always measured on the real vectors.
    """
    X = _as_matrix(X, "X")
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (got {factor})")
    rng = np.random.default_rng(seed)
    copies = [X] + [
        X + noise * rng.standard_normal(X.shape).astype(np.float32) / np.sqrt(X.shape[1]) for _ in range(factor - 1)
    ]
    out = np.concatenate(copies)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@dataclass
class TradeOff:
    """One row of the recall-vs-latency table."""

    name: str
    nprobe: int | None
    recall_at_10: float
    p50_ms: float
    p99_ms: float
    mbytes: float


def nprobe_tradeoff(
    flat, approx: dict, Q, nprobes=(1, 2, 4, 8, 16, 32), k: int = 10, time_queries: int = 100
) -> list[TradeOff]:
    """Recall@k (all of Q) and latency (the first `time_queries` of Q, one at a time) of exact search
    and of each approximate index in `approx` ({name: index}) at each nprobe."""
    Q = _as_matrix(Q, "Q")
    truth = search(flat, Q, k)
    st = time_search(flat, Q[:time_queries], k)
    rows = [TradeOff("Flat (exact)", None, 1.0, st.p50_ms, st.p99_ms, index_bytes(flat) / 1e6)]
    for name, index in approx.items():
        for p in nprobes:
            set_nprobe(index, p)
            st = time_search(index, Q[:time_queries], k)
            rows.append(
                TradeOff(
                    name,
                    int(p),
                    recall_at_k(search(index, Q, k), truth, k),
                    st.p50_ms,
                    st.p99_ms,
                    index_bytes(index) / 1e6,
                )
            )
    return rows


def tradeoff_figure(rows: list[TradeOff]):
    """Recall@10 against p50 latency, one line per index kind (nprobe labels the points)."""
    import plotly.graph_objects as go

    from ailab import viz
    from ailab.device import describe_hardware

    fig = go.Figure()
    for name in dict.fromkeys(r.name for r in rows):
        pts = [r for r in rows if r.name == name]
        fig.add_trace(
            go.Scatter(
                x=[r.p50_ms for r in pts],
                y=[r.recall_at_10 for r in pts],
                name=name,
                mode="lines+markers+text",
                textposition="top center",
                text=[f"nprobe={r.nprobe}" if r.nprobe else "exact" for r in pts],
            )
        )
    fig.update_layout(
        title={"text": f"Recall@10 vs latency per query<br><sup>measured on {describe_hardware().one_line()}</sup>"},
        xaxis_title="p50 latency per query (ms, log)",
        yaxis_title="recall@10 vs exact search",
        template="plotly_white",
        height=420,
    )
    fig.update_xaxes(**viz.log_axis([r.p50_ms for r in rows]))
    return fig


def build_seconds(fn, *args, **kwargs):
    """(result, seconds) of building an index: IVF-PQ pays for training up front."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def nprobe_view(rows: list[TradeOff], nprobe: int) -> dict:
    """The measured rows at `nprobe`: per approximate index its recall@10, p50 and speed-up over exact search."""
    probes = sorted({r.nprobe for r in rows if r.nprobe is not None})
    if nprobe not in probes:
        raise ValueError(f"nprobe={nprobe!r} was not measured; choose one of {probes}")
    exact = next((r for r in rows if r.nprobe is None), None)
    out = {}
    for r in rows:
        if r.nprobe == nprobe:
            out[r.name] = {
                "recall_at_10": r.recall_at_10,
                "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms,
                "mbytes": r.mbytes,
                "speedup_vs_exact": exact.p50_ms / r.p50_ms if exact else None,
            }
    return out


def nprobe_figure(rows: list[TradeOff], nprobe: int):
    """Widget callback: the measured recall-vs-latency figure with the points at `nprobe` marked and read
    out in the title. Replays measured rows; searches nothing."""
    import plotly.graph_objects as go

    view = nprobe_view(rows, nprobe)
    fig = tradeoff_figure(rows)
    fig.add_trace(
        go.Scatter(
            x=[v["p50_ms"] for v in view.values()],
            y=[v["recall_at_10"] for v in view.values()],
            mode="markers",
            name=f"nprobe={nprobe}",
            marker={"size": 18, "symbol": "circle-open", "color": "black", "line": {"width": 2}},
        )
    )
    parts = [
        f"{name}: recall {v['recall_at_10']:.2f} at {v['p50_ms']:.3f} ms"
        + (f" ({v['speedup_vs_exact']:.1f}x exact's speed)" if v["speedup_vs_exact"] else "")
        for name, v in view.items()
    ]
    measured_on = fig.layout.title.text.split("<br>", 1)[-1]
    fig.update_layout(title={"text": f"nprobe={nprobe}: " + "; ".join(parts) + "<br>" + measured_on})
    return fig
