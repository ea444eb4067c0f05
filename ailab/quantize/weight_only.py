"""Weight-only quantization of a decoder's linear layers, written out: INT8 per output channel, INT4 per group.

A decode step at a small batch reads every weight once per token and does two FLOPs with it per sequence: it
is bound by the bytes it reads (notebook 1/05). Storing the weights in fewer bits cuts those bytes; the
activations stay in floating point, so nothing is calibrated (unlike static INT8 in static_int8.py).

    INT8, symmetric, per output channel   w ≈ q · scale           q in [-127, 127], scale = max|w_row| / 127
    INT4, asymmetric, per group of G      w ≈ q · scale + low     q in [0, 15],     scale = (max - min) / 15

The quantizers and their inverses below are the lesson (and the reference a lab checks a learner's against).
`Int8WeightOnlyLinear` and `Int4WeightOnlyLinear` run the quantized weights either plainly (`kernel="plain"`:
dequantize, then an fp32 matmul: correct, and slower than fp32) or through PyTorch's own CPU kernels
(`kernel="aten"`: `_weight_int8pack_mm` and `_weight_int4pack_mm_for_cpu`, which read the small weights and take
bf16 activations), as gpt-fast and torchao do. `quantize_decoder` swaps them in for every linear layer of a
tiny_gpt; Hugging Face's forward and ailab's Decoder both run the result.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

SCHEMES = ("int8", "int4")
KERNELS = ("aten", "plain")
INT4_GROUP_SIZES = (32, 64, 128)  # what _weight_int4pack_mm_for_cpu accepts
INT4_MID = 8  # the kernel stores a group's offset as the value its code 8 stands for


def _check_matrix(w: torch.Tensor) -> None:
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"expected a 2-D floating-point weight (out_features, in_features); got {_describe(w)}")
    if not torch.isfinite(w).all():
        raise ValueError("the weight holds inf or NaN: there is no finite scale for it")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dim()}-D {x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (out, in) -> codes (out, in) int8 in [-127, 127] and one scale per row (out,) fp32, so w ≈ codes · scale.
    An all-zero row gets scale 1 (any scale codes it as zeros; 1 keeps the inverse free of a division by 0)."""
    _check_matrix(w)
    w = w.float().contiguous()
    amax = w.abs().amax(dim=1)  # (out,)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))  # (out,)
    codes = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
    return codes, scale


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The inverse: codes (out, in) int8 and scale (out,) -> w (out, in) fp32."""
    return codes.float() * scale[:, None]


def quantize_int4(w: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w (out, in) -> codes (out, in) uint8 in [0, 15], and per group of `group_size` inputs a scale and the group's
    minimum, each (out, groups), so w ≈ codes · scale + low. The last group is shorter where `group_size` does not
    divide `in`. A constant group gets scale 1 and codes 0: its minimum alone gives it back exactly."""
    return quantize_groupwise(w, group_size, bits=4)


def dequantize_int4(
    codes: torch.Tensor, scales: torch.Tensor, lows: torch.Tensor, group_size: int = 32
) -> torch.Tensor:
    """The inverse: codes (out, in), scales and lows (out, groups) -> w (out, in) fp32."""
    per_input = torch.arange(codes.shape[1], device=codes.device) // group_size  # (in,): the group of each input
    return codes.float() * scales[:, per_input] + lows[:, per_input]


def quantize_groupwise(w: torch.Tensor, group_size: int = 32, bits: int = 4):
    """quantize_int4 at any width from 1 to 8 bits (codes in [0, 2^bits - 1]): the chapter's sweep of bits against
    bits per byte. dequantize_int4 is its inverse at every width."""
    _check_matrix(w)
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"group_size must be a positive int; got {group_size!r}")
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"bits must be an int from 1 to 8; got {bits!r}")
    top = 2**bits - 1
    w = w.float().contiguous()
    codes, scales, lows = [], [], []
    for start in range(0, w.shape[1], group_size):
        g = w[:, start : start + group_size]  # (out, <= group_size)
        low, high = g.amin(dim=1), g.amax(dim=1)  # (out,)
        scale = torch.where(high > low, (high - low) / top, torch.ones_like(low))
        codes.append(torch.round((g - low[:, None]) / scale[:, None]).clamp(0, top).to(torch.uint8))
        scales.append(scale)
        lows.append(low)
    return torch.cat(codes, dim=1), torch.stack(scales, dim=1), torch.stack(lows, dim=1)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per byte, the even input in the low nibble: (out, in) -> (out, ceil(in / 2)) uint8."""
    if codes.shape[1] % 2:
        codes = torch.nn.functional.pad(codes, (0, 1))
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor, in_features: int) -> torch.Tensor:
    """The inverse of pack_int4: (out, ceil(in / 2)) uint8 -> (out, in) codes."""
    both = torch.stack([packed & 0x0F, packed >> 4], dim=2)  # (out, in / 2, 2)
    return both.reshape(packed.shape[0], -1)[:, :in_features]


def _weight_and_bias(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(out, in) weight and bias of an nn.Linear or of Hugging Face's Conv1D (which stores its weight (in, out))."""
    if isinstance(layer, nn.Linear):
        return layer.weight.detach(), None if layer.bias is None else layer.bias.detach()
    if type(layer).__name__ == "Conv1D":
        return layer.weight.detach().t(), layer.bias.detach()
    raise TypeError(f"expected an nn.Linear or a GPT-2 Conv1D; got {type(layer).__name__}")


class _WeightOnlyLinear(nn.Module):
    """y = x · Wᵀ + b with W stored in fewer bits; x (..., in) -> y (..., out), fp32 in and out."""

    bits: int

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None, kernel: str):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"kernel={kernel!r}; choose one of {KERNELS}")
        self.in_features, self.out_features, self.kernel = in_features, out_features, kernel
        self.register_buffer("bias", None if bias is None else bias.float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # (N, in)
        y = self._matmul_aten(flat) if self.kernel == "aten" else flat @ self.dequantized().t()  # (N, out)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

    def weight_bytes(self) -> int:
        """The bytes the weight is stored in: codes and their scales (and offsets)."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bits={self.bits}, kernel={self.kernel}"


class Int8WeightOnlyLinear(_WeightOnlyLinear):
    bits = 8

    def __init__(self, layer: nn.Module, kernel: str = "aten"):
        w, b = _weight_and_bias(layer)
        super().__init__(w.shape[1], w.shape[0], b, kernel)
        codes, scale = quantize_int8(w)
        self.register_buffer("codes", codes)  # (out, in) int8
        self.register_buffer("scale", scale)  # (out,) fp32
        self.register_buffer("scale_bf16", scale.bfloat16() if kernel == "aten" else None)

    def dequantized(self) -> torch.Tensor:
        return dequantize_int8(self.codes, self.scale)

    def _matmul_aten(self, x: torch.Tensor) -> torch.Tensor:
        # the CPU kernel is vectorised for bf16 activations; fp32 ones take a scalar loop ten times slower (measured)
        return torch.ops.aten._weight_int8pack_mm(x.bfloat16(), self.codes, self.scale_bf16).float()

    def weight_bytes(self) -> int:
        return self.codes.numel() + self.scale.numel() * 4


class Int4WeightOnlyLinear(_WeightOnlyLinear):
    bits = 4

    def __init__(self, layer: nn.Module, group_size: int = 32, kernel: str = "aten"):
        w, b = _weight_and_bias(layer)
        out_features, in_features = w.shape
        if kernel == "aten" and (group_size not in INT4_GROUP_SIZES or in_features % group_size):
            raise ValueError(
                f"PyTorch's INT4 kernel takes a group size of {INT4_GROUP_SIZES} that divides the input width; "
                f"got group_size={group_size} for {in_features} inputs (kernel='plain' takes any group)"
            )
        super().__init__(in_features, out_features, b, kernel)
        self.group_size = group_size
        codes, scales, lows = quantize_int4(w, group_size)
        self.register_buffer("packed", pack_int4(codes))  # (out, ceil(in / 2)) uint8
        self.register_buffer("scales", scales)  # (out, groups)
        self.register_buffer("lows", lows)  # (out, groups)
        if kernel == "aten":
            # the kernel's own layout: codes tiled for its inner loop, and per group (scale, value of code 8)
            self.register_buffer("aten_packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.int(), 1))
            pairs = torch.stack([scales, lows + INT4_MID * scales], dim=2)  # (out, groups, 2)
            self.register_buffer("aten_scales_and_zeros", pairs.transpose(0, 1).contiguous().bfloat16())

    def dequantized(self) -> torch.Tensor:
        return dequantize_int4(unpack_int4(self.packed, self.in_features), self.scales, self.lows, self.group_size)

    def _matmul_aten(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.bfloat16(), self.aten_packed, self.group_size, self.aten_scales_and_zeros
        ).float()

    def weight_bytes(self) -> int:
        return self.packed.numel() + (self.scales.numel() + self.lows.numel()) * 4


def quantize_decoder(hf_model, scheme: str = "int8", group_size: int = 32, kernel: str = "aten"):
    """A copy of a tiny_gpt (a GPT2LMHeadModel) whose every linear layer in the blocks holds `scheme` weights.
    The embeddings, the tied output head and the LayerNorms stay fp32: a gather reads one row, not the matrix."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}; choose one of {SCHEMES}")
    blocks = getattr(getattr(hf_model, "transformer", None), "h", None)
    if blocks is None:
        raise TypeError(f"expected a GPT-2 model (ailab.models.tiny_gpt); got {type(hf_model).__name__}")
    model = copy.deepcopy(hf_model).eval()
    for block in model.transformer.h:
        for parent, name in (
            (block.attn, "c_attn"),
            (block.attn, "c_proj"),
            (block.mlp, "c_fc"),
            (block.mlp, "c_proj"),
        ):
            layer = getattr(parent, name)
            quantized = (
                Int8WeightOnlyLinear(layer, kernel)
                if scheme == "int8"
                else Int4WeightOnlyLinear(layer, group_size, kernel)
            )
            setattr(parent, name, quantized)
    return model


def round_trip_decoder(hf_model, bits: int, group_size: int = 32):
    """A copy of a tiny_gpt whose blocks' linear weights are replaced by quantize_groupwise's codes turned back into
    fp32 (dequantize_int4): the accuracy of any width from 1 to 8 bits, run by the fp32 kernels (no speed-up)."""
    model = copy.deepcopy(hf_model).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                w, _ = _weight_and_bias(layer)  # (out, in)
                back = dequantize_int4(*quantize_groupwise(w, group_size, bits), group_size)
                layer.weight.copy_(back.t() if type(layer).__name__ == "Conv1D" else back)
    return model


def linear_weight_bytes(hf_model) -> int:
    """Bytes of the blocks' linear weights as stored (codes, scales, offsets): what one decode step reads for them."""
    total = 0
    for module in hf_model.transformer.h.modules():
        if isinstance(module, _WeightOnlyLinear):
            total += module.weight_bytes()
        elif type(module).__name__ == "Conv1D":
            total += module.weight.numel() * module.weight.element_size()
    return total
