"""Exercise checks: the roofline - how fast an operation can go, and what limits it (topic H5).

The learner writes
  attainable_gflops(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s)
      the roofline: min(peak, bandwidth x intensity) in GFLOP/s (GB/s x FLOP/byte is already GFLOP/s), for one
      intensity (a number back) or a numpy array of them (an array of the same shape back, element by element).
  bound(flops, bytes_moved, peak_gflops, bandwidth_gb_s) -> "memory" | "compute"
      "memory" when the operation's intensity flops / bytes_moved lies left of the ridge point
      peak / bandwidth, "compute" from the ridge point on (at the ridge both roofs meet and the peak is reached).

The checks are derived from what each function must guarantee:
  attainable_gflops: both sides of the ridge and the ridge itself, intensity 0, the arguments used (other
      machines: a CPU, a GPU whose ridge is far to the right), no unit conversion (GB/s and GFLOP/s in, GFLOP/s
      out), never above the peak; numpy arrays of 1 and 2 dimensions, an empty one and an integer one, returned as
      arrays of that shape; the input array unchanged; answers that are not whole numbers (68.5, 837.5, 3.125), so
      integer arithmetic cannot pass.
  bound: the direction (low intensity is memory-bound), the ridge both ways and at equality, the same op on two
      machines, raw FLOP and byte counts against GFLOP/s and GB/s (the 1e9 cancels), a true division on both sides
      (7 FLOP over 2 bytes is 3.5, not 3; 16 over 5 is 3.2 against a ridge of 13 / 4 = 3.25, which a floor division
      of both makes equal), int arguments, and exactly the two words.
  Then both against a reference written from this contract, on generated machines and operations: intensities 0,
  the ridge itself, infinity, ints, numpy scalars, arrays of 0 to 3 dimensions (empty, int, float32), the caller's
  array left unchanged; for bound, exact ties at the ridge (compute), intensities a hair either side of it, raw
  counts beyond 2**31 and 2**53. Where the ridge and the intensity differ by less than float rounding (1e-9), either
  word is accepted: different right formulas round differently there.
"""

from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np

from ailab.labs.core import check, expect
from ailab.labs.differential import close, short, same_as_reference

LAB = "ex_roofline"
CPU = {"peak_gflops": 200.0, "bandwidth_gb_s": 50.0}  # ridge at 4 FLOP/byte
GPU = {"peak_gflops": 989_000.0, "bandwidth_gb_s": 3350.0}  # an H100's bf16 peak and HBM3: ridge ~295 FLOP/byte


def _roof(i, peak, bw):
    return min(peak, bw * i)


def _scalar(fn, i, machine, what):
    out = fn(i, machine["peak_gflops"], machine["bandwidth_gb_s"])
    expect(
        np.ndim(out) == 0 and isinstance(np.asarray(out).item(), numbers.Real),
        f"{what}: attainable_gflops({i}, ...) should return one number for one intensity; got "
        f"{type(out).__name__} {out!r}",
    )
    return float(out)


def _units(got, want) -> str:
    if want and np.isclose(got, want * 1e9):
        return " That is 1e9 times too much: GB/s x FLOP/byte is already GFLOP/s, so no conversion is needed."
    if want and np.isclose(got, want * 2**30 / 1e9):
        return " Those are GiB/s: a GB is 1e9 bytes, and GB/s x FLOP/byte is already GFLOP/s."
    return ""


@check(LAB, "attainable_gflops: the roofline at one intensity")
def check_attainable_scalar(attainable_gflops):
    peak, bw = CPU["peak_gflops"], CPU["bandwidth_gb_s"]
    for i, label in [
        (0.5, "left of the ridge: the memory roof"),
        (1.0, "left of the ridge: the memory roof"),
        (4.0, "at the ridge point, where both roofs meet"),
        (8.0, "right of the ridge: the peak"),
        (1000.0, "far right of the ridge: the peak"),
        (0.0, "no FLOPs per byte at all"),
        (1.37, "left of the ridge, an answer that is not a whole number"),
        (3.999, "a hair left of the ridge"),
    ]:
        got, want = _scalar(attainable_gflops, i, CPU, f"intensity {i}"), _roof(i, peak, bw)
        expect(
            np.isclose(got, want),
            f"intensity {i} FLOP/byte on a machine with peak {peak:g} GFLOP/s and "
            f"{bw:g} GB/s ({label}): attainable is {want:g} GFLOP/s; got {got:g}." + _units(got, want),
        )
        expect(
            got <= peak * (1 + 1e-12),
            f"intensity {i}: {got:g} GFLOP/s is above the peak of {peak:g}: nothing "
            "runs faster than the processor's peak",
        )
    for machine, name in [
        (GPU, "a GPU (ridge near 295 FLOP/byte)"),
        ({"peak_gflops": 75.0, "bandwidth_gb_s": 12.5}, "a laptop CPU (ridge at 6)"),
    ]:
        for i in (0.25, 3.0, 100.0, 400.0):
            got = _scalar(attainable_gflops, i, machine, name)
            want = _roof(i, machine["peak_gflops"], machine["bandwidth_gb_s"])
            expect(
                np.isclose(got, want),
                f"{name}, peak {machine['peak_gflops']:g} GFLOP/s and "
                f"{machine['bandwidth_gb_s']:g} GB/s, intensity {i}: attainable is "
                f"{want:g} GFLOP/s; got {got:g} - use the peak and bandwidth you are "
                "given." + _units(got, want),
            )


@check(LAB, "attainable_gflops: numpy arrays of intensities")
def check_attainable_array(attainable_gflops):
    peak, bw = CPU["peak_gflops"], CPU["bandwidth_gb_s"]
    for xs, what in [
        (np.array([0.5, 2.0, 4.0, 16.0, 100.0]), "a 1-D array"),
        (np.logspace(-2, 3, 12).reshape(3, 4), "a 3 x 4 array"),
        (np.array([1, 2, 8]), "an integer array"),
        (np.array([7.5]), "a one-element array"),
        (np.array([], dtype=float), "an empty array"),
    ]:
        before = xs.copy()
        want = np.array([_roof(float(i), peak, bw) for i in xs.ravel()]).reshape(xs.shape)
        try:
            out = attainable_gflops(xs, peak, bw)
        except (ValueError, TypeError) as e:
            expect(
                False,
                f"{what} of intensities: your function raised {type(e).__name__}: {e}. Python's min() and "
                "comparisons such as `<` with an if give one answer for a whole array; the roofline is "
                "taken for each intensity, element by element (see numpy's element-wise functions)",
            )
        expect(
            isinstance(out, np.ndarray),
            f"{what} of intensities should give a numpy array back; got {type(out).__name__}",
        )
        expect(
            out.shape == xs.shape, f"{what} of shape {xs.shape} should give an array of the same shape; got {out.shape}"
        )
        expect(
            np.array_equal(xs, before),
            f"{what}: attainable_gflops() changed the array of intensities it was given; it should only read it",
        )
        expect(
            np.allclose(out, want),
            f"{what} of intensities {np.round(xs.ravel()[:6], 3).tolist()} (peak {peak:g}, "
            f"{bw:g} GB/s): expected {np.round(want.ravel()[:6], 3).tolist()}; got "
            f"{np.round(np.asarray(out, float).ravel()[:6], 3).tolist()}",
        )


def _bound(fn, flops, nbytes, machine, what):
    out = fn(flops, nbytes, machine["peak_gflops"], machine["bandwidth_gb_s"])
    expect(out in ("memory", "compute"), f"{what}: bound() should return exactly 'memory' or 'compute'; got {out!r}")
    return out


@check(LAB, "bound: which side of the ridge point")
def check_bound(bound):
    ridge = CPU["peak_gflops"] / CPU["bandwidth_gb_s"]
    for flops, nbytes, want, what in [
        (100, 100, "memory", "1 FLOP per byte, far left of the ridge at 4"),
        (1000, 100, "compute", "10 FLOP per byte, right of the ridge at 4"),
        (399, 100, "memory", "3.99 FLOP per byte, just left of the ridge at 4"),
        (401, 100, "compute", "4.01 FLOP per byte, just right of the ridge at 4"),
        (400, 100, "compute", "exactly at the ridge (4 FLOP per byte): the peak is reached there"),
        (1e6, 12e6, "memory", "an element-wise add: 1 FLOP per 12 bytes"),
        (2 * 1024**3, 3 * 1024**2 * 4, "compute", "a 1024 x 1024 fp32 matmul (about 171 FLOP per byte)"),
    ]:
        got = _bound(bound, flops, nbytes, CPU, what)
        expect(
            got == want,
            f"{what}: flops={flops:g}, bytes={nbytes:g} on peak {CPU['peak_gflops']:g} GFLOP/s, "
            f"{CPU['bandwidth_gb_s']:g} GB/s (ridge {ridge:g} FLOP/byte) is {want}-bound; got {got!r}",
        )
    got = _bound(bound, 2 * 1024**3, 3 * 1024**2 * 4, GPU, "the same matmul on a GPU")
    expect(
        got == "memory",
        "the same 1024 x 1024 matmul (about 171 FLOP per byte) on a GPU with peak 989,000 GFLOP/s "
        f"and 3,350 GB/s (ridge about 295) is memory-bound; got {got!r} - the ridge comes from "
        "the peak and bandwidth you are given",
    )
    got = _bound(bound, 7, 2, {"peak_gflops": 13.0, "bandwidth_gb_s": 4.0}, "7 FLOP over 2 bytes")
    expect(
        got == "compute",
        "7 FLOP over 2 bytes is 3.5 FLOP per byte, right of a ridge at 13 / 4 = 3.25: compute-"
        f"bound; got {got!r} (is a division rounding down somewhere?)",
    )
    got = _bound(bound, 16, 5, {"peak_gflops": 13, "bandwidth_gb_s": 4}, "16 FLOP over 5 bytes")
    expect(
        got == "memory",
        "16 FLOP over 5 bytes is 3.2 FLOP per byte, left of a ridge at 13 / 4 = 3.25: memory-bound; "
        f"got {got!r} (a division rounding down turns both into 3: divide with /, not //)",
    )
    got = _bound(bound, 5e9, 2e9, {"peak_gflops": 60.0, "bandwidth_gb_s": 20.0}, "5 GFLOP over 2 GB")
    expect(
        got == "memory",
        "5e9 FLOP over 2e9 bytes is 2.5 FLOP per byte; peak 60 GFLOP/s over 20 GB/s puts the "
        f"ridge at 3: memory-bound; got {got!r} (the 1e9 of GFLOP/s and of GB/s cancel)",
    )


def _reference_attainable(intensity, peak_gflops, bandwidth_gb_s):
    """The roofline of each intensity: a float for a number, a float array of the same shape for an array."""
    if isinstance(intensity, np.ndarray):
        return np.minimum(float(peak_gflops), float(bandwidth_gb_s) * intensity.astype(float))
    return min(float(peak_gflops), float(bandwidth_gb_s) * float(intensity))


def _machines():
    from hypothesis import strategies as st

    return st.tuples(
        st.one_of(st.sampled_from([200.0, 989_000.0, 13, 1.0]), st.floats(0.001, 2e6), st.integers(1, 2_000_000)),
        st.one_of(st.sampled_from([50.0, 3350.0, 4, 1.0]), st.floats(0.001, 1e5), st.integers(1, 100_000)),
    )


def _intensities():
    """Hypothesis: (intensity, peak, bandwidth): numbers of every kind, arrays of every shape, the ridge itself."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def draw(d):
        peak, bw = d(_machines())
        ridge = peak / bw
        one = st.one_of(
            st.sampled_from([0.0, 0, 1, ridge, ridge * (1 - 1e-6), ridge * (1 + 1e-6), 2 * ridge, float("inf")]),
            st.floats(0.0, 1e4),
            st.integers(0, 10_000),
        )
        kind = d(st.sampled_from(["float", "int", "np.float64", "np.int64", "array", "int array", "float32 array"]))
        if kind == "float":
            return float(d(one)), peak, bw
        if kind == "int":
            return d(st.integers(0, 10_000)), peak, bw
        if kind == "np.float64":
            return np.float64(d(one)), peak, bw
        if kind == "np.int64":
            return np.int64(d(st.integers(0, 10_000))), peak, bw
        shape = d(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
        if kind == "int array":
            return d(hnp.arrays(np.int64, shape, elements=st.integers(0, 10_000))), peak, bw
        dtype = np.float32 if kind == "float32 array" else np.float64
        values = st.one_of(st.floats(0.0, 1e4, width=32), st.sampled_from([0.0, float(np.float32(ridge)), 1.0]))
        return d(hnp.arrays(dtype, shape, elements=values)), peak, bw

    return draw()


def _same_roof(mine, ref) -> str | None:
    if isinstance(ref, np.ndarray):
        if not isinstance(mine, np.ndarray):
            return f"an array of intensities should give a numpy array back; got {type(mine).__name__} {short(mine)}"
        if mine.shape != ref.shape:
            return f"an array of shape {ref.shape} should give an array of the same shape; got {mine.shape}"
        try:
            mine = mine.astype(float)
        except (TypeError, ValueError):
            return f"your array should hold numbers (GFLOP/s); got {short(mine)}"
    else:
        if np.ndim(mine) != 0 or not isinstance(np.asarray(mine).item(), numbers.Real):
            return f"one intensity should give one number back, like {ref!r}; got {type(mine).__name__} {short(mine)}"
        mine = np.asarray(mine).item()
    return close(rel=1e-6, abs_=1e-9)(mine, ref)


@check(LAB, "attainable_gflops: the same roofline as the reference, numbers and arrays")
def check_attainable_same_as_reference(attainable_gflops):
    same_as_reference(
        attainable_gflops,
        _reference_attainable,
        _intensities(),
        describe=lambda i, peak, bw: f"attainable_gflops({short(i)}, peak_gflops={peak!r}, bandwidth_gb_s={bw!r})",
        compare=_same_roof,
        edges=[
            (np.array([0.5, 4.0, 16.0]), 200.0, 50.0),
            (0.0, 200.0, 50.0),
            (np.zeros((2, 0)), 200.0, 50.0),
        ],
        arg_names=("intensity_flop_per_byte", "peak_gflops", "bandwidth_gb_s"),
        examples=250,
    )


EITHER = "'memory' or 'compute' (the intensity is within float rounding of the ridge)"


def _float_exact_tie(flops, nbytes, peak, bw) -> bool:
    """A tie that every right way of writing the comparison sees as a tie (all the divisions are exact)."""
    try:
        return (
            flops / nbytes == peak / bw and bw * (flops / nbytes) == peak and nbytes / flops == bw / peak
        ) and flops * bw == peak * nbytes
    except ZeroDivisionError:
        return False


def _reference_bound(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    """Exact rational comparison of intensity and ridge; within float rounding of the ridge, either word."""
    intensity = Fraction(flops) / Fraction(bytes_moved)
    ridge = Fraction(peak_gflops) / Fraction(bandwidth_gb_s)
    if intensity == ridge:
        return "compute" if _float_exact_tie(flops, bytes_moved, peak_gflops, bandwidth_gb_s) else EITHER
    if abs(intensity - ridge) <= ridge * Fraction(1, 10**9):
        return EITHER
    return "memory" if intensity < ridge else "compute"


def _operations():
    """Hypothesis: (flops, bytes_moved, peak, bandwidth): any op, exact ties at the ridge, a hair either side."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        kind = d(st.sampled_from(["any", "tie", "near"]))
        if kind == "tie":  # intensity = ridge = m / 2**k exactly, with ints as a learner's counts would be
            m, k, b, bw = (
                d(st.integers(1, 4096)),
                d(st.integers(0, 6)),
                d(st.integers(1, 10**6)),
                d(st.integers(1, 10**5)),
            )
            return m * b, b * 2**k, m * bw / 2**k, d(st.sampled_from([bw, float(bw)]))
        peak, bw = d(_machines())
        if kind == "near":
            nbytes = d(st.integers(10**6, 10**12))
            eps = d(st.sampled_from([1e-2, 1e-4, 1e-6, -1e-2, -1e-4, -1e-6]))
            return max(1, int(peak / bw * nbytes * (1 + eps))), nbytes, peak, bw
        flops = d(st.one_of(st.integers(1, 2**60), st.integers(1, 1000), st.floats(1.0, 1e18)))
        nbytes = d(st.one_of(st.integers(1, 2**50), st.integers(1, 1000), st.floats(1.0, 1e15)))
        return flops, nbytes, peak, bw

    return draw()


def _same_side(mine, ref) -> str | None:
    if mine not in ("memory", "compute"):
        return f"bound() should return exactly 'memory' or 'compute'; got {short(mine)}"
    if ref != EITHER and mine != ref:
        return f"it is {ref}-bound; yours says {mine!r}"
    return None


def _say_op(flops, nbytes, peak, bw) -> str:
    return (
        f"bound(flops={flops!r}, bytes_moved={nbytes!r}, peak_gflops={peak!r}, bandwidth_gb_s={bw!r}) - intensity "
        f"{flops / nbytes:.10g} FLOP/byte against a ridge at {peak / bw:.10g}"
    )


@check(LAB, "bound: the same side of the ridge as the reference, for every machine and operation")
def check_bound_same_as_reference(bound):
    same_as_reference(
        bound,
        _reference_bound,
        _operations(),
        describe=_say_op,
        compare=_same_side,
        edges=[(400, 100, 200.0, 50.0), (399, 100, 200.0, 50.0), (16, 5, 13, 4), (7, 2, 13.0, 4.0)],
        arg_names=("flops", "bytes_moved", "peak_gflops", "bandwidth_gb_s"),
        examples=300,
    )
