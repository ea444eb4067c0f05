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
  against a reference (the solution) on generated pairs: (N, C) with N and C from 1 to 6, each side fp16, fp32
  or fp64, values up to 65504, rows equal, nudged, scaled, opposite or with their top class swapped, C- or
  Fortran-ordered, now and then another shape or a NaN / inf in either; the four figures must match to 1e-9 (or
  a ValueError be raised where the reference raises one). Rows that tie for their top value or are all zero
  are never drawn: the contract leaves them open.
"""

from __future__ import annotations

import math

import numpy as np

from ailab.labs.core import check, expect
from ailab.labs.differential import close, same_as_reference, short

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
        return str(e)
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
    said = {}
    for bad, where in [(np.nan, "candidate"), (np.inf, "candidate"), (-np.inf, "reference"), (np.nan, "reference")]:
        a, b = ref.copy(), ref + 0.01
        (b if where == "candidate" else a)[2, 1] = bad
        said[(str(bad), where)] = _refused(compare_outputs, a, b, f"{bad} at [2, 1] of the {where}", [where])
    # A message naming both ("the reference or the candidate holds NaN") names neither: it must tell them apart.
    expect(
        said[("nan", "candidate")] != said[("nan", "reference")],
        f"a NaN in the candidate and a NaN in the reference were refused with the same message "
        f"{said[('nan', 'candidate')]!r}: say which of the two holds it",
    )
    half = np.array([[65504.0, 1.0], [-65504.0, 3.0]], dtype=np.float16)
    out = _compare(compare_outputs, half, half.copy(), "finite fp16 extremes (65504, fp16's largest value)")
    expect(
        out["max_abs"] == 0.0, f"finite fp16 extremes are valid outputs: max_abs should be 0.0; got {out['max_abs']!r}"
    )


# --------------------------------------------------------------------------- the differential check (issue 42)


def _reference_compare_outputs(reference, candidate):
    """The solution: float64 copies, shapes then finiteness refused, then the four figures."""
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape:
        raise ValueError(f"shapes differ: reference {ref.shape}, candidate {cand.shape}")
    for name, x in (("reference", ref), ("candidate", cand)):
        if not np.isfinite(x).all():
            raise ValueError(f"the {name} holds NaN or inf: its outputs are broken, not close or far")
    diff = np.abs(ref - cand)
    cosines = (ref * cand).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1))
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "min_row_cosine": float(cosines.min()),
        "argmax_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
    }


_DTYPES = (np.float64, np.float32, np.float16)
_SCALES = (1.0, 0.25, 7.0, 8000.0, 8188.0)  # 8 * 8188 = 65504, fp16's largest finite value
_ROW_MOVES = ("same", "same", "nudge", "nudge", "double", "half", "opposite", "swap", "shift")
_BREAKS = ("transposed", "one column", "one row", "one more column", "nan", "inf", "-inf")


def _output_pairs():
    """Hypothesis: (reference, candidate) - (N, C) with N, C from 1 to 6 (N = 1, C = 1, N != C), each of fp16,
    fp32 or fp64 on its own, values up to fp16's 65504, rows the same, nudged, scaled, opposite or with their top
    class swapped, C- or F-ordered; now and then another shape or a NaN / inf in either. Rows never tie for their
    largest value and are never all zero (the contract leaves both open)."""
    from hypothesis import assume
    from hypothesis import strategies as st

    row = st.tuples(
        st.lists(st.integers(-8, 8), min_size=6, max_size=6, unique=True),
        st.integers(0, len(_ROW_MOVES) - 1),
        st.sampled_from([1e-3, 0.01, 0.3, -0.3]),
        st.integers(0, 5),
    )

    @st.composite
    def draw(d):
        n, c = d(st.integers(1, 6)), d(st.integers(1, 6))
        scale = d(st.sampled_from(_SCALES))
        rows = d(st.lists(row, min_size=n, max_size=n))
        ref = np.array([[v or 1 for v in values[:c]] if c == 1 else values[:c] for values, *_ in rows], float)
        ref *= scale
        cand = ref.copy()
        for i, (_, move, step, j) in enumerate(rows):
            how = _ROW_MOVES[move]
            if how == "nudge":
                cand[i, j % c] += step * max(1.0, scale / 100)
            elif how in ("double", "half", "opposite"):
                cand[i] *= {"double": 2.0, "half": 0.5, "opposite": -1.0}[how]
            elif how == "swap" and c > 1:  # the top class changes place with another one
                top, other = int(cand[i].argmax()), j % c
                cand[i, [top, other]] = cand[i, [other, top]]
            elif how == "shift":  # every value moved by the same step
                cand[i] += step
        kinds = d(st.tuples(*[st.integers(0, 2)] * 2))
        if scale == 8188.0 and 2 in kinds and d(st.booleans()):
            cand = np.clip(cand, -65504.0, 65504.0)  # doubled fp16 extremes would not be finite fp16 inputs
        a, b = ref.astype(_DTYPES[kinds[0]]), np.clip(cand, -65504.0, 65504.0).astype(_DTYPES[kinds[1]])
        for x in (a, b):
            x64 = x.astype(np.float64)
            assume((np.linalg.norm(x64, axis=1) > 0).all())
            assume(((x64 == x64.max(axis=1, keepdims=True)).sum(axis=1) == 1).all())  # no tie for the top
        broken = d(st.integers(0, 3 * len(_BREAKS)))
        if broken < len(_BREAKS):
            how, at = _BREAKS[broken], d(st.tuples(st.booleans(), st.integers(0, 35)))
            if how == "transposed":
                b = b.T.copy()
            elif how == "one column":
                b = b[:, :1].copy()
            elif how == "one row":
                b = b[:1].copy()
            elif how == "one more column":
                b = np.concatenate([b, b[:, :1]], axis=1)
            else:
                x = a if at[0] else b
                x.flat[at[1] % x.size] = float(how)
        if d(st.booleans()):
            a, b = (np.asfortranarray(a), b) if d(st.booleans()) else (a, np.asfortranarray(b))
        return a, b

    return draw()


def _same_figures(mine, ref):
    """The four figures to 1e-9 (float64 arithmetic in another order differs by far less), extra keys ignored."""
    if not isinstance(mine, dict) or not set(KEYS) <= set(mine):
        return f"your answer should be a dict with the keys {list(KEYS)}; got {short(mine)}"
    return close(rel=1e-9, abs_=1e-12)({k: mine[k] for k in KEYS}, ref)


def _describe_arrays(reference, candidate):
    def one(x):
        order = ", Fortran order" if x.flags.f_contiguous and not x.flags.c_contiguous else ""
        return f"np.array({x.tolist()}, dtype={x.dtype}{order})"

    return f"reference={one(reference)}, candidate={one(candidate)}"


@check(LAB, "agrees with the reference on every pair of outputs tried")
def check_same_as_reference(compare_outputs):
    same_as_reference(
        compare_outputs,
        _reference_compare_outputs,
        _output_pairs(),
        describe=_describe_arrays,
        compare=_same_figures,
        edges=[
            (np.array([[2.0], [-3.0]]), np.array([[2.5], [3.0]])),  # one class: the cosine of a row is its sign
            (np.array([[1.0, 2.0, 3.0]]), np.array([[3.0, 2.0, 1.0]])),  # a single row
            (np.array([[1e-3, 2e-3], [3.0, 1.0]]), np.array([[1.1e-3, 2e-3], [3.0, 1.0 + 1e-7]])),  # small figures
            (  # finite fp16 outputs whose difference (120000) does not fit in fp16
                np.array([[60000.0, 1.0], [-60000.0, 2.0]], dtype=np.float16),
                np.array([[-60000.0, 1.0], [60000.0, 2.0]], dtype=np.float16),
            ),
        ],
        arg_names=("reference", "candidate"),
        examples=200,
    )
