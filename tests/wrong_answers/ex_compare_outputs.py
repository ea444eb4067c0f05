"""Independent wrong answers for ex_compare_outputs, written from labs/2_engine/ex_compare_outputs.ipynb's contract
alone."""

import numpy as np


def compare_outputs(reference, candidate):
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


def _metrics(ref, cand):
    diff = np.abs(ref - cand)
    cosines = (ref * cand).sum(axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1))
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "min_row_cosine": float(cosines.min()),
        "argmax_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
    }


def _validated(reference, candidate, dtype=np.float64):
    ref = np.asarray(reference, dtype=dtype)
    cand = np.asarray(candidate, dtype=dtype)
    if ref.shape != cand.shape:
        raise ValueError(f"shapes differ: reference {ref.shape}, candidate {cand.shape}")
    for name, x in (("reference", ref), ("candidate", cand)):
        if not np.isfinite(x).all():
            raise ValueError(f"the {name} holds NaN or inf")
    return ref, cand


def works_in_float32(reference, candidate):
    """Casts both arrays to float32 ('wide enough for fp16'), so differences and means carry float32 rounding."""
    # differs on: ref [[1.0, 0.0]], cand [[1.0 + 1e-9, 0.0]] (float64) -> right max_abs 1e-9, wrong 0.0
    ref, cand = _validated(reference, candidate, dtype=np.float32)
    return _metrics(ref, cand)


def one_cosine_for_everything(reference, candidate):
    """Takes the cosine of the two whole arrays, flattened, as 'the' row cosine instead of the smallest per-row one."""
    # differs on: ref [[1, 0], [0, 1]], cand [[1, 0], [0, -1]] -> right min_row_cosine -1.0, wrong 0.0
    ref, cand = _validated(reference, candidate)
    out = _metrics(ref, cand)
    a, b = ref.ravel(), cand.ravel()
    out["min_row_cosine"] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return out


def agreement_as_count(reference, candidate):
    """Reports argmax agreement as the number of agreeing rows instead of their fraction."""
    # differs on: ref [[1, 0], [0, 1]], cand [[1, 0], [1, 0]] -> right 0.5, wrong 1.0
    ref, cand = _validated(reference, candidate)
    out = _metrics(ref, cand)
    out["argmax_agreement"] = float((ref.argmax(axis=1) == cand.argmax(axis=1)).sum())
    return out


def compares_element_counts(reference, candidate):
    """Checks that the two arrays hold the same number of elements instead of the same shape, so (1, 6) against
    (6, 1) broadcasts into a (6, 6) comparison."""
    # differs on: ref np.ones((1, 6)), cand np.ones((6, 1)) -> right ValueError, wrong a result
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.size != cand.size:
        raise ValueError(f"sizes differ: reference {ref.shape}, candidate {cand.shape}")
    for name, x in (("reference", ref), ("candidate", cand)):
        if not np.isfinite(x).all():
            raise ValueError(f"the {name} holds NaN or inf")
    return _metrics(ref, cand)


def refuses_nan_only(reference, candidate):
    """Refuses NaN with np.isnan but lets an infinity through."""
    # differs on: ref [[1.0, 2.0]], cand [[1.0, inf]] -> right ValueError, wrong max_abs inf
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape:
        raise ValueError(f"shapes differ: reference {ref.shape}, candidate {cand.shape}")
    for name, x in (("reference", ref), ("candidate", cand)):
        if np.isnan(x).any():
            raise ValueError(f"the {name} holds NaN")
    with np.errstate(all="ignore"):
        return _metrics(ref, cand)


def asserts_instead_of_raising(reference, candidate):
    """Guards the inputs with assert statements, which raise AssertionError, not ValueError."""
    # differs on: ref np.ones((2, 3)), cand np.ones((3, 2)) -> right ValueError, wrong AssertionError
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    assert ref.shape == cand.shape, f"shapes differ: reference {ref.shape}, candidate {cand.shape}"
    assert np.isfinite(ref).all(), "the reference holds NaN or inf"
    assert np.isfinite(cand).all(), "the candidate holds NaN or inf"
    return _metrics(ref, cand)


RIGHT = {"compare_outputs": compare_outputs}
WRONG = [
    ("compare_outputs", works_in_float32, "units/rounding"),
    ("compare_outputs", one_cosine_for_everything, "misread prose"),
    ("compare_outputs", agreement_as_count, "units/rounding"),
    ("compare_outputs", compares_element_counts, "boundaries"),
    ("compare_outputs", refuses_nan_only, "error handling"),
    ("compare_outputs", asserts_instead_of_raising, "error handling"),
]
