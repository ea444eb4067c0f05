"""Memory arithmetic before you run: parameter, activation and KV-cache bytes, and the safe line.

Every estimator refuses zero/negative sizes and unknown dtypes with a ValueError naming the
argument, because a silent 0-byte estimate is how a service gets sized wrong.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

# Bytes per element. Strings are accepted so a config file or a widget can name the dtype.
DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_ALIASES = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "long": "int64",
}


def dtype_bytes(dtype: torch.dtype | str, arg: str = "dtype") -> int:
    """Bytes per element of `dtype` (a torch.dtype or a name such as "float16" / "bf16")."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype.lower().removeprefix("torch."), dtype.lower().removeprefix("torch."))
        if name in DTYPE_BYTES:
            return DTYPE_BYTES[name]
    raise ValueError(
        f"{arg}={dtype!r} is not a dtype ailab knows; use a torch.dtype or one of "
        f"{sorted(DTYPE_BYTES)} (or {sorted(_ALIASES)})"
    )


def _positive(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        if value <= 0:
            raise ValueError(
                f"{name} must be positive, got {value!r}: a model or batch with no {name} has no memory to estimate"
            )


def param_bytes(model_or_count: torch.nn.Module | int, dtype: torch.dtype | str | None = None) -> int:
    """Bytes the weights take: a module's parameters and buffers as stored, or `count` params in `dtype`.

    With a module and a `dtype`, the answer is for the module cast to that dtype (what .half() would give).
    """
    if isinstance(model_or_count, torch.nn.Module):
        tensors = list(model_or_count.parameters()) + list(model_or_count.buffers())
        if dtype is None:
            return sum(t.numel() * t.element_size() for t in tensors)
        size = dtype_bytes(dtype)
        # Integer buffers (position ids) are not cast by .half(); only floating tensors change size.
        return sum(t.numel() * (size if t.is_floating_point() else t.element_size()) for t in tensors)
    _positive(n_params=model_or_count)
    if dtype is None:
        raise ValueError("dtype is needed when param_bytes() is given a parameter count, e.g. dtype='float16'")
    return int(model_or_count) * dtype_bytes(dtype)


@dataclass(frozen=True)
class EncoderShape:
    """The sizes of a BERT-style encoder that decide its activation memory."""

    layers: int
    hidden: int
    intermediate: int
    heads: int

    @classmethod
    def from_config(cls, config) -> "EncoderShape":
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads)


MINILM_SHAPE = EncoderShape(layers=6, hidden=384, intermediate=1536, heads=12)  # all-MiniLM-L6-v2 config.json


def activation_bytes(
    batch: int,
    seq_len: int,
    shape: EncoderShape = MINILM_SHAPE,
    dtype: torch.dtype | str = "float32",
    padded: bool = True,
) -> int:
    """Peak activation bytes of one inference forward (no_grad) of a BERT encoder with SDPA attention.

    In inference each layer's tensors are freed as soon as the next op no longer needs them, so the
    peak does not grow with the number of layers. It sits in the feed-forward block, during GELU:
      - 3 hidden-sized tensors (B, T, H): the embeddings output (still referenced by BertModel.forward),
        the layer's input, and the attention block's output (kept for the residual add);
      - 2 intermediate-sized tensors (B, T, I): the up-projection output and the GELU output,
        which exist together while GELU runs;
      - when any position is padding, a boolean (B, 1, T, T) attention mask, 1 byte per element.
    SDPA never materialises the (B, heads, T, T) score matrix on this path, so there is no T^2 * heads term.
    Counted with the CPU allocator's own bookkeeping, this formula matches MiniLM exactly (see
    notebooks/1_hardware/02_safe_batch.ipynb); on a GPU the kernels differ and it is an estimate.
    """
    _positive(batch=batch, seq_len=seq_len)
    size = dtype_bytes(dtype)
    tokens = batch * seq_len
    live = tokens * (3 * shape.hidden + 2 * shape.intermediate) * size  # bytes
    mask = batch * seq_len * seq_len if padded else 0  # bool (B, 1, T, T)
    return live + mask


def forward_bytes(
    n_params: int, batch: int, seq_len: int, shape: EncoderShape = MINILM_SHAPE, dtype: torch.dtype | str = "float32"
) -> int:
    """Weights + peak activations: what one forward needs on the device."""
    return param_bytes(n_params, dtype) + activation_bytes(batch, seq_len, shape, dtype)


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, seq_len: int, batch: int, dtype: torch.dtype | str = "float16"
) -> int:
    """Bytes of a decoder's KV cache: K and V (the 2), per layer, per KV head, per token, per sequence.

    With grouped-query attention (GQA) several query heads share one KV head, so pass the number of
    *KV* heads (Mistral-7B: 8), not of query heads (32).
    """
    _positive(layers=layers, kv_heads=kv_heads, head_dim=head_dim, seq_len=seq_len, batch=batch)
    return 2 * layers * kv_heads * head_dim * seq_len * batch * dtype_bytes(dtype)


def safe_line(base_bytes: float, peak_bytes: float, headroom: float = 1.2) -> float:
    """The source's rule: (memory after loading + peak of the largest batch) x 1.2 headroom."""
    if base_bytes < 0:
        raise ValueError(f"base_bytes must be >= 0, got {base_bytes!r}")
    if peak_bytes < 0:
        raise ValueError(f"peak_bytes must be >= 0, got {peak_bytes!r}")
    if headroom < 1:
        raise ValueError(f"headroom must be >= 1 (1.2 keeps 20 % spare), got {headroom!r}")
    return (base_bytes + peak_bytes) * headroom
