"""The recall@k exercise's checks pass the right answer and reject plausible wrong ones.

recall_at_k(approx_ids, exact_ids, k) -> float
| question | what the checks try |
|---|---|
| which input varies each field | approx alone (same ids, reordered, disjoint, partial), exact alone (padded, repeats), k alone (1, 2, 3, 4, 10, the full width) on the same arrays |
| boundaries | k = 1 and k = width; k 0, -2, width + 1; 0 queries; a row all -1; -1 in column k (cut before dropping); id 0 |
| a shape or type the notes never show | widths above k and different from each other; int32 beside int64; lists of lists; k as np.int64; 1-D, 3-D and 0-D inputs, one 2-D beside one 3-D |
| order or ties | the same ids in another order; repeated ids within a row (count once); 200 random cases |
| errors: type and message | ValueError (not TypeError, IndexError or an answer) whose message names the value at fault |
| policy: which item | - |

Each wrong answer is one class of mistake (-1 padding counted as a hit or dropped before cutting to k,
duplicates counted twice, whole rows instead of the top k, positions compared instead of sets, another
denominator, a constant k, the sum instead of the mean, no error for k beyond the columns, an array instead
of a float); each is rejected with the message that names it.

The differential check (check_same_as_reference) compares the value, or the ValueError, with a validating reference
on Hypothesis-drawn cases; it catches every wrong answer here but one, says_too_little, whose ValueError has the
right type and only the wrong words (check_errors reads them). The newer wrong answers are one per class the
hand-picked lists missed elsewhere: units and rounding (the recall rounded to 2 places, hits // k), boundaries (k
equal to the width refused, ids cast to int32 so ids beyond 2**31 wrap), state (padding rewritten in the caller's
array, rows sorted in place, a cache keyed by shape), order (the last k columns, rows sorted before the cut).
"""

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_recall_at_k as L


def _checked(approx_ids, exact_ids, k, not_2d=lambda a: a.ndim != 2):
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if not_2d(approx) or not_2d(exact):
        raise ValueError(f"approx_ids and exact_ids must be 2-D (queries, ids); got {approx.shape}, {exact.shape}")
    if approx.shape[0] != exact.shape[0] or approx.shape[0] == 0:
        raise ValueError(f"need the same, non-zero number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    if not 1 <= k <= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} must be between 1 and the columns ({approx.shape[1]}, {exact.shape[1]})")
    return approx, exact


def recall_at_k(approx_ids, exact_ids, k):
    approx, exact = _checked(approx_ids, exact_ids, k)
    hits = [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def counts_padding(approx_ids, exact_ids, k):
    """ailab.retrieval.recall_at_k's simple form: -1 in both rows counts as a hit."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(np.mean([len(set(a[:k].tolist()) & set(e[:k].tolist())) for a, e in zip(approx, exact)]) / k)


def drops_padding_first(approx_ids, exact_ids, k):
    """Removes -1 from the whole row, then cuts to k: results beyond the top k slip in."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    hits = [
        len(set([x for x in a.tolist() if x != -1][:k]) & set([x for x in e.tolist() if x != -1][:k]))
        for a, e in zip(approx, exact)
    ]
    return float(np.mean(hits) / k)


def counts_duplicates(approx_ids, exact_ids, k):
    approx, exact = _checked(approx_ids, exact_ids, k)
    hits = [sum(1 for x in a[:k].tolist() if x != -1 and x in set(e[:k].tolist())) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def whole_rows(approx_ids, exact_ids, k):
    approx, exact = _checked(approx_ids, exact_ids, k)
    hits = [len((set(a.tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def positional(approx_ids, exact_ids, k):
    """Compares rank by rank: the right ids in another order count as misses."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(np.mean((approx[:, :k] == exact[:, :k]) & (approx[:, :k] != -1)))


def over_distinct_exact(approx_ids, exact_ids, k):
    """Divides by the number of distinct real exact ids instead of k."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    out = []
    for a, e in zip(approx, exact):
        truth = set(e[:k].tolist()) - {-1}
        out.append(len(set(a[:k].tolist()) & truth) / max(1, len(truth)))
    return float(np.mean(out))


def fixed_k(approx_ids, exact_ids, k):
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if k > min(approx.shape[1], exact.shape[1]) or k < 1 or approx.shape[0] != exact.shape[0] or not len(approx):
        raise ValueError("bad k")
    kk = min(10, approx.shape[1], exact.shape[1])
    hits = [len((set(a[:kk].tolist()) & set(e[:kk].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / kk)


def summed(approx_ids, exact_ids, k):
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(sum(len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)) / k)


def no_k_check(approx_ids, exact_ids, k):
    """Slices silently: asking for more columns than exist divides by a k that was never returned."""
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    hits = [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def per_query_array(approx_ids, exact_ids, k):
    approx, exact = _checked(approx_ids, exact_ids, k)
    return np.array([len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) / k for a, e in zip(approx, exact)])


def stub(*a, **k):
    raise NotImplementedError("recall_at_k() is not implemented yet")


CHECKS = [
    L.check_values,
    L.check_first_k,
    L.check_padding_and_duplicates,
    L.check_errors,
    L.check_random,
    L.check_same_as_reference,
]


def test_right_answer_passes():
    for chk in CHECKS:
        chk(recall_at_k)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_padding_and_duplicates,
            counts_padding,
            r"both rows padded with -1.*should be 0.5; got 0.75.*not a neighbour found",
        ),
        (
            L.check_padding_and_duplicates,
            drops_padding_first,
            r"approx \[-1, 5, ...\].*should be 0.5; got 1.*cut to the first k first",
        ),
        (
            L.check_padding_and_duplicates,
            counts_duplicates,
            r"an approx row \[3, 3, 3, 3\].*should be 0.25; got 1.*repeated",
        ),
        (L.check_first_k, whole_rows, r"8 columns but k=4, k=4: recall should be 0.375; got 1 .*only the first k"),
        (L.check_values, positional, r"the same ids in another order.*should be 1; got 0.*not where in the row"),
        (L.check_padding_and_duplicates, over_distinct_exact, r"both rows padded with -1.*should be 0.5; got 1 "),
        (L.check_first_k, fixed_k, r"8 columns but k=4, k=4: recall should be 0.375; got 0.6875"),
        (L.check_values, summed, r"the approximate ids equal the exact ones, k=4: recall should be 1; got 2"),
        (L.check_errors, no_k_check, r"k=4 with only 3 columns.*should raise ValueError; it returned"),
        (L.check_values, per_query_array, r"should return one float; got array"),
        (L.check_random, counts_padding, r"random case #\d+"),
        (L.check_random, drops_padding_first, r"random case #\d+"),
        (L.check_random, counts_duplicates, r"random case #\d+"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def no_validation_at_all(approx_ids, exact_ids, k):
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    return float(np.mean([len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]) / k)


def test_errors_name_the_problem_for_unchecked_versions():
    with pytest.raises(LabCheckFailed, match="k=0: should raise ValueError|ZeroDivisionError"):
        L.check_errors(lambda a, e, k: no_validation_at_all(a, e, k) if k != 4 and k != 3 else recall_at_k(a, e, k))
    with pytest.raises(LabCheckFailed, match=r"1-D arrays.*raise a ValueError that says what is wrong; got"):
        L.check_errors(
            lambda a, e, k: (
                (len(np.asarray(a)[0]), recall_at_k(a, e, k))[1] if np.ndim(a) == 1 else recall_at_k(a, e, k)
            )
        )


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def recall_at_k_alt(approx_ids, exact_ids, k):
    """Also right: numpy only, np.isin over unique ids."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    found = 0
    for a, e in zip(approx[:, :k], exact[:, :k]):
        u = np.unique(a[a != -1])
        found += int(np.isin(u, e).sum())
    return found / (k * len(approx))


def test_other_right_answer_passes():
    for chk in CHECKS:
        chk(recall_at_k_alt)


def only_1d_refused(approx_ids, exact_ids, k):
    """Tests 'not 2-D' as `ndim == 1`: a 3-D array slips through to the set of rows (unhashable lists)."""
    approx, exact = _checked(approx_ids, exact_ids, k, not_2d=lambda a: a.ndim == 1)
    hits = [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def k_must_be_a_python_int(approx_ids, exact_ids, k):
    if type(k) is not int:
        raise ValueError(f"k must be an int; got {k!r}")
    return recall_at_k(approx_ids, exact_ids, k)


def says_too_little(approx_ids, exact_ids, k):
    try:
        return recall_at_k(approx_ids, exact_ids, k)
    except ValueError:
        raise ValueError("invalid input") from None


def approx_shape_only(approx_ids, exact_ids, k):
    """Validates the approximate array and trusts the exact one."""
    approx, exact = np.asarray(approx_ids), np.asarray(exact_ids)
    if approx.ndim != 2 or approx.shape[0] == 0 or not 1 <= k <= approx.shape[1]:
        raise ValueError(f"approx_ids must be 2-D with at least k={k} columns; got {approx.shape}")
    if approx.shape[0] != exact.shape[0]:
        raise ValueError(f"need the same number of queries; got {approx.shape[0]} and {exact.shape[0]}")
    hits = [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_errors, only_1d_refused, r"3-D arrays of shape \(2, 3, 4\).*got TypeError"),
        (
            L.check_first_k,
            k_must_be_a_python_int,
            r"k given as np.int64\(3\).*raised ValueError|your code raised "
            r"ValueError: k must be an int",
        ),
        (L.check_errors, says_too_little, r"its message 'invalid input' does not say what is wrong"),
        (L.check_errors, approx_shape_only, r"k=3 but the exact array has only 2 columns: should raise ValueError"),
    ],
)
def test_shapes_types_and_messages_nobody_listed(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check


def _per_query(approx, exact, k):
    return [len((set(a[:k].tolist()) & set(e[:k].tolist())) - {-1}) for a, e in zip(approx, exact)]


def rounded_to_two_places(approx_ids, exact_ids, k):
    """Rounding: rounds the recall to 2 decimals, as the sweep table prints it."""
    return round(recall_at_k(approx_ids, exact_ids, k), 2)


def whole_hits_per_query(approx_ids, exact_ids, k):
    """Units: hits // k per query (integer division): a query scores 1 or 0, never a share."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(np.mean([h // k for h in _per_query(approx, exact, k)]))


def refuses_full_width(approx_ids, exact_ids, k):
    """Boundaries: refuses k equal to the number of columns (k >= width), which the contract allows."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    if k >= min(approx.shape[1], exact.shape[1]):
        raise ValueError(f"k={k} must be below the number of columns")
    return float(np.mean(_per_query(approx, exact, k)) / k)


def ids_as_int32(approx_ids, exact_ids, k):
    """Boundaries: casts the ids to int32 to save memory: ids beyond 2**31 wrap (2**32 - 1 becomes -1)."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(np.mean(_per_query(approx.astype(np.int32), exact.astype(np.int32), k)) / k)


def marks_padding_in_place(approx_ids, exact_ids, k):
    """State: sets approx's -1 to -2 so padding never matches padding, in the caller's own array."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    approx[approx == -1] = -2
    hits = [len(set(a[:k].tolist()) & set(e[:k].tolist()) - {-1, -2}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def sorts_rows_in_place(approx_ids, exact_ids, k):
    """State: sorts each top-k row (a view into the caller's array) before comparing them."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    top_a, top_e = approx[:, :k], exact[:, :k]
    top_a.sort(axis=1)
    top_e.sort(axis=1)
    return float(np.mean(_per_query(top_a, top_e, k)) / k)


def cached_by_shape(approx_ids, exact_ids, k, _cache={}):
    """State: memoises the recall by the arrays' shapes and k (a sweep calls it with the same shapes)."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    key = (approx.shape, exact.shape, int(k))
    if key not in _cache:
        _cache[key] = float(np.mean(_per_query(approx, exact, k)) / k)
    return _cache[key]


def last_k_columns(approx_ids, exact_ids, k):
    """Order: takes the LAST k columns, as if the best result came last (sorted by ascending score)."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    hits = [len((set(a[-k:].tolist()) & set(e[-k:].tolist())) - {-1}) for a, e in zip(approx, exact)]
    return float(np.mean(hits) / k)


def sorts_before_cutting(approx_ids, exact_ids, k):
    """Order: sorts each row's ids (order does not matter to a set) before taking the first k."""
    approx, exact = _checked(approx_ids, exact_ids, k)
    return float(np.mean(_per_query(np.sort(approx, axis=1), np.sort(exact, axis=1), k)) / k)


NEW_WRONG = [
    rounded_to_two_places,
    whole_hits_per_query,
    refuses_full_width,
    ids_as_int32,
    marks_padding_in_place,
    sorts_rows_in_place,
    cached_by_shape,
    last_k_columns,
    sorts_before_cutting,
]


def test_the_reference_passes_the_older_checks():
    for chk in CHECKS[:-1]:
        chk(L._reference_recall_at_k)


@pytest.mark.parametrize(
    "wrong",
    [
        counts_padding,
        drops_padding_first,
        counts_duplicates,
        whole_rows,
        positional,
        over_distinct_exact,
        fixed_k,
        summed,
        no_k_check,
        per_query_array,
        no_validation_at_all,
        only_1d_refused,
        k_must_be_a_python_int,
        approx_shape_only,
        *NEW_WRONG,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(
        LabCheckFailed, match="where the reference's|should raise|should be a number|changed its input|your code raised"
    ):
        L.check_same_as_reference(wrong)


def test_the_differential_check_leaves_the_error_words_to_check_errors():
    # a ValueError that says only "invalid input" has the right type: only check_errors reads its words
    L.check_same_as_reference(says_too_little)
    with pytest.raises(LabCheckFailed, match="does not say what is wrong"):
        L.check_errors(says_too_little)


def test_the_differential_check_names_a_changed_array():
    with pytest.raises(LabCheckFailed, match=r"changed its input `approx_ids`"):
        L.check_same_as_reference(marks_padding_in_place)


def test_the_differential_check_shows_ids_beyond_2_31():
    with pytest.raises(LabCheckFailed, match=r"4294967295.*yours is 0.666.* where the reference's is 0.333"):
        L.check_same_as_reference(ids_as_int32)
