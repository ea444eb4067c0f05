"""Independent wrong answers for lab_estimate_memory, written from labs/1_hardware/lab_estimate_memory.ipynb's contract
alone."""

import torch


def param_bytes(n_params: int, dtype: torch.dtype) -> int:
    return n_params * torch.empty((), dtype=dtype).element_size()


def activation_bytes(batch: int, seq_len: int, hidden: int, intermediate: int, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    return batch * seq_len * (3 * hidden + 2 * intermediate) * size + batch * seq_len * seq_len


def kv_cache_bytes(config, seq_len: int, batch: int, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    return 2 * config.layers * config.kv_heads * config.head_dim * seq_len * batch * size


def param_bytes_from_float_bits(n_params, dtype):
    """Reads the element size from torch.finfo(dtype).bits, which refuses integer dtypes such as int8."""
    # differs on: param_bytes(10, torch.int8) -> right 10, wrong TypeError
    return n_params * (torch.finfo(dtype).bits // 8)


_SIZES = {torch.float32: 4, torch.float16: 2, torch.int8: 1, torch.float64: 8}


def param_bytes_size_table(n_params, dtype):
    """Looks the element size up in a hand-written table that forgets bfloat16 and falls back to 4 bytes."""
    # differs on: param_bytes(10, torch.bfloat16) -> right 20, wrong 40
    return n_params * _SIZES.get(dtype, 4)


def activation_without_mask(batch, seq_len, hidden, intermediate, dtype):
    """Leaves the attention mask out, since the signature has no argument saying the batch is padded."""
    # differs on: activation_bytes(1, 4, 2, 3, torch.float32) -> right 208, wrong 192
    size = torch.empty((), dtype=dtype).element_size()
    return batch * seq_len * (3 * hidden + 2 * intermediate) * size


def activation_mask_per_token(batch, seq_len, hidden, intermediate, dtype):
    """Counts the mask as the (B, T) attention_mask the tokenizer returns, not the (B, 1, T, T) one the model
    builds."""
    # differs on: activation_bytes(1, 4, 2, 3, torch.float32) -> right 208, wrong 196
    size = torch.empty((), dtype=dtype).element_size()
    return batch * seq_len * (3 * hidden + 2 * intermediate) * size + batch * seq_len


def activation_in_bits(batch, seq_len, hidden, intermediate, dtype):
    """Multiplies by torch.finfo(dtype).bits, the element size in bits, not bytes."""
    # differs on: activation_bytes(1, 4, 2, 3, torch.float32) -> right 208, wrong 1552
    bits = torch.finfo(dtype).bits
    return batch * seq_len * (3 * hidden + 2 * intermediate) * bits + batch * seq_len * seq_len


def kv_heads_as_group_size(config, seq_len, batch, dtype):
    """Reads 'several query heads share one KV head' as a multiplier: uses heads // kv_heads (the group size) where
    the number of KV heads belongs."""
    # differs on: Llama-2-7B (32 heads, 32 KV heads), seq 1, batch 1, fp16 -> right 524288, wrong 16384
    size = torch.empty((), dtype=dtype).element_size()
    group = config.heads // config.kv_heads
    return 2 * config.layers * group * config.head_dim * seq_len * batch * size


RIGHT = {"param_bytes": param_bytes, "activation_bytes": activation_bytes, "kv_cache_bytes": kv_cache_bytes}
WRONG = [
    ("param_bytes", param_bytes_from_float_bits, "units/rounding"),
    ("param_bytes", param_bytes_size_table, "boundaries"),
    ("activation_bytes", activation_without_mask, "misread prose"),
    ("activation_bytes", activation_mask_per_token, "misread prose"),
    ("activation_bytes", activation_in_bits, "units/rounding"),
    ("kv_cache_bytes", kv_heads_as_group_size, "misread prose"),
]
