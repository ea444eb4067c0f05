"""Exercise checks: how far a lower-precision model's outputs are from the FP32 reference (topic E3).

The learner writes one function:
  compare_outputs(reference, candidate) -> {"max_abs", "mean_abs", "min_row_cosine", "argmax_agreement"}
      for two (N, C) float arrays of any float dtype (fp16, fp32, fp64; the two may differ): the largest and the
      mean absolute element-wise difference, the smallest cosine similarity between a row of one and the same
      row of the other, and the fraction of rows whose argmax (the predicted class) is the same. The arithmetic
      is done in float64. Arrays of different shapes raise ValueError naming both shapes; a NaN or an infinity
      in either raises ValueError naming the array that holds it - a report must never print a fine-looking
      number for outputs that are broken.

The checks are derived from what the function must guarantee:
  max_abs / mean_abs: absolute values (the largest difference is negative; signed differences cancel in a
      mean), over all elements; zero for identical arrays; plain floats; in float64 - two finite fp16 arrays
      whose difference (120000) does not fit in fp16 (max 65504) give 120000, not inf, and a mean over fp16
      inputs is not rounded to fp16.
  min_row_cosine: per row (N != C, so a per-column version gives another number), the minimum over rows (not
      the mean, not one cosine of the flattened arrays), signed (an opposite row gives -1, not 1), scale-free
      (a row times 2 has cosine 1 while max_abs is large).
  argmax_agreement: a fraction of rows in 0..1 (not a count), per row (not per column), with a single row.
  errors: shapes that differ but broadcast ((N, C) against (N, 1) or (1, C)) or that hold the same number of
      elements transposed raise ValueError naming both shapes; NaN or +-inf in the candidate or the reference
      raises ValueError naming which one; finite fp16 extremes (65504) are no error.
"""

from __future__ import annotations

import math

import numpy as np

from ailab.labs.core import check, expect

LAB = "ex_compare_outputs"

KEYS = ("max_abs", "mean_abs", "min_row_cosine", "argmax_agreement")


def _compare(fn, reference, candidate, what):
    ref_before, cand_before = reference.copy(), candidate.copy()
    out = fn(reference, candidate)
    expect(
        isinstance(out, dict) and set(KEYS) <= set(out),
        f"{what}: compare_outputs should return a dict with the keys {list(KEYS)}; got "
        f"{sorted(out) if isinstance(out, dict) else type(out).__name__}",
    )
    for k in KEYS:
        expect(
            isinstance(out[k], float),
            f"{what}: out[{k!r}] should be a plain Python float (float(...)); got {type(out[k]).__name__} {out[k]!r}",
        )
    expect(
        np.array_equal(reference, ref_before) and np.array_equal(candidate, cand_before),
        f"{what}: compare_outputs changed an input array in place; compute on copies",
    )
    return out


def _close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


@check(LAB, "max_abs and mean_abs: absolute differences, computed in float64")
def check_differences(compare_outputs):
    ref = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    cand = ref + np.array([[0.1, -0.5, 0.0], [0.0, 0.0, 0.2]])
    out = _compare(compare_outputs, ref, cand, "(2, 3) float64, differences +0.1, -0.5 and +0.2")
    expect(
        _close(out["max_abs"], 0.5, 1e-6),
        f"the differences are +0.1, -0.5, +0.2 (and zeros): max_abs is the largest "
        f"absolute difference, 0.5; got {out['max_abs']:.6g} - a negative "
        "difference counts as much as a positive one",
    )
    expect(
        _close(out["mean_abs"], 0.8 / 6, 1e-6),
        f"mean_abs is the mean of the 6 absolute differences, 0.8 / 6 = "
        f"{0.8 / 6:.6g}; got {out['mean_abs']:.6g} - signed differences cancel "
        "in a mean, absolute ones do not",
    )
    out = _compare(compare_outputs, ref, ref.copy(), "identical arrays")
    expect(
        out["max_abs"] == 0.0 and out["mean_abs"] == 0.0,
        f"identical arrays: max_abs and mean_abs should be 0.0; got {out['max_abs']!r}, {out['mean_abs']!r}",
    )
    expect(
        _close(out["argmax_agreement"], 1.0) and _close(out["min_row_cosine"], 1.0, 1e-6),
        f"identical arrays: argmax_agreement and min_row_cosine should be 1.0; got {out['argmax_agreement']!r}, "
        f"{out['min_row_cosine']!r}",
    )
    ref16 = np.array([[60000.0, 1.0], [-60000.0, 2.0]], dtype=np.float16)
    cand16 = np.array([[-60000.0, 1.0], [60000.0, 2.0]], dtype=np.float16)
    out = _compare(compare_outputs, ref16, cand16, "fp16 inputs of +-60000 (finite; fp16's largest is 65504)")
    expect(
        _close(out["max_abs"], 120000.0),
        f"fp16 arrays with 60000 against -60000: the true difference is "
        f"120000, which does not fit in fp16 (it becomes inf); got max_abs "
        f"{out['max_abs']!r} - cast both to float64 before subtracting",
    )
    expect(
        _close(out["mean_abs"], 60000.0) and _close(out["min_row_cosine"], -1.0, 1e-6),
        f"fp16 +-60000: mean_abs should be 60000 and min_row_cosine about -1 (the rows point opposite ways); got "
        f"{out['mean_abs']!r} and {out['min_row_cosine']!r} - do all the arithmetic in float64",
    )
    rng = np.random.default_rng(0)
    ref16 = rng.normal(0, 1, (64, 33)).astype(np.float16)
    cand16 = (ref16.astype(np.float64) + rng.normal(0, 1e-3, ref16.shape)).astype(np.float16)
    diff = np.abs(ref16.astype(np.float64) - cand16.astype(np.float64))
    out = _compare(compare_outputs, ref16, cand16, "(64, 33) fp16 arrays with small differences")
    expect(
        _close(out["mean_abs"], float(diff.mean()), 1e-9),
        f"(64, 33) fp16 arrays: mean_abs should be {diff.mean():.9g}; got {out['mean_abs']:.9g} - a mean "
        "computed in fp16 keeps about 3 significant digits, in fp32 about 7; cast to float64 first",
    )
    a32 = rng.normal(0, 1, (5, 7)).astype(np.float32)
    b64 = a32.astype(np.float64) + 0.25
    out = _compare(compare_outputs, a32, b64, "a float32 reference against a float64 candidate (+0.25 everywhere)")
    expect(
        _close(out["max_abs"], 0.25) and _close(out["mean_abs"], 0.25),
        f"float32 against float64 + 0.25: max_abs and mean_abs should both be 0.25; got {out['max_abs']!r}, "
        f"{out['mean_abs']!r}",
    )


@check(LAB, "min_row_cosine per row, signed; argmax_agreement a fraction of rows")
def check_cosine_and_agreement(compare_outputs):
    ref = np.array([[1.0, 0.5, 0.2, 1.0], [0.3, 1.0, 1.0, 0.1], [1.0, 1.0, 0.4, 0.2]])
    cand = np.array([[2.0, 1.0, 0.4, 2.0], [0.3, 1.0, 1.0, 0.1], [1.0, 0.0, 0.4, 0.2]])
    low = math.sqrt(1.2 / 2.2)
    out = _compare(compare_outputs, ref, cand, "(3, 4): row 0 doubled, row 1 equal, row 2 loses its second value")
    expect(
        _close(out["min_row_cosine"], low, 1e-9),
        f"(3, 4): the row cosines are 1 (row 0 doubled: same direction), 1 and {low:.4f} (row 2), so "
        f"min_row_cosine should be {low:.4f}; got {out['min_row_cosine']:.6g} - one cosine per row (across its C "
        "values), then the smallest",
    )
    expect(
        _close(out["max_abs"], 1.0),
        f"row 0 doubled differs by up to 1.0: max_abs should be 1.0 (the cosine "
        f"ignores scale, max_abs does not); got {out['max_abs']:.6g}",
    )
    ref = np.array([[3.0, 1.0], [1.0, 2.0], [0.5, 0.25], [2.0, 5.0], [4.0, 1.0]])
    cand = np.array([[3.0, 1.1], [1.0, 2.0], [-0.5, -0.25], [2.0, 5.0], [4.1, 1.0]])
    out = _compare(compare_outputs, ref, cand, "(5, 2): row 2 points the opposite way")
    expect(
        _close(out["min_row_cosine"], -1.0, 1e-9),
        f"row 2 of the candidate is minus row 2 of the reference: its cosine is -1, so min_row_cosine should be "
        f"-1; got {out['min_row_cosine']:.6g} - the smallest row cosine, signed (not its absolute value, not "
        "the mean over rows, not one cosine of the whole arrays)",
    )
    expect(
        _close(out["argmax_agreement"], 0.8),
        f"argmax per row: reference [0, 1, 0, 1, 0], candidate [0, 1, 1, 1, 0] - 4 of 5 rows agree, so "
        f"argmax_agreement should be 0.8; got {out['argmax_agreement']!r} - the fraction of rows whose largest "
        "value is in the same column",
    )
    ref = np.array([[0.1, 0.9, 0.3], [0.8, 0.1, 0.4], [0.2, 0.3, 0.7], [0.6, 0.5, 0.1]])
    cand = np.array([[0.2, 0.9, 0.1], [0.1, 0.8, 0.4], [0.7, 0.3, 0.2], [0.6, 0.5, 0.1]])
    out = _compare(compare_outputs, ref, cand, "(4, 3): argmax per row [1, 0, 2, 0] against [1, 1, 0, 0]")
    expect(
        _close(out["argmax_agreement"], 0.5),
        f"(4, 3): the rows' argmax are [1, 0, 2, 0] and [1, 1, 0, 0], 2 of 4 agree: argmax_agreement should be 0.5; "
        f"got {out['argmax_agreement']!r} - take the argmax along each row (over the C classes)",
    )
    out = _compare(compare_outputs, np.array([[0.2, 0.8]]), np.array([[0.7, 0.3]]), "a single row, argmax 1 vs 0")
    expect(
        out["argmax_agreement"] == 0.0,
        f"a single row whose argmax differs: argmax_agreement should be 0.0; got {out['argmax_agreement']!r}",
    )


def _refused(compare_outputs, reference, candidate, what, must_name):
    try:
        out = compare_outputs(reference, candidate)
    except NotImplementedError:
        raise
    except ValueError as e:
        missing = [m for m in must_name if m not in str(e)]
        expect(not missing, f"{what}: the ValueError should name {' and '.join(must_name)}; its message is {str(e)!r}")
    except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this check names
        expect(False, f"{what}: raise ValueError; your code raised {type(e).__name__}: {e}")
    else:
        expect(
            False,
            f"{what}: compare_outputs returned {out!r}; it must raise ValueError - a number computed from "
            "these arrays would look like a result",
        )


@check(LAB, "refuses different shapes and non-finite values")
def check_refuses_bad_input(compare_outputs):
    rng = np.random.default_rng(1)
    ref = rng.normal(0, 1, (4, 3))
    for cand in (
        rng.normal(0, 1, (4, 1)),
        rng.normal(0, 1, (1, 3)),
        rng.normal(0, 1, (3, 4)),
        rng.normal(0, 1, (4, 4)),
    ):
        _refused(
            compare_outputs,
            ref,
            cand,
            f"reference {ref.shape} against candidate {cand.shape}",
            [str(ref.shape), str(cand.shape)],
        )
    for bad, where in [(np.nan, "candidate"), (np.inf, "candidate"), (-np.inf, "reference"), (np.nan, "reference")]:
        a, b = ref.copy(), ref + 0.01
        (b if where == "candidate" else a)[2, 1] = bad
        _refused(compare_outputs, a, b, f"{bad} at [2, 1] of the {where}", [where])
    half = np.array([[65504.0, 1.0], [-65504.0, 3.0]], dtype=np.float16)
    out = _compare(compare_outputs, half, half.copy(), "finite fp16 extremes (65504, fp16's largest value)")
    expect(
        out["max_abs"] == 0.0, f"finite fp16 extremes are valid outputs: max_abs should be 0.0; got {out['max_abs']!r}"
    )
