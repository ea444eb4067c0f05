"""Independent wrong answers for ex_weight_quant, written from labs/5_generation/ex_weight_quant.ipynb's contract alone."""

import torch


def quantize_int4(w, group_size):
    out, width = w.shape
    codes = torch.empty(out, width, dtype=torch.uint8)
    scales, lows = [], []
    for start in range(0, width, group_size):
        g = w[:, start : start + group_size]
        lo, hi = g.amin(1), g.amax(1)
        s = torch.where(hi == lo, torch.ones_like(lo), (hi - lo) / 15)
        codes[:, start : start + group_size] = ((g - lo[:, None]) / s[:, None]).round().clamp(0, 15).to(torch.uint8)
        scales.append(s)
        lows.append(lo)
    return codes, torch.stack(scales, 1), torch.stack(lows, 1)


def dequantize_int4(codes, scales, lows, group_size):
    group = torch.arange(codes.shape[1]) // group_size
    return codes.to(torch.float32) * scales[:, group] + lows[:, group]


def range_from_largest_magnitude(w, group_size):
    """Takes the range as [-max|w|, +max|w|], so that a group is centred on zero."""
    codes, scales, lows = [], [], []
    for start in range(0, w.shape[1], group_size):
        g = w[:, start : start + group_size]
        m = g.abs().amax(1)
        s = torch.where(m == 0, torch.ones_like(m), 2 * m / 15)
        codes.append(((g + m[:, None]) / s[:, None]).round().clamp(0, 15).to(torch.uint8))
        scales.append(s)
        lows.append(-m)
    return torch.cat(codes, 1), torch.stack(scales, 1), torch.stack(lows, 1)


def scales_in_half_precision(w, group_size):
    """Stores scales and lows as float16, as the kernels' bf16 scales suggested, to save their bytes."""
    codes, scales, lows = quantize_int4(w, group_size)
    return codes, scales.half(), lows.half()


def drops_the_leftover_inputs(w, group_size):
    """Keeps only whole groups: the inputs past the last full group are left out."""
    whole = (w.shape[1] // group_size) * group_size
    return quantize_int4(w[:, : max(whole, group_size)], group_size)


def kernel_convention(w, group_size):
    """Signed codes in [-8, 7] with the offset at code 0 (low + 8 steps), as PyTorch's INT4 kernel stores them."""
    codes, scales, lows = quantize_int4(w, group_size)
    return codes.to(torch.int8) - 8, scales, lows + 8 * scales


def subtracts_in_place(w, group_size):
    """Shifts each group to start at zero in place (no copy of a large weight)."""
    scales, lows = [], []
    for start in range(0, w.shape[1], group_size):
        g = w[:, start : start + group_size]
        lo, hi = g.amin(1), g.amax(1)
        s = torch.where(hi == lo, torch.ones_like(lo), (hi - lo) / 15)
        g.sub_(lo[:, None]).div_(s[:, None]).round_().clamp_(0, 15)
        scales.append(s)
        lows.append(lo)
    return w.to(torch.uint8), torch.stack(scales, 1), torch.stack(lows, 1)


def next_group_rounding_up(codes, scales, lows, group_size):
    """Finds an input's group by rounding its position up."""
    group = ((torch.arange(codes.shape[1]) + 1) // group_size).clamp(max=scales.shape[1] - 1)
    return codes.to(torch.float32) * scales[:, group] + lows[:, group]


RIGHT = {"quantize_int4": quantize_int4, "dequantize_int4": dequantize_int4}
WRONG = [
    ("quantize_int4", range_from_largest_magnitude, "misread prose"),
    ("quantize_int4", scales_in_half_precision, "units/rounding"),
    ("quantize_int4", drops_the_leftover_inputs, "boundaries"),
    ("quantize_int4", kernel_convention, "misread prose"),
    ("quantize_int4", subtracts_in_place, "state"),
    ("dequantize_int4", next_group_rounding_up, "off-by-one"),
]
