"""The compare-outputs exercise's checks pass the right answer and reject plausible wrong ones.

compare_outputs(reference, candidate) -> {"max_abs", "mean_abs", "min_row_cosine", "argmax_agreement"}
| question | what the checks try |
|---|---|
| which input varies each field | one row changed at a time: a negative difference (max_abs), cancelling signs (mean_abs), a row times 2 and an opposite row (cosine), a flipped argmax (agreement) |
| boundaries | identical arrays (0, 1.0); a single row; fp16 extremes (65504, no error); a difference that overflows fp16 (120000) |
| a shape or type the notes never show | N != C (per-column shows); fp16, fp32 and fp64 mixed; (N, 1), (1, C) and transposed shapes |
| order or ties | the minimum over rows, not the mean or one flattened cosine |
| errors: type and message | ValueError (not AssertionError, not a number) naming both shapes, or naming which array holds NaN / +-inf; inputs left as they were |
| policy: which item | - |


Each wrong answer is one class of mistake (arithmetic in the inputs' dtype, signed differences, a cosine of
the flattened arrays, per column or averaged or made absolute, a count for a fraction, argmax over the wrong
axis, no shape check, NaN skipped or passed through, the wrong error type, numpy scalars returned, ...).
"""

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_compare_outputs as E

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the fp16 mistakes overflow on purpose


def _validate(reference, candidate):
    if reference.shape != candidate.shape:
        raise ValueError(f"shapes differ: reference {reference.shape}, candidate {candidate.shape}")
    for name, x in (("reference", reference), ("candidate", candidate)):
        if not np.isfinite(x).all():
            raise ValueError(f"the {name} holds NaN or inf")


def _report(a, b, row_cos, agree):
    d = np.abs(a - b)
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_row_cosine": float(row_cos),
        "argmax_agreement": float(agree),
    }


def _row_cos(a, b, axis=1):
    return (a * b).sum(axis) / (np.linalg.norm(a, axis=axis) * np.linalg.norm(b, axis=axis))


def compare_outputs(reference, candidate):
    a, b = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    _validate(a, b)
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def compare_alt(reference, candidate):
    """Also right: validate first on the raw arrays, normalise the rows, then take dot products."""
    if np.shape(reference) != np.shape(candidate):
        raise ValueError(f"{np.shape(reference)} != {np.shape(candidate)}")
    if not np.all(np.isfinite(reference)):
        raise ValueError("non-finite values in reference")
    if not np.all(np.isfinite(candidate)):
        raise ValueError("non-finite values in candidate")
    a, b = reference.astype(np.float64), candidate.astype(np.float64)
    na = a / np.linalg.norm(a, axis=1, keepdims=True)
    nb = b / np.linalg.norm(b, axis=1, keepdims=True)
    diff = np.abs(a - b)
    return {
        "max_abs": diff.max().item(),
        "mean_abs": diff.mean().item(),
        "min_row_cosine": min(float(x) for x in (na * nb).sum(axis=1)),
        "argmax_agreement": float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1))),
    }


def cmp_no_cast(reference, candidate):
    """Arithmetic in the inputs' dtype: fp16 overflows and rounds."""
    a, b = np.asarray(reference), np.asarray(candidate)
    _validate(a, b)
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_cast_float32(reference, candidate):
    """float32 is enough for fp16's range but rounds the mean at the 7th digit."""
    a, b = np.asarray(reference, dtype=np.float32), np.asarray(candidate, dtype=np.float32)
    _validate(a, b)
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_signed_max(reference, candidate):
    out = compare_outputs(reference, candidate)
    out["max_abs"] = float((np.asarray(candidate, np.float64) - np.asarray(reference, np.float64)).max())
    return out


def cmp_signed_mean(reference, candidate):
    out = compare_outputs(reference, candidate)
    out["mean_abs"] = float(abs((np.asarray(candidate, np.float64) - np.asarray(reference, np.float64)).mean()))
    return out


def cmp_mean_cosine(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["min_row_cosine"] = float(_row_cos(a, b).mean())
    return out


def cmp_abs_cosine(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["min_row_cosine"] = float(np.abs(_row_cos(a, b)).min())
    return out


def cmp_flat_cosine(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["min_row_cosine"] = float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b)))
    return out


def cmp_column_cosine(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["min_row_cosine"] = float(np.nanmin(_row_cos(a, b, axis=0)))
    return out


def cmp_agreement_count(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["argmax_agreement"] = float((a.argmax(1) == b.argmax(1)).sum())
    return out


def cmp_agreement_axis0(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["argmax_agreement"] = float((a.argmax(0) == b.argmax(0)).mean())
    return out


def cmp_agreement_flat(reference, candidate):
    """One argmax over the whole array: 1 or 0, whatever the rows say."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["argmax_agreement"] = float(a.argmax() == b.argmax())
    return out


def cmp_no_shape_check(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("reference or candidate holds NaN or inf")
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_size_check(reference, candidate):
    """Compares the number of elements: a transposed array passes."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if a.size != b.size:
        raise ValueError(f"sizes differ: {a.shape} vs {b.shape}")
    b = b.reshape(a.shape)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("reference or candidate holds NaN or inf")
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_no_finite_check(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_nan_skipped(reference, candidate):
    """nanmax / nanmean: a broken output disappears from the report."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    d = np.abs(a - b)
    with np.errstate(invalid="ignore"):
        return {
            "max_abs": float(np.nanmax(d[np.isfinite(d)])),
            "mean_abs": float(np.nanmean(d[np.isfinite(d)])),
            "min_row_cosine": float(np.nanmin(_row_cos(a, b))),
            "argmax_agreement": float((a.argmax(1) == b.argmax(1)).mean()),
        }


def cmp_finite_check_only_candidate(reference, candidate):
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    if not np.isfinite(b).all():
        raise ValueError("the candidate holds NaN or inf")
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_assertion(reference, candidate):
    """assert instead of raise ValueError."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    assert np.isfinite(a).all() and np.isfinite(b).all(), "NaN or inf"
    return _report(a, b, _row_cos(a, b).min(), (a.argmax(1) == b.argmax(1)).mean())


def cmp_finite_diff_check(reference, candidate):
    """Checks the difference rather than the inputs, without float64: fp16 extremes that differ overflow and
    are refused, and the error cannot say which input is broken."""
    a, b = np.asarray(reference), np.asarray(candidate)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    if not np.isfinite(a - b).all():
        raise ValueError("non-finite difference")
    return compare_outputs(reference, candidate)


def cmp_names_both(reference, candidate):
    """Refuses a NaN or inf in either array with one message naming both: it never says which is broken."""
    a, b = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: reference {a.shape}, candidate {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("the reference or the candidate holds NaN or inf")
    return compare_outputs(reference, candidate)


def cmp_numpy_scalars(reference, candidate):
    a, b = np.asarray(reference), np.asarray(candidate)
    out = compare_outputs(reference, candidate)
    out["max_abs"] = np.abs(a.astype(np.float64) - b.astype(np.float64)).max().astype(a.dtype)
    return out


def cmp_in_place(reference, candidate):
    """Normalises the caller's arrays in place."""
    out = compare_outputs(reference, candidate)
    candidate /= np.linalg.norm(candidate, axis=1, keepdims=True)
    return out


def stub(*a, **k):
    raise NotImplementedError("write it")


def test_right_answers_pass():
    for fn in (compare_outputs, compare_alt):
        E.check_differences(fn)
        E.check_cosine_and_agreement(fn)
        E.check_refuses_bad_input(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (E.check_differences, cmp_no_cast, "does not fit in fp16 .*cast both to float64"),
        (E.check_differences, cmp_cast_float32, r"mean_abs should be .*in fp32 about 7; cast to float64 first"),
        (E.check_differences, cmp_signed_max, "a negative difference counts as much"),
        (E.check_differences, cmp_signed_mean, "signed differences cancel"),
        (E.check_differences, cmp_numpy_scalars, "should be a plain Python float"),
        (E.check_differences, cmp_in_place, "changed an input array in place"),
        (E.check_cosine_and_agreement, cmp_mean_cosine, "then the smallest"),
        (E.check_cosine_and_agreement, cmp_flat_cosine, "then the smallest"),
        (E.check_cosine_and_agreement, cmp_column_cosine, "one cosine per row"),
        (E.check_cosine_and_agreement, cmp_abs_cosine, "signed .not its absolute value"),
        (E.check_cosine_and_agreement, cmp_agreement_count, "argmax_agreement should be 0.8; got 4.0"),
        (E.check_cosine_and_agreement, cmp_agreement_axis0, "argmax_agreement should be 0.8; got 1.0"),
        (E.check_cosine_and_agreement, cmp_agreement_flat, "argmax_agreement should be 0.8; got 1.0"),
        (
            E.check_refuses_bad_input,
            cmp_no_shape_check,
            r"reference \(4, 3\) against candidate \(4, 1\): "
            "compare_outputs returned",
        ),
        (E.check_refuses_bad_input, cmp_size_check, r"against candidate \(3, 4\): compare_outputs returned"),
        (E.check_refuses_bad_input, cmp_no_finite_check, "nan at .2, 1. of the candidate: compare_outputs returned"),
        (E.check_refuses_bad_input, cmp_nan_skipped, "nan at .2, 1. of the candidate: compare_outputs returned"),
        (
            E.check_refuses_bad_input,
            cmp_finite_check_only_candidate,
            "-inf at .2, 1. of the reference: compare_outputs",
        ),
        (E.check_refuses_bad_input, cmp_assertion, "raise ValueError; your code raised AssertionError"),
        (E.check_refuses_bad_input, cmp_finite_diff_check, "should name candidate"),
        (E.check_refuses_bad_input, cmp_names_both, "refused with the same message.*say which of the two"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_the_fp16_trap_is_real():
    a = np.array([[60000.0, 1.0]], dtype=np.float16)
    with np.errstate(over="ignore"):
        assert np.isinf(a - (-a))[0, 0] and a.dtype == (a - (-a)).dtype


def test_finite_diff_check_also_fails_on_fp16_extremes():
    with pytest.raises(LabCheckFailed):
        E.check_differences(cmp_finite_diff_check)


@pytest.mark.parametrize("chk", [E.check_differences, E.check_cosine_and_agreement, E.check_refuses_bad_input])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


# --------------------------------------------------------------------------- the differential check (issue 42)


def agreement_integer_division(reference, candidate):
    """Units and rounding: the agreeing rows counted, then divided with //: 0 unless every row agrees."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["argmax_agreement"] = float(int((a.argmax(1) == b.argmax(1)).sum()) // len(a))
    return out


def rounded_to_six_digits(reference, candidate):
    """Units and rounding: every figure rounded to 6 decimals ("a report shows 6 digits"), so 1e-7 reads as 0."""
    return {k: round(v, 6) for k, v in compare_outputs(reference, candidate).items()}


def refuses_fp16_max(reference, candidate):
    """Boundaries: takes fp16's largest finite value (65504) for an overflow: >= where only inf is out."""
    for name, x in (("reference", reference), ("candidate", candidate)):
        if (np.abs(np.asarray(x, np.float64)) >= 65504).any():
            raise ValueError(f"the {name} overflows fp16")
    return compare_outputs(reference, candidate)


def squeezes_first(reference, candidate):
    """Boundaries: np.squeeze "to drop the batch axis": with one class (C = 1) each row's cosine becomes one
    cosine of the whole column."""
    a, b = np.squeeze(np.asarray(reference, np.float64)), np.squeeze(np.asarray(candidate, np.float64))
    _validate(a, b)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    d = np.abs(a - b)
    agree = np.mean(np.atleast_1d(a.argmax(-1) == b.argmax(-1))) if a.ndim > 1 or len(a) == 1 else 1.0
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_row_cosine": float(np.min(cos)),
        "argmax_agreement": float(agree),
    }


def normalises_the_callers_rows(reference, candidate):
    """State: np.asarray(x, float64) is the caller's own array when it is float64 already; /= then rescales it."""
    out = compare_outputs(reference, candidate)
    a = np.asarray(reference, np.float64)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    return out


def subtracts_into_the_reference(reference, candidate):
    """State: np.subtract(a, b, out=a) "to save memory", where a is the caller's float64 reference."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    _validate(a, b)
    cos = _row_cos(a, b).min()
    agree = (a.argmax(1) == b.argmax(1)).mean()
    d = np.abs(np.subtract(a, b, out=a))
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_row_cosine": float(cos),
        "argmax_agreement": float(agree),
    }


def sorts_each_row(reference, candidate):
    """Order: sorts each row's values before the cosine ("align them"), which forgets which class is which."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    out = compare_outputs(reference, candidate)
    out["min_row_cosine"] = float(_row_cos(np.sort(a, axis=1), np.sort(b, axis=1)).min())
    return out


def agreement_rounded(reference, candidate):
    """Units and rounding: the agreement rounded to 3 digits for the report (2 of 3 rows reads 0.667)."""
    out = compare_outputs(reference, candidate)
    out["argmax_agreement"] = round(out["argmax_agreement"], 3)
    return out


def squeezes_after_checking(reference, candidate):
    """Boundaries: validates the (N, C) arrays, then np.squeeze "to drop a batch axis of 1": with one class
    (C = 1) the rows' cosines become one cosine of the whole column and the argmax runs over the rows."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    _validate(a, b)
    a, b = np.squeeze(a), np.squeeze(b)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    d = np.abs(a - b)
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_row_cosine": float(np.min(cos)),
        "argmax_agreement": float(np.mean(a.argmax(-1) == b.argmax(-1))),
    }


_NORMS = {}


def caches_reference_norms(reference, candidate):
    """State: the reference's row norms kept between calls, keyed by its shape ("the reference does not change"),
    so another reference of the same shape is measured with the old norms."""
    a, b = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    _validate(a, b)
    norms = _NORMS.setdefault(a.shape, np.linalg.norm(a, axis=1))
    d = np.abs(a - b)
    return {
        "max_abs": float(d.max()),
        "mean_abs": float(d.mean()),
        "min_row_cosine": float(((a * b).sum(1) / (norms * np.linalg.norm(b, axis=1))).min()),
        "argmax_agreement": float((a.argmax(1) == b.argmax(1)).mean()),
    }


NEW_WRONG = [
    agreement_rounded,
    squeezes_after_checking,
    caches_reference_norms,
    agreement_integer_division,
    rounded_to_six_digits,
    refuses_fp16_max,
    squeezes_first,
    normalises_the_callers_rows,
    subtracts_into_the_reference,
    sorts_each_row,
]

OLD_WRONG = [
    cmp_no_cast,
    cmp_cast_float32,
    cmp_signed_max,
    cmp_signed_mean,
    cmp_mean_cosine,
    cmp_abs_cosine,
    cmp_flat_cosine,
    cmp_column_cosine,
    cmp_agreement_count,
    cmp_agreement_axis0,
    cmp_agreement_flat,
    cmp_no_shape_check,
    cmp_size_check,
    cmp_no_finite_check,
    cmp_nan_skipped,
    cmp_finite_check_only_candidate,
    cmp_assertion,
    cmp_finite_diff_check,
    cmp_in_place,
]


def test_right_answers_agree_with_the_reference():
    for fn in (compare_outputs, compare_alt):
        E.check_same_as_reference(fn)


def test_the_reference_passes_every_check():
    for chk in (E.check_differences, E.check_cosine_and_agreement, E.check_refuses_bad_input):
        chk(E._reference_compare_outputs)


@pytest.mark.parametrize("wrong", OLD_WRONG + NEW_WRONG)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    _NORMS.clear()
    with pytest.raises(LabCheckFailed, match="where the two differ|changed its input|on reference="):
        E.check_same_as_reference(wrong)


def test_numpy_scalars_and_error_words_are_left_to_the_other_checks():
    """The differential check compares values (a float16 max_abs equal to the reference's passes it) and error
    types, not the words: a plain float and a message naming the array are check_differences' and
    check_refuses_bad_input's to judge."""
    with pytest.raises(LabCheckFailed, match="plain Python float"):
        E.check_differences(cmp_numpy_scalars)


@pytest.mark.parametrize("wrong", [agreement_rounded, squeezes_after_checking, caches_reference_norms])
def test_the_old_checks_miss_what_the_differential_check_catches(wrong):
    """These got past the hand-picked cases: an agreement of 2/3, one class (C = 1), a second reference of a
    shape seen before."""
    _NORMS.clear()
    for chk in (E.check_differences, E.check_cosine_and_agreement, E.check_refuses_bad_input):
        chk(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        E.check_same_as_reference(agreement_integer_division)
    assert "reference=np.array(" in str(e.value) and "where the reference's is" in str(e.value)


def test_the_stub_fails_the_differential_check():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        E.check_same_as_reference(stub)
