"""The roofline exercise's checks pass the right answer and reject plausible wrong ones.

attainable_gflops(intensity, peak_gflops, bandwidth_gb_s) -> number or array
| question | what the checks try |
|---|---|
| which input varies each field | intensity alone (0 to 1000), then peak and bandwidth together on three machines (a CPU, a GPU, a laptop) |
| boundaries | intensity 0; the ridge itself; a hair left of it (3.999); answers that are not whole numbers (68.5, 837.5, 3.125) |
| a shape or type the notes never show | arrays of 1 and 2 dimensions, of one element, empty, of ints |
| order or ties | - (element by element) |
| errors: type and message | a ValueError from Python's min on an array is named with what to use instead; the input array unchanged |
| policy: which item | - |

bound(flops, bytes_moved, peak_gflops, bandwidth_gb_s) -> "memory" | "compute"
| question | what the checks try |
|---|---|
| which input varies each field | flops and bytes alone (the intensity), peak and bandwidth alone (the same matmul on a CPU and a GPU) |
| boundaries | exactly at the ridge (compute); 3.99 and 4.01 against 4; 3.5 and 3.2 against 3.25 (a floor division of either side shows) |
| a type the notes never show | int arguments; raw FLOP and byte counts in the billions against GFLOP/s and GB/s |
| order or ties | the tie at the ridge |
| errors: type and message | exactly the two words |
| policy: which item | - |

Each wrong answer is one class of mistake (max instead of min, one roof only, a unit conversion, Python's min()
on an array, a list back, a constant peak; the direction reversed, the ridge point counted as memory-bound, an
integer division, a ridge with GFLOP/s converted but GB/s not, a constant ridge, other words); each is rejected
with the message that names it.
"""

import numpy as np
import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_roofline as L


def attainable_gflops(intensity_flop_per_byte, peak_gflops, bandwidth_gb_s):
    return np.minimum(peak_gflops, bandwidth_gb_s * intensity_flop_per_byte)


def attainable_where(intensity, peak_gflops, bandwidth_gb_s):
    """Also right: np.where on the ridge, keeping a plain float for a float."""
    if np.ndim(intensity) == 0:
        return float(min(peak_gflops, bandwidth_gb_s * intensity))
    i = np.asarray(intensity, dtype=float)
    return np.where(i < peak_gflops / bandwidth_gb_s, bandwidth_gb_s * i, peak_gflops)


def bound(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    return "memory" if flops / bytes_moved < peak_gflops / bandwidth_gb_s else "compute"


def bound_alt(flops, bytes_moved, peak_gflops, bandwidth_gb_s):
    """Also right: which roof is lower at this intensity."""
    return "memory" if bandwidth_gb_s * (flops / bytes_moved) < peak_gflops else "compute"


def att_max(i, peak, bw):
    return np.maximum(peak, bw * i)


def att_memory_roof_only(i, peak, bw):
    return bw * np.asarray(i) if np.ndim(i) else bw * i


def att_peak_only(i, peak, bw):
    return np.full(np.shape(i), peak) if np.ndim(i) else peak


def att_gibibytes(i, peak, bw):
    """Reads GB/s as GiB/s."""
    return np.minimum(peak, bw * 2**30 / 1e9 * np.asarray(i)) if np.ndim(i) else min(peak, bw * 2**30 / 1e9 * i)


def att_unit_mixup(i, peak, bw):
    """Converts the bandwidth to bytes per second but compares with GFLOP/s (peak never reached below)."""
    return np.minimum(peak * 1e9, bw * 1e9 * i) / 1 if np.ndim(i) else min(peak * 1e9, bw * 1e9 * i)


def att_python_min(i, peak, bw):
    return min(peak, bw * i)


def att_list(i, peak, bw):
    return [min(peak, bw * x) for x in np.ravel(i)] if np.ndim(i) else min(peak, bw * i)


def att_flat(i, peak, bw):
    return np.array([min(peak, bw * x) for x in np.ravel(i)]) if np.ndim(i) else min(peak, bw * i)


def att_fixed_peak(i, peak, bw):
    return np.minimum(200.0, bw * i)


def att_divides(i, peak, bw):
    with np.errstate(divide="ignore"):
        return np.minimum(peak, bw / np.asarray(i, dtype=float)) if np.ndim(i) else min(peak, bw / i if i else peak)


def att_in_place(i, peak, bw):
    if np.ndim(i):
        i *= bw
        return np.minimum(peak, i)
    return min(peak, bw * i)


def bound_reversed(flops, nbytes, peak, bw):
    return "compute" if flops / nbytes < peak / bw else "memory"


def bound_ridge_is_memory(flops, nbytes, peak, bw):
    return "memory" if flops / nbytes <= peak / bw else "compute"


def bound_floor_division(flops, nbytes, peak, bw):
    return "memory" if flops // nbytes < peak / bw else "compute"


def bound_half_converted(flops, nbytes, peak, bw):
    return "memory" if flops / nbytes < peak * 1e9 / bw else "compute"


def bound_fixed_ridge(flops, nbytes, peak, bw):
    return "memory" if flops / nbytes < 4 else "compute"


def bound_inverted_intensity(flops, nbytes, peak, bw):
    return "memory" if nbytes / flops > bw / peak else "compute"


def bound_words(flops, nbytes, peak, bw):
    return bound(flops, nbytes, peak, bw) + "-bound"


def bound_vs_peak(flops, nbytes, peak, bw):
    """Compares the intensity with the peak itself, forgetting the bandwidth."""
    return "memory" if flops / nbytes < peak else "compute"


def stub(*a, **k):
    raise NotImplementedError("not implemented yet")


@pytest.mark.parametrize("att, bnd", [(attainable_gflops, bound), (attainable_where, bound_alt)])
def test_right_answers_pass(att, bnd):
    L.check_attainable_scalar(att)
    L.check_attainable_array(att)
    L.check_bound(bnd)


def test_the_ridge_cases_are_exact():
    assert 400 / 100 == 200.0 / 50.0 and 50.0 * (400 / 100) == 200.0


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_attainable_scalar, att_max, r"intensity 0.5 .*attainable is 25 GFLOP/s; got 200"),
        (L.check_attainable_scalar, att_memory_roof_only, r"intensity 8.0 .*right of the ridge: the peak.*got 400"),
        (L.check_attainable_scalar, att_peak_only, r"intensity 0.5 .*attainable is 25 GFLOP/s; got 200"),
        (L.check_attainable_scalar, att_gibibytes, r"attainable is 25 GFLOP/s; got 26.8435\. Those are GiB/s"),
        (
            L.check_attainable_scalar,
            att_unit_mixup,
            r"attainable is 25 GFLOP/s; got 2.5e\+10\. That is 1e9 times too much",
        ),
        (L.check_attainable_scalar, att_fixed_peak, r"a GPU .*use the peak and bandwidth you are given"),
        (L.check_attainable_scalar, att_divides, r"intensity 0.5 .*attainable is 25 GFLOP/s; got 100"),
        (
            L.check_attainable_array,
            att_python_min,
            r"a 1-D array of intensities: your function raised ValueError.*element by element",
        ),
        (L.check_attainable_array, att_list, r"should give a numpy array back; got list"),
        (
            L.check_attainable_array,
            att_flat,
            r"a 3 x 4 array of shape \(3, 4\) should give an array of the same shape; got \(12,\)",
        ),
        (L.check_attainable_array, att_in_place, r"changed the array of intensities"),
        (L.check_bound, bound_reversed, r"1 FLOP per byte, far left of the ridge at 4.*is memory-bound; got 'compute'"),
        (L.check_bound, bound_ridge_is_memory, r"exactly at the ridge .*is compute-bound; got 'memory'"),
        (L.check_bound, bound_floor_division, r"3\.5 FLOP per byte.*rounding down"),
        (
            L.check_bound,
            bound_half_converted,
            r"10 FLOP per byte, right of the ridge at 4.*compute-bound; got 'memory'",
        ),
        (L.check_bound, bound_fixed_ridge, r"the same 1024 x 1024 matmul .* on a GPU.*the ridge comes from"),
        (L.check_bound, bound_vs_peak, r"10 FLOP per byte, right of the ridge at 4.*compute-bound; got 'memory'"),
        (L.check_bound, bound_words, r"exactly 'memory' or 'compute'; got 'memory-bound'"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_an_inverted_intensity_with_an_inverted_ridge_is_right():
    L.check_bound(bound_inverted_intensity)  # bytes/flops > bw/peak is the same test, written the other way


@pytest.mark.parametrize("chk", [L.check_attainable_scalar, L.check_attainable_array, L.check_bound])
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def att_whole_gflops(i, peak, bw):
    """Rounds the answer to whole GFLOP/s ("nobody needs the decimals")."""
    return np.rint(np.minimum(peak, bw * np.asarray(i)))


def bound_floor_both(flops, nbytes, peak, bw):
    """Integer arithmetic on both sides: 3.2 and 3.25 both become 3, and 'equal' reads as compute-bound."""
    return "memory" if flops // nbytes < peak // bw else "compute"


def bound_ridge_floored(flops, nbytes, peak, bw):
    return "memory" if flops / nbytes < peak // bw else "compute"


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_attainable_scalar, att_whole_gflops, r"intensity 1.37 .*attainable is 68.5 GFLOP/s; got 68"),
        (L.check_bound, bound_floor_both, r"16 FLOP over 5 bytes is 3.2 .*divide with /, not //"),
        (L.check_bound, bound_ridge_floored, r"16 FLOP over 5 bytes is 3.2 .*memory-bound; got 'compute'"),
    ],
)
def test_answers_that_are_not_whole_numbers(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential checks (issue 42)


def att_tflops(i, peak, bw):
    """Units: answers in TFLOP/s ("the figure's axis is in TFLOP/s")."""
    return np.minimum(peak, bw * i) / 1000


def att_whole_intensity(i, peak, bw):
    """Rounding: the intensity truncated to whole FLOP per byte before the roofline."""
    return np.minimum(peak, bw * np.trunc(i))


def att_ridge_floored(i, peak, bw):
    """Boundaries: the ridge as a floor division, so intensities between it and the true ridge get the peak."""
    return np.where(np.asarray(i) < peak // bw, bw * np.asarray(i), peak) if np.ndim(i) else min(peak, bw * i)


def att_one_element_is_a_number(i, peak, bw):
    """Boundaries: a one-element array comes back as a plain number, not an array of shape (1,)."""
    out = np.minimum(peak, bw * np.asarray(i))
    return out.item() if out.size == 1 else out


def att_out_into_input(i, peak, bw):
    """State: multiplies into the caller's float array with out= to save an allocation."""
    if isinstance(i, np.ndarray) and i.dtype.kind == "f":
        return np.minimum(peak, np.multiply(i, bw, out=i))
    return np.minimum(peak, bw * i)


def att_answer_in_the_input(i, peak, bw):
    """State: writes the answer over the intensities it was given and returns that array."""
    if isinstance(i, np.ndarray):
        i[...] = np.minimum(peak, bw * i)
        return i.astype(float)
    return min(peak, bw * i)


def bound_giga_flops(flops, nbytes, peak, bw):
    """Units: converts the FLOPs to GFLOP but leaves the bytes as they are."""
    return "memory" if (flops / 1e9) / nbytes < peak / bw else "compute"


def bound_rounded_intensity(flops, nbytes, peak, bw):
    """Rounding: the intensity rounded to one decimal before it is compared (3.97 reads as 4.0)."""
    return "memory" if round(flops / nbytes, 1) < peak / bw else "compute"


def bound_ridge_rounded(flops, nbytes, peak, bw):
    """Rounding: the ridge rounded to two decimals ("FLOP/byte to 2 places is plenty")."""
    return "memory" if flops / nbytes < round(peak / bw, 2) else "compute"


def bound_isclose_is_ridge(flops, nbytes, peak, bw):
    """Boundaries: anything within 0.1 % of the ridge is called "at the ridge", hence compute-bound."""
    import math

    if math.isclose(flops / nbytes, peak / bw, rel_tol=1e-3):
        return "compute"
    return "memory" if flops / nbytes < peak / bw else "compute"


def bound_int_intensity(flops, nbytes, peak, bw):
    """Boundaries: the intensity compared as an int (a "FLOP per byte" count), so 3.99 against a ridge of 3.995."""
    return "memory" if int(flops / nbytes) < peak / bw else "compute"


NEW_ATT = [att_tflops, att_whole_intensity, att_ridge_floored, att_one_element_is_a_number]
NEW_ATT += [att_out_into_input, att_answer_in_the_input]
NEW_BOUND = [bound_giga_flops, bound_rounded_intensity, bound_ridge_rounded, bound_isclose_is_ridge]
NEW_BOUND += [bound_int_intensity]


@pytest.mark.parametrize("att, bnd", [(attainable_gflops, bound), (attainable_where, bound_alt)])
def test_right_answers_agree_with_the_reference(att, bnd):
    L.check_attainable_same_as_reference(att)
    L.check_bound_same_as_reference(bnd)


def test_an_inverted_intensity_agrees_with_the_reference():
    L.check_bound_same_as_reference(bound_inverted_intensity)


@pytest.mark.parametrize(
    "wrong",
    [
        att_max,
        att_memory_roof_only,
        att_peak_only,
        att_gibibytes,
        att_unit_mixup,
        att_python_min,
        att_list,
        att_flat,
        att_fixed_peak,
        att_divides,
        att_in_place,
        att_whole_gflops,
        *NEW_ATT,
    ],
)
def test_the_attainable_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"where the reference's|changed its input|should give|your code raised"):
        L.check_attainable_same_as_reference(wrong)


@pytest.mark.parametrize(
    "wrong",
    [
        bound_reversed,
        bound_ridge_is_memory,
        bound_floor_division,
        bound_half_converted,
        bound_fixed_ridge,
        bound_words,
        bound_vs_peak,
        bound_floor_both,
        bound_ridge_floored,
        *NEW_BOUND,
    ],
)
def test_the_bound_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"-bound; yours says|exactly 'memory' or 'compute'"):
        L.check_bound_same_as_reference(wrong)


def test_the_differential_checks_name_the_smallest_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_bound_same_as_reference(bound_isclose_is_ridge)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "against a ridge at" in str(e.value) and "-bound; yours says 'compute'" in str(e.value)
    with pytest.raises(LabCheckFailed, match=r"changed its input `intensity_flop_per_byte`"):
        L.check_attainable_same_as_reference(att_out_into_input)


@pytest.mark.parametrize("chk", [L.check_attainable_same_as_reference, L.check_bound_same_as_reference])
def test_stub_fails_the_differential_checks(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)
