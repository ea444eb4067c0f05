"""Independent wrong answers for ex_recall_at_k, written from labs/4_application/ex_recall_at_k.ipynb's contract alone."""

import numpy as np


def recall_at_k(approx_ids, exact_ids, k):
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays (queries, ids); got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} must be between 1 and the number of columns ({approx.shape[1]}, {exact.shape[1]})")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        found = set(a.tolist()) & set(e.tolist())
        found.discard(-1)
        hits.append(len(found) / k)
    return float(np.mean(hits))


def padding_counts_as_hit(approx_ids, exact_ids, k):
    """Intersects the two top-k sets as they are: a shared -1 is a shared id."""
    # differs on [[1, -1]], [[1, -1]], 2: 1.0 instead of 0.5
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} out of range")
    hits = [len(set(a.tolist()) & set(e.tolist())) / k for a, e in zip(approx[:, :k], exact[:, :k])]
    return float(np.mean(hits))


def counts_positions(approx_ids, exact_ids, k):
    """Counts, position by position, the approximate ids that are among the exact top k."""
    # differs on [[1, 1]], [[1, 2]], 2: 1.0 instead of 0.5
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} out of range")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        truth = set(e.tolist()) - {-1}
        hits.append(sum(1 for x in a.tolist() if x in truth) / k)
    return float(np.mean(hits))


def k_checked_against_wider(approx_ids, exact_ids, k):
    """Checks k against the wider of the two arrays."""
    # differs on [[1, 2, 3, 4, 5]], [[1, 2, 3]], 4: 0.75 instead of ValueError
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= max(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} out of range")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        found = set(a.tolist()) & set(e.tolist())
        found.discard(-1)
        hits.append(len(found) / k)
    return float(np.mean(hits))


def k_zero_not_refused(approx_ids, exact_ids, k):
    """Checks only that k does not exceed the columns."""
    # differs on [[1, 2]], [[1, 2]], 0: ZeroDivisionError instead of ValueError
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if k > min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} is more than the columns")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        found = set(a.tolist()) & set(e.tolist())
        found.discard(-1)
        hits.append(len(found) / k)
    return float(np.mean(hits))


def one_query_as_flat_row(approx_ids, exact_ids, k):
    """Accepts a single query given as a flat row by promoting it to 2-D."""
    # differs on [1, 2, 3], [1, 2, 3], 3: 1.0 instead of ValueError
    approx, exact = np.atleast_2d(approx_ids), np.atleast_2d(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} out of range")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        found = set(a.tolist()) & set(e.tolist())
        found.discard(-1)
        hits.append(len(found) / k)
    return float(np.mean(hits))


def no_queries_not_refused(approx_ids, exact_ids, k):
    """Checks that the row counts match, but not that there is any row."""
    # differs on np.zeros((0, 5), int), np.zeros((0, 5), int), 3: nan (with a RuntimeWarning) instead of ValueError
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays; got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0]:
        raise ValueError(f"need the same number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} out of range")
    hits = []
    for a, e in zip(approx[:, :k], exact[:, :k]):
        found = set(a.tolist()) & set(e.tolist())
        found.discard(-1)
        hits.append(len(found) / k)
    return float(np.mean(hits))


RIGHT = {"recall_at_k": recall_at_k}
WRONG = [
    ("recall_at_k", padding_counts_as_hit, "boundaries: -1 padding"),
    ("recall_at_k", counts_positions, "order/parsing: duplicates"),
    ("recall_at_k", k_checked_against_wider, "boundaries"),
    ("recall_at_k", k_zero_not_refused, "error handling: parameter at 0"),
    ("recall_at_k", one_query_as_flat_row, "error handling: no refusal"),
    ("recall_at_k", no_queries_not_refused, "boundaries: empty input"),
]
