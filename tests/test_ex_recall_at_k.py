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


CHECKS = [L.check_values, L.check_first_k, L.check_padding_and_duplicates, L.check_errors, L.check_random]


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
