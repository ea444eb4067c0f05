"""Exercise checks: recall@k of an approximate index against exact search (chapter 4.06, retrieval; topic A5).

The learner writes
  recall_at_k(approx_ids, exact_ids, k) -> float
      approx_ids and exact_ids are (Q, >= k) integer arrays of ids, one row per query, best first (what
      faiss's index.search returns, -1 where it found fewer results than asked for). The answer is the mean
      over queries of |(first k of the approx row) ∩ (first k of the exact row)| / k, where -1 is never a
      hit and an id repeated within a row counts once. ValueError for k < 1, k larger than either array's
      columns, rows that differ in number, no queries at all, or an input that is not 2-D.

The checks are derived from what the function must guarantee:
  - a float in [0, 1]: 1.0 for the same top-k in any order, 0.0 for disjoint ones, the per-query mean
    (not the sum of hits, not a count);
  - only the first k columns of each array count (arrays wider than k, of different widths; k = 1 and k =
    the full width; k is the argument, not 10);
  - -1 padding is never a hit, also when both rows are padded (a corpus smaller than k); it is dropped after
    taking the first k, never before; duplicates count once; int32 and int64 ids; a list of lists;
  - k as numpy gives it (np.int64) is a number;
  - the errors above are ValueError, not an IndexError, a TypeError or a silent answer over fewer than k
    columns, and the message names the value at fault (k, the widths, the row counts, the dimensions); "not
    2-D" is tried with 1-D, 3-D and 0-D inputs and with one 2-D input beside one that is not;
  - on random cases (sizes, padding, duplicates, widths) the value equals the definition's;
  - on Hypothesis-drawn cases the value (or the ValueError) equals a reference that validates as above: 1 to 5
    queries, k from 1 to the narrower width, widths above k and different, ids 0, -1 and beyond 2**31 (up to
    2**40, 2**32 - 1 among them), repeats, int32 and int64 arrays and lists of lists, k as int or np.int64; and
    k = 0, k = -1, k one past a width, row counts that differ, no queries, 1-D and 3-D inputs; the arrays given are
    left as they were, and the same input gives the same answer on every call.
"""

from __future__ import annotations

import numpy as np

from ailab.labs.core import check, expect
from ailab.labs.differential import close, same_as_reference, short

LAB = "ex_recall_at_k"


def reference(approx_ids, exact_ids, k) -> float:
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    hits = [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def _value(recall_at_k, approx, exact, k, what):
    got = recall_at_k(approx, exact, k)
    expect(
        isinstance(got, (float, np.floating)) and np.ndim(got) == 0,
        f"{what}: recall_at_k should return one float; got {got!r} ({type(got).__name__})",
    )
    return float(got)


def _same(recall_at_k, approx, exact, k, what, why=""):
    want = reference(approx, exact, k)
    got = _value(recall_at_k, approx, exact, k, what)
    expect(
        abs(got - want) < 1e-9,
        f"{what}, k={k}: recall should be {want:.4g}; got {got:.4g}" + (f" - {why}" if why else ""),
    )
    return got


def _rows(*rows, dtype=np.int64):
    return np.array(rows, dtype=dtype)


@check(LAB, "recall@k: the share of the exact top k found, averaged over queries")
def check_values(recall_at_k):
    exact = _rows([1, 2, 3, 4], [10, 11, 12, 13])
    _same(recall_at_k, exact.copy(), exact, 4, "the approximate ids equal the exact ones", "the same top-k is 1.0")
    _same(
        recall_at_k,
        _rows([4, 3, 2, 1], [13, 12, 11, 10]),
        exact,
        4,
        "the same ids in another order",
        "recall counts which ids were found, not where in the row",
    )
    _same(recall_at_k, _rows([5, 6, 7, 8], [20, 21, 22, 23]), exact, 4, "no id in common", "nothing found is 0.0")
    _same(
        recall_at_k,
        _rows([1, 2, 9, 8], [10, 30, 31, 32]),
        exact,
        4,
        "query 0 finds 2 of 4, query 1 finds 1 of 4",
        "the mean of 2/4 and 1/4 is 0.375",
    )
    _same(recall_at_k, _rows([7, 3, 1, 5, 2]), _rows([1, 2, 3, 4, 5]), 5, "a single query finding 4 of 5")
    three = _rows([1, 2, 3], [4, 5, 6], [7, 8, 9])
    _same(
        recall_at_k,
        _rows([1, 2, 3], [4, 0, 0], [0, 0, 0]),
        three,
        3,
        "three queries finding 3, 1 and 0 of 3",
        "a mean over queries stays between 0 and 1: (1 + 1/3 + 0) / 3",
    )


@check(LAB, "only the first k columns count, and k is the argument")
def check_first_k(recall_at_k):
    exact = _rows(list(range(0, 8)), list(range(100, 108)))
    approx = _rows([0, 1, 50, 51, 2, 3, 4, 5], [100, 60, 61, 62, 101, 102, 103, 104])
    _same(
        recall_at_k,
        approx,
        exact,
        4,
        "8 columns but k=4",
        "only the first k of each row count: ids found further down the approximate list are not in its top k",
    )
    _same(recall_at_k, approx, exact, 1, "k=1: is the very best result the exact best?")
    _same(recall_at_k, approx, exact, 8, "k=8, the full width")
    _same(
        recall_at_k,
        approx[:, :3],
        exact,
        3,
        "approx has 3 columns, exact 8, k=3",
        "both arrays are cut to their first k columns, whatever their widths",
    )
    _same(recall_at_k, exact, approx[:, :5], 2, "approx has 8 columns, exact 5, k=2")
    wide = np.arange(40).reshape(2, 20)
    _same(
        recall_at_k,
        wide[:, ::-1].copy(),
        wide,
        10,
        "20 columns, k=10, the approx rows reversed",
        "use the k you are given",
    )
    _same(recall_at_k, wide, wide, 20, "20 columns, k=20")
    _same(
        recall_at_k,
        approx,
        exact,
        np.int64(3),
        "k given as np.int64(3) (numpy's integer, e.g. from a sweep)",
        "np.int64 is a whole number too",
    )


@check(LAB, "-1 padding is never a hit; duplicates count once")
def check_padding_and_duplicates(recall_at_k):
    _same(
        recall_at_k,
        _rows([4, 7, -1, -1]),
        _rows([4, 7, 9, 11]),
        4,
        "approx found only 2 results (-1 padding) in a corpus that has 4",
        "2 of the 4 exact neighbours: 0.5",
    )
    _same(
        recall_at_k,
        _rows([4, 7, -1, -1]),
        _rows([7, 4, -1, -1]),
        4,
        "both rows padded with -1 (a corpus smaller than k)",
        "-1 means 'no result': two missing results are not a neighbour found",
    )
    _same(recall_at_k, _rows([-1, -1, -1]), _rows([-1, -1, -1]), 3, "no result at all in either row")
    _same(
        recall_at_k,
        _rows([-1, 5, 6, 9]),
        _rows([5, 6, 7, 9]),
        2,
        "approx [-1, 5, ...], exact [5, 6, ...], k=2",
        "cut to the first k first: the approx top 2 is [-1, 5], so 1 of 2 is found (dropping -1 before cutting "
        "would let a third column in)",
    )
    _same(
        recall_at_k,
        _rows([3, 3, 3, 3]),
        _rows([3, 4, 5, 6]),
        4,
        "an approx row [3, 3, 3, 3]",
        "an id repeated within a row is one neighbour: 1 of 4",
    )
    _same(
        recall_at_k,
        _rows([3, 4, 5, 6]),
        _rows([3, 3, 4, 4]),
        4,
        "an exact row with repeats [3, 3, 4, 4]",
        "2 distinct ids in common, over k=4",
    )
    _same(
        recall_at_k,
        _rows([1, 2, 3], [4, 5, 6], dtype=np.int32),
        _rows([1, 2, 9], [4, 8, 9]),
        3,
        "int32 approx ids against int64 exact ids",
    )
    _same(recall_at_k, [[1, 2, 3], [4, 5, 6]], [[3, 2, 1], [7, 8, 9]], 3, "two Python lists of lists")


def _expect_value_error(recall_at_k, approx, exact, k, what, names):
    """`names`: what the message may hold to name the value at fault (any one of them)."""
    try:
        got = recall_at_k(approx, exact, k)
    except ValueError as e:
        expect(
            any(n in str(e) for n in names),
            f"{what}: a ValueError, good, but its message {str(e)!r} does not say what is wrong: name the value at "
            f"fault (for example {names[0]!r})",
        )
        return
    except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this names
        expect(False, f"{what}: raise a ValueError that says what is wrong; got {type(e).__name__}: {e}")
    expect(False, f"{what}: should raise ValueError; it returned {got!r}")


@check(LAB, "inputs that cannot give recall@k are a ValueError")
def check_errors(recall_at_k):
    a = _rows([1, 2, 3], [4, 5, 6])
    dims = ["2-D", "2D", "2 dim", "two-dim", "ndim", "dimension", "shape"]
    _expect_value_error(
        recall_at_k, a, a, 4, "k=4 with only 3 columns (asking for more results than returned)", ["4", "3"]
    )
    _expect_value_error(recall_at_k, a, a[:, :2], 3, "k=3 but the exact array has only 2 columns", ["3", "2"])
    _expect_value_error(recall_at_k, a[:, :2], a, 3, "k=3 but the approx array has only 2 columns", ["3", "2"])
    _expect_value_error(recall_at_k, a, a, 0, "k=0", ["0", "k"])
    _expect_value_error(recall_at_k, a, a, -2, "k=-2", ["-2", "k"])
    _expect_value_error(
        recall_at_k,
        a,
        a[:1],
        2,
        "2 approx rows against 1 exact row (not the same queries)",
        ["2", "1", "rows", "queries"],
    )
    empty = np.zeros((0, 5), dtype=np.int64)
    _expect_value_error(
        recall_at_k, empty, empty, 5, "zero queries (recall over nothing is not a number)", ["0", "no quer", "empty"]
    )
    _expect_value_error(
        recall_at_k, np.array([1, 2, 3]), np.array([1, 2, 3]), 2, "1-D arrays (one row, not 2-D)", dims + ["(3,)"]
    )
    cube = np.arange(24).reshape(2, 3, 4)
    _expect_value_error(
        recall_at_k, cube, cube, 2, "3-D arrays of shape (2, 3, 4) (a batch of results, not 2-D)", dims + ["(2, 3, 4)"]
    )
    _expect_value_error(
        recall_at_k, a, cube, 2, "approx of shape (2, 3) against exact of shape (2, 3, 4)", dims + ["(2, 3, 4)"]
    )
    _expect_value_error(
        recall_at_k, np.int64(5), np.int64(5), 1, "two single ids (0-D), not arrays of rows", dims + ["()"]
    )


@check(LAB, "agrees with the definition on random cases")
def check_random(recall_at_k):
    rng = np.random.default_rng(6)
    for case in range(200):
        q, k = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        wa, we = k + int(rng.integers(0, 4)), k + int(rng.integers(0, 4))
        universe = int(rng.integers(k, 4 * k + 2))
        exact = np.stack([rng.choice(universe, we, replace=universe < we) for _ in range(q)])
        approx = np.where(
            rng.random((q, wa)) < 0.6, exact[:, rng.integers(0, we, wa)], rng.integers(0, universe, (q, wa))
        )
        for arr, p in ((approx, 0.15), (exact, 0.05)):
            arr[rng.random(arr.shape) < p] = -1
        _same(
            recall_at_k,
            approx.astype(rng.choice([np.int32, np.int64])),
            exact,
            k,
            f"random case #{case} ({q} queries, approx {approx.shape}, exact {exact.shape})",
        )


# --------------------------------------------------------------------------- the differential check


def _reference_recall_at_k(approx_ids, exact_ids, k) -> float:
    """`reference`, with the contract's ValueErrors first (the module's `reference` does not validate)."""
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or exact.ndim != 2:
        raise ValueError(f"expected 2-D arrays (queries, ids); got shapes {approx.shape} and {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} must be between 1 and the number of columns ({approx.shape[1]}, {exact.shape[1]})")
    return reference(approx, exact, k)


_SMALL_IDS = [0, 1, 2, 3, 4, 5, 6, 7, 8, -1]
_BIG_IDS = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**32 + 5, 2**40 + 3]  # int32 wraps them onto small ones


def _cases():
    """Hypothesis: (approx_ids, exact_ids, k), mostly valid, a tenth of them something the contract refuses."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        q, k = d(st.integers(1, 5)), d(st.integers(1, 6))
        wa, we = k + d(st.sampled_from([0, 0, 1, 3])), k + d(st.sampled_from([0, 0, 2]))
        big = d(st.booleans())
        pool = _SMALL_IDS + (_BIG_IDS if big else [])
        exact = d(st.lists(st.lists(st.sampled_from(pool), min_size=we, max_size=we), min_size=q, max_size=q))
        approx = [d(st.lists(st.sampled_from(row + pool), min_size=wa, max_size=wa)) for row in exact]  # often hits
        bad = d(st.sampled_from(["none"] * 12 + ["k0", "kneg", "kwide", "narrow", "rows", "empty", "1d", "3d", "3d"]))
        if bad == "k0":
            k = 0
        elif bad == "kneg":
            k = -1
        elif bad == "kwide":
            k = min(wa, we) + 1
        elif bad == "narrow":  # one side has fewer than k columns (none at all when k = 1), the other enough
            if d(st.booleans()):
                exact, we = [r[: k - 1] for r in exact], k - 1
            else:
                approx, wa = [r[: k - 1] for r in approx], k - 1
        elif bad == "rows":
            exact = exact[:-1] if q > 1 else exact + exact
        elif bad == "empty":
            approx, exact = [], []

        def form(rows, width):
            kind = d(st.sampled_from(["int64", "int64", "int32", "list"]))
            if bad == "empty":
                return np.zeros((0, width), dtype=np.int64)
            if bad == "1d":
                return np.array(rows[0], dtype=np.int64)
            if bad == "3d":
                return np.array([rows, rows], dtype=np.int64)
            if kind == "list":
                return [list(r) for r in rows]
            return np.array(rows, dtype=np.int32 if kind == "int32" and not big else np.int64)

        k = np.int64(k) if d(st.booleans()) else k
        return form(approx, wa), form(exact, we), k

    return draw()


def _describe(approx_ids, exact_ids, k):
    return f"approx_ids={short(approx_ids)}, exact_ids={short(exact_ids)}, k={k!r}"


@check(LAB, "the definition's recall (or its ValueError) on every case tried")
def check_same_as_reference(recall_at_k):
    big = np.array([[2**32 - 1, 2**32 + 5, 7]], dtype=np.int64)
    same_as_reference(
        recall_at_k,
        _reference_recall_at_k,
        _cases(),
        describe=_describe,
        compare=close(),
        edges=[
            (np.array([[1, 2, 3]]), np.array([[3, 1, 9]]), 3),
            (np.array([[1, 2, 3]]), np.array([[3, 1, 2]]), 3),  # the same shapes again: nothing kept from before
            (big, np.array([[-1, 5, 7]]), 3),  # ids beyond 2**31: 2**32 - 1 is not -1, 2**32 + 5 is not 5
            (np.array([[1, 2, 3]]), np.array([[1, 2]]), 3),  # k beyond the exact array's columns only
            (np.arange(6).reshape(2, 1, 3), np.arange(6).reshape(2, 1, 3), 1),  # 3-D: not a row of ids per query
        ],
        arg_names=("approx_ids", "exact_ids", "k"),
        examples=250,
    )
