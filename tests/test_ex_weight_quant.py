"""The weight-quantization exercise's checks pass right answers and reject plausible wrong ones, with the words that
name each mistake.

quantize_int4(w, group_size) -> (codes, scales, lows); dequantize_int4(codes, scales, lows, group_size) -> w_hat
| question | what the checks try |
|---|---|
| which input varies each field | one row by hand (the offset, the 15 steps, the rounding); two rows of three groups, an outlier in one |
| boundaries | a zero row, a constant row, groups of 1, a group wider than the row, a last group shorter than the others |
| a type the notes never show | codes as an integer tensor; float16-representable values; 60x outliers in generated rows |
| order or ties | groups along the inputs of a row, not down the rows; a tie (x.5 steps) may round either way |
| errors: type and message | - (nothing to refuse) |
| policy: which item | the last group's range from its own weights, not from padding |
"""

import math

import numpy as np
import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import ex_weight_quant as L


def quantize_int4(w, group_size):
    codes, scales, lows = [], [], []
    for start in range(0, w.shape[1], group_size):
        g = w[:, start : start + group_size]
        low, high = g.min(dim=1).values, g.max(dim=1).values
        scale = torch.where(high > low, (high - low) / 15, torch.ones_like(low))
        codes.append(torch.round((g - low[:, None]) / scale[:, None]).clamp(0, 15).to(torch.uint8))
        scales.append(scale)
        lows.append(low)
    return torch.cat(codes, 1), torch.stack(scales, 1), torch.stack(lows, 1)


def quantize_int4_numpy(w, group_size):
    """Also right: numpy, padding the last group with NaN and reading it with nanmin / nanmax; rounding half up."""
    a = w.numpy().astype(np.float64)
    out, width = a.shape
    groups = math.ceil(width / group_size)
    padded = np.full((out, groups * group_size), np.nan)
    padded[:, :width] = a
    g = padded.reshape(out, groups, group_size)
    low, high = np.nanmin(g, axis=2), np.nanmax(g, axis=2)
    scale = np.where(high > low, (high - low) / 15, 1.0)
    codes = np.floor((g - low[..., None]) / scale[..., None] + 0.5).clip(0, 15)
    codes = codes.reshape(out, -1)[:, :width].astype(np.int64)
    return torch.from_numpy(codes), torch.from_numpy(scale).float(), torch.from_numpy(low).float()


def dequantize_int4(codes, scales, lows, group_size):
    idx = torch.arange(codes.shape[1]) // group_size
    return codes.float() * scales[:, idx] + lows[:, idx]


def dequantize_int4_repeat(codes, scales, lows, group_size):
    """Also right: repeat each group's scale and low along its inputs."""
    width = codes.shape[1]
    s = scales.repeat_interleave(group_size, dim=1)[:, :width]
    z = lows.repeat_interleave(group_size, dim=1)[:, :width]
    return codes.to(torch.float32) * s + z


# --------------------------------------------------------------------------- wrong answers, one mistake each


def scale_over_16(w, group_size):
    codes, scales, lows = quantize_int4(w, group_size)
    scales = torch.where(scales != 1, scales * 15 / 16, scales)
    return (
        torch.round(
            (w - dequantize_int4(torch.zeros_like(codes), scales, lows, group_size))
            / dequantize_int4(torch.ones_like(codes), scales, torch.zeros_like(lows), group_size)
        )
        .clamp(0, 15)
        .to(torch.uint8),
        scales,
        lows,
    )


def truncates(w, group_size):
    codes, scales, lows = quantize_int4(w, group_size)
    idx = torch.arange(w.shape[1]) // group_size
    return ((w - lows[:, idx]) / scales[:, idx]).floor().clamp(0, 15).to(torch.uint8), scales, lows


def symmetric(w, group_size):
    """No offset: codes around 8, scale from the largest magnitude."""
    _, scales, lows = quantize_int4(w, group_size)
    idx = torch.arange(w.shape[1]) // group_size
    amax = torch.stack([w[:, s : s + group_size].abs().max(1).values for s in range(0, w.shape[1], group_size)], 1)
    scale = torch.where(amax > 0, amax / 7, torch.ones_like(amax))
    return torch.round(w / scale[:, idx] + 8).clamp(0, 15).to(torch.uint8), scale, torch.zeros_like(lows)


def one_range_per_row(w, group_size):
    return quantize_int4(w, w.shape[1]) if False else _per_row(w, group_size)


def _per_row(w, group_size):
    codes, scale, low = quantize_int4(w, w.shape[1])
    groups = math.ceil(w.shape[1] / group_size)
    return codes, scale.repeat(1, groups), low.repeat(1, groups)


def groups_down_the_rows(w, group_size):
    codes, scales, lows = quantize_int4(w.t().contiguous(), group_size)
    return codes.t(), scales.t(), lows.t()


def pads_with_zeros(w, group_size):
    width = w.shape[1]
    padded = torch.nn.functional.pad(w, (0, (-width) % group_size))
    codes, scales, lows = quantize_int4(padded, group_size)
    return codes[:, :width], scales, lows


def divides_by_zero_range(w, group_size):
    codes, scales, lows = [], [], []
    for start in range(0, w.shape[1], group_size):
        g = w[:, start : start + group_size]
        low, high = g.min(dim=1).values, g.max(dim=1).values
        scale = (high - low) / 15
        codes.append(torch.nan_to_num(torch.round((g - low[:, None]) / scale[:, None])).clamp(0, 15).to(torch.uint8))
        scales.append(scale)
        lows.append(low)
    return torch.cat(codes, 1), torch.stack(scales, 1), torch.stack(lows, 1)


def float_codes(w, group_size):
    codes, scales, lows = quantize_int4(w, group_size)
    return codes.float(), scales, lows


def forgets_the_low(codes, scales, lows, group_size):
    idx = torch.arange(codes.shape[1]) // group_size
    return codes.float() * scales[:, idx]


def groups_by_modulo(codes, scales, lows, group_size):
    idx = torch.arange(codes.shape[1]) % scales.shape[1]
    return codes.float() * scales[:, idx] + lows[:, idx]


def stub(*a, **k):
    raise NotImplementedError("quantize_int4() is not implemented yet")


Q_CHECKS = [L.check_one_row, L.check_groups, L.check_edges, L.check_same_as_reference]


@pytest.mark.parametrize("fn", [quantize_int4, quantize_int4_numpy])
def test_right_quantizers_pass(fn):
    for chk in Q_CHECKS:
        chk(fn)


@pytest.mark.parametrize("q", [quantize_int4, quantize_int4_numpy])
@pytest.mark.parametrize("dq", [dequantize_int4, dequantize_int4_repeat])
def test_right_pairs_pass(q, dq):
    L.check_dequantize(dq)
    L.check_round_trip(q, dq)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_one_row, scale_over_16, r"16 codes make 15 steps"),
        (L.check_one_row, truncates, r"round to the nearest code, not down"),
        (L.check_one_row, symmetric, r"a symmetric scheme has no offset"),
        (L.check_groups, one_range_per_row, r"each group's low is its own minimum"),
        (L.check_groups, groups_down_the_rows, r"groups run along the inputs of each row"),
        (L.check_groups, pads_with_zeros, r"pad it and its minimum becomes the padding"),
        (L.check_edges, divides_by_zero_range, r"give it scale 1"),
        (L.check_one_row, float_codes, r"codes should be integers"),
        (L.check_same_as_reference, pads_with_zeros, r"(lows|scales)\[0, 2\] should be"),
        (L.check_same_as_reference, truncates, r"codes\[\d+, \d+\] should be"),
    ],
)
def test_wrong_quantizers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


@pytest.mark.parametrize("wrong", [forgets_the_low, groups_by_modulo])
def test_wrong_inverses_fail(wrong):
    with pytest.raises(LabCheckFailed, match=r"the weights are|group i // group_size"):
        L.check_dequantize(wrong)
    with pytest.raises(LabCheckFailed, match="within half a step"):
        L.check_round_trip(quantize_int4, wrong)


@pytest.mark.parametrize("chk", Q_CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def test_the_differential_check_names_the_smallest_matrix():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(scale_over_16)
    assert "quantize_int4(w=" in str(e.value) and "should be" in str(e.value)
