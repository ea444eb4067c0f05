"""Exercise checks: group-wise INT4 weight quantization and its inverse, as chapter 5.7 uses it (issue 45).

The learner writes
  quantize_int4(w, group_size) -> (codes, scales, lows)
      w is a 2-D float tensor (out_features, in_features). Each row is cut into groups of `group_size` consecutive
      inputs (the last group is shorter where group_size does not divide in_features). Per group: low = its
      minimum, high = its maximum, scale = (high - low) / 15 (1 where high == low), and each weight's code is
      round((w - low) / scale), clamped to [0, 15]. codes: an integer tensor (out, in); scales and lows: float
      tensors (out, groups), groups = ceil(in / group_size).
  dequantize_int4(codes, scales, lows, group_size) -> w_hat (out, in): each code times its group's scale, plus
      its group's low.

The checks: one row worked by hand (the 15 steps, rounding to the nearest code, the offset); groups along the
inputs, each with its own range, and a last group over its own weights; the edges (a zero row, a constant row,
groups of 1, one group wider than the row); the inverse on the reference's codes; the learner's pair keeps every
weight within half a step; then the same codes, scales and offsets as the reference (ailab.quantize.weight_only)
on generated matrices, a code allowed either neighbour only where the exact value is a tie.
"""

from __future__ import annotations

import math

import torch

from ailab.labs.core import answer, check, expect
from ailab.labs.differential import same_as_reference, short
from ailab.quantize.weight_only import dequantize_int4 as _ref_dequantize
from ailab.quantize.weight_only import quantize_int4 as _ref_quantize

LAB = "ex_weight_quant"
STEPS = 15  # 16 codes, 0..15, make 15 steps between a group's minimum and its maximum


def _m(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def _triple(out, what: str):
    """The learner's (codes, scales, lows), as tensors, or a failure that says what came back instead."""
    expect(
        isinstance(out, (tuple, list)) and len(out) == 3,
        f"{what}: quantize_int4 should return three tensors (codes, scales, lows); got {short(out)}",
    )
    tensors = []
    for name, x in zip(("codes", "scales", "lows"), out):
        try:
            t = torch.as_tensor(x)
        except Exception:  # noqa: BLE001 - anything the learner returned
            t = None
        expect(t is not None and t.dim() == 2, f"{what}: {name} should be a 2-D tensor; got {short(x)}")
        tensors.append(t)
    codes, scales, lows = tensors
    expect(
        not codes.is_floating_point() and not codes.is_complex() and codes.dtype != torch.bool,
        f"{what}: codes should be integers (for example torch.uint8), the 4-bit numbers a weight is stored as; got "
        f"{codes.dtype}",
    )
    return codes, scales.double(), lows.double()


def _quantized(quantize_int4, w: torch.Tensor, group_size: int, what: str):
    return _triple(answer(quantize_int4, w.clone(), group_size, what=what), what)


@check(LAB, "one row worked by hand: 15 steps, the nearest code, the offset")
def check_one_row(quantize_int4):
    w = _m([[-1.5, -0.3, 0.44, 1.5]])  # low -1.5, high 1.5: scale 3 / 15 = 0.2; codes 0, 6, 9.7 -> 10, 15
    what = "w = [[-1.5, -0.3, 0.44, 1.5]], group_size=4"
    codes, scales, lows = _quantized(quantize_int4, w, 4, what)
    expect(
        tuple(codes.shape) == (1, 4) and tuple(scales.shape) == (1, 1) and tuple(lows.shape) == (1, 1),
        f"{what}: one row of 4 inputs in one group: codes (1, 4), scales and lows (1, 1); got codes "
        f"{tuple(codes.shape)}, scales {tuple(scales.shape)}, lows {tuple(lows.shape)}",
    )
    scale, low = float(scales[0, 0]), float(lows[0, 0])
    expect(
        math.isclose(low, -1.5, abs_tol=1e-6),
        f"{what}: the group's offset is its minimum, -1.5 (the weight that code 0 stands for); got {low}"
        + (
            " - a symmetric scheme has no offset, but this one uses all 16 codes between min and max"
            if low == 0
            else ""
        ),
    )
    expect(
        math.isclose(scale, 0.2, rel_tol=1e-5),
        f"{what}: the scale is (max - min) / 15 = 3 / 15 = 0.2; got {scale:.6g}"
        + (" - 16 codes make 15 steps from the minimum to the maximum, not 16" if math.isclose(scale, 3 / 16) else ""),
    )
    got = [int(c) for c in codes[0]]
    expect(
        got == [0, 6, 10, 15],
        f"{what}: codes [0, 6, 10, 15] ((w - low) / scale = 0, 6, 9.7, 15, each rounded to the nearest code); got {got}"
        + (" - 9.7 becomes 10: round to the nearest code, not down" if got[2] == 9 else ""),
    )


@check(LAB, "groups run along the inputs, each with its own range; a short last group uses its own weights")
def check_groups(quantize_int4):
    w = _m([[0.1, 8.0, 0.3, 0.2, 0.5, 0.1, 0.4, 0.3, 5.0, 6.0], [1.0, 1.1, 1.2, 1.3, -1.0, -0.9, -0.8, -0.7, 2.0, 2.5]])
    what = f"w = {w.tolist()} (2 rows, 10 inputs), group_size=4"
    codes, scales, lows = _quantized(quantize_int4, w, 4, what)
    expect(
        tuple(codes.shape) == (2, 10),
        f"{what}: codes have the weight's own shape, (2, 10); got {tuple(codes.shape)}",
    )
    expect(
        tuple(scales.shape) == (2, 3) and tuple(lows.shape) == (2, 3),
        f"{what}: each row has ceil(10 / 4) = 3 groups of consecutive inputs (4, 4 and the last 2), so scales and "
        f"lows are (2, 3); got scales {tuple(scales.shape)}, lows {tuple(lows.shape)}"
        + (" - groups run along the inputs of each row, not down the rows" if scales.shape[0] != 2 else ""),
    )
    want_scales = [[7.9 / 15, 0.4 / 15, 1.0 / 15], [0.3 / 15, 0.3 / 15, 0.5 / 15]]
    want_lows = [[0.1, 0.1, 5.0], [1.0, -1.0, 2.0]]
    expect(
        torch.allclose(lows, torch.tensor(want_lows, dtype=torch.float64), atol=1e-6),
        f"{what}: each group's low is its own minimum, {want_lows}; got {lows.tolist()}"
        + (
            " - the last group holds 2 weights (5.0, 6.0): pad it and its minimum becomes the padding"
            if abs(float(lows[0, 2]) - 5.0) > 1e-3
            else ""
        ),
    )
    expect(
        torch.allclose(scales, torch.tensor(want_scales, dtype=torch.float64), rtol=1e-5),
        f"{what}: each group's scale is its own (max - min) / 15: {[[round(s, 5) for s in r] for r in want_scales]}; "
        f"got {[[round(float(s), 5) for s in r] for r in scales]}. The outlier 8.0 widens the first group's steps "
        "only: that is what groups are for",
    )


@check(LAB, "the edges: a zero row, a constant row, groups of one, one group wider than the row")
def check_edges(quantize_int4):
    cases = [
        (_m([[0.0, 0.0, 0.0], [0.5, -0.5, 0.25]]), 3, "a row of zeros"),
        (_m([[0.25] * 6]), 4, "a constant row (every group's max equals its min)"),
        (_m([[0.3, -2.0, 7.0, 0.0]]), 1, "group_size=1 (every weight a group of its own)"),
        (_m([[0.3, -2.0, 7.0, 0.0, 1.0]]), 64, "group_size=64 for a row of 5 inputs (one group)"),
    ]
    for w, group, name in cases:
        what = f"{name}: w = {w.tolist()}, group_size={group}"
        codes, scales, lows = _quantized(quantize_int4, w, group, what)
        expect(
            bool(torch.isfinite(scales).all()) and bool(torch.isfinite(lows).all()) and bool((scales != 0).all()),
            f"{what}: a group whose max equals its min has no range to divide: give it scale 1 (its codes are all "
            f"0 and its low gives it back); got scales {scales.tolist()}",
        )
        ref = _ref_quantize(w, group)
        how = _same_quantization((codes, scales, lows), ref)
        expect(
            how is None,
            f"{what}: {how}. The reference gives codes {ref[0].tolist()}, scales {ref[1].tolist()}, lows "
            f"{ref[2].tolist()}",
        )


@check(LAB, "the inverse: each code times its group's scale, plus its group's low")
def check_dequantize(dequantize_int4):
    for w, group in [(_m([[0.1, 8.0, 0.3, 0.2, 0.5, 0.1, 0.4, 0.3, 5.0, 6.0]]), 4), (_m([[1.0, -2.0, 3.0]]), 1)]:
        codes, scales, lows = _ref_quantize(w, group)
        what = f"codes {codes.tolist()}, scales {scales.tolist()}, lows {lows.tolist()}, group_size={group}"
        got = answer(dequantize_int4, codes.clone(), scales.clone(), lows.clone(), group, what=what)
        want = _ref_dequantize(codes, scales, lows, group)
        try:
            mine = torch.as_tensor(got).double()
        except Exception:  # noqa: BLE001 - anything the learner returned
            mine = None
        expect(
            mine is not None and mine.shape == want.shape,
            f"{what}: dequantize_int4 returns the weights, shape {tuple(want.shape)}; got {short(got)}",
        )
        expect(
            torch.allclose(mine, want.double(), atol=1e-5),
            f"{what}: the weights are {[round(x, 4) for x in want[0].tolist()]}; got "
            f"{[round(x, 4) for x in mine[0].tolist()]}. Input i belongs to group i // group_size",
        )


@check(LAB, "your quantize and dequantize together keep every weight within half a step")
def check_round_trip(quantize_int4, dequantize_int4):
    g = torch.Generator().manual_seed(0)
    for out, inp, group in [(3, 64, 32), (4, 40, 16), (2, 7, 3)]:
        w = torch.randn(out, inp, generator=g)
        w[0, 1] = 9.0  # an outlier
        what = f"a random {out} x {inp} weight with an outlier, group_size={group}"
        codes, scales, lows = _quantized(quantize_int4, w, group, what)
        back = answer(dequantize_int4, codes, scales.float(), lows.float(), group, what=what)
        try:
            back = torch.as_tensor(back).double()
        except Exception:  # noqa: BLE001
            back = None
        expect(back is not None and back.shape == w.shape, f"{what}: the weights come back as ({out}, {inp})")
        step = _ref_quantize(w, group)[1].double()[:, torch.arange(inp) // group]
        worst = float(((back - w.double()).abs() - step / 2).max())
        expect(
            worst <= 1e-5,
            f"{what}: every weight should come back within half a step of its group; one is {worst:.3g} further",
        )


def _matrices():
    """Hypothesis: (w, group_size) from the contract: 1-4 rows of 1-40 inputs, values with zero rows, constant rows
    and outliers, and group sizes that divide the width, that do not, of 1, and wider than the row."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        rows, cols = d(st.integers(1, 4)), d(st.integers(1, 40))
        value = st.floats(-4, 4, allow_nan=False, width=32)
        body = []
        for _ in range(rows):
            kind = d(st.sampled_from(["random", "random", "zero", "constant", "outlier"]))
            if kind == "zero":
                body.append([0.0] * cols)
            elif kind == "constant":
                body.append([d(value)] * cols)
            else:
                row = d(st.lists(value, min_size=cols, max_size=cols))
                if kind == "outlier":
                    row[d(st.integers(0, cols - 1))] = d(st.sampled_from([60.0, -60.0]))
                body.append(row)
        group = d(st.one_of(st.sampled_from([1, 2, 3, 32, cols, cols + 1]), st.integers(1, 48)))
        return _m(body), group

    return draw()


def _same_quantization(mine, ref) -> str | None:
    try:
        codes, scales, lows = _triple(mine, "your answer")
    except AssertionError as e:
        return str(e).removeprefix("your answer: ")
    ref_codes, ref_scales, ref_lows = ref
    for name, a, b in (("codes", codes, ref_codes), ("scales", scales, ref_scales), ("lows", lows, ref_lows)):
        if tuple(a.shape) != tuple(b.shape):
            return f"{name} should have shape {tuple(b.shape)}; yours has {tuple(a.shape)}"
    for name, a, b in (("scales", scales, ref_scales.double()), ("lows", lows, ref_lows.double())):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            bad = (a - b).abs().argmax()
            r, c = divmod(int(bad), b.shape[1])
            return f"{name}[{r}, {c}] should be {float(b[r, c]):.6g}; yours is {float(a[r, c]):.6g}"
    diff = codes.long() != ref_codes.long()
    if diff.any():
        r, c = (int(i) for i in diff.nonzero()[0])
        return f"codes[{r}, {c}] should be {int(ref_codes[r, c])}; yours is {int(codes[r, c])}"
    return None


def _tie_tolerant(quantize_int4):
    """The learner's codes, with a code one away from the reference's accepted where the exact value is a tie
    (x.5 steps above the low): both neighbours are as near, and rounding half up or half to even are both fine."""

    def run(w, group_size):
        out = quantize_int4(w, group_size)
        try:
            codes = torch.as_tensor(out[0])
        except Exception:  # noqa: BLE001 - judged by the compare, with its own words
            return out
        ref_codes, ref_scales, ref_lows = _ref_quantize(w, group_size)
        if codes.shape != ref_codes.shape or codes.is_floating_point():
            return out
        per_input = torch.arange(w.shape[1]) // group_size
        exact = (w.double() - ref_lows.double()[:, per_input]) / ref_scales.double()[:, per_input]
        tie = ((exact - exact.floor()) - 0.5).abs() < 1e-4
        fixed = torch.where(tie & ((codes.long() - ref_codes.long()).abs() == 1), ref_codes.long(), codes.long())
        return (fixed, *tuple(out[1:]))

    return run


@check(LAB, "the same codes, scales and lows as the reference on every matrix tried")
def check_same_as_reference(quantize_int4):
    same_as_reference(
        _tie_tolerant(quantize_int4),
        _ref_quantize,
        _matrices(),
        describe=lambda w, group: (
            f"quantize_int4(w={short(w.tolist())} ({w.shape[0]} x {w.shape[1]}), group_size={group})"
        ),
        compare=_same_quantization,
        edges=[
            (_m([[0.0, 0.0], [1.0, 1.0]]), 2),
            (_m([[0.1, 0.2, 0.3, 0.4, 0.5]]), 2),
            (_m([[5.0, 6.0, 7.0]]), 8),
        ],
        arg_names=("w", "group_size"),
        examples=150,
    )
