"""KV-cache arithmetic for published decoder configs, paging vs per-sequence reservations, and an LRU
of models under a memory budget. Everything here is arithmetic, not a measurement, and says so.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ailab.memory.estimate import kv_cache_bytes


@dataclass(frozen=True)
class DecoderConfig:
    """The published numbers that decide a decoder's KV cache (copied from the named source)."""

    name: str
    params_billion: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    source: str

    def kv_bytes(self, seq_len: int, batch: int, dtype="float16") -> int:
        return kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, seq_len, batch, dtype)

    def kv_bytes_per_token(self, dtype="float16") -> int:
        return self.kv_bytes(1, 1, dtype)


# Numbers from each model's config.json on the Hugging Face Hub (num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size / num_attention_heads, max_position_embeddings) and its paper.
PUBLISHED_CONFIGS = {
    "Llama-2-7B": DecoderConfig(
        "Llama-2-7B",
        6.74,
        32,
        32,
        32,
        128,
        4096,
        "meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023, arXiv:2307.09288",
    ),
    "Llama-2-13B": DecoderConfig(
        "Llama-2-13B", 13.0, 40, 40, 40, 128, 4096, "meta-llama/Llama-2-13b-hf config.json; arXiv:2307.09288"
    ),
    "Llama-2-70B": DecoderConfig(
        "Llama-2-70B",
        69.0,
        80,
        64,
        8,
        128,
        4096,
        "meta-llama/Llama-2-70b-hf config.json (GQA, 8 KV heads); arXiv:2307.09288",
    ),
    "Mistral-7B-v0.1": DecoderConfig(
        "Mistral-7B-v0.1",
        7.24,
        32,
        32,
        8,
        128,
        32768,
        "mistralai/Mistral-7B-v0.1 config.json (GQA, 8 KV heads); Jiang et al. 2023, arXiv:2310.06825",
    ),
    "Llama-3-8B": DecoderConfig(
        "Llama-3-8B", 8.03, 32, 32, 8, 128, 8192, "meta-llama/Meta-Llama-3-8B config.json (GQA, 8 KV heads)"
    ),
}


def request_lengths(n: int, seed: int = 0, median: int = 400, sigma: float = 0.9, max_len: int = 4096) -> np.ndarray:
    """Token counts (prompt + output) of `n` chat-like requests: log-normal, capped at `max_len`.

    Real traffic is right-skewed (many short requests, a few long ones); a log-normal is the usual
    stand-in. The parameters are an assumption, shown next to every figure that uses them.
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n!r}")
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(median), sigma, n).round().astype(int), 1, max_len)


def reservation_waste(lengths, max_len: int, block_size: int = 16) -> dict:
    """Tokens of KV cache reserved vs used, for per-sequence max reservation and for fixed-size blocks.

    Reserving `max_len` slots per sequence wastes everything a sequence does not use. Paging (vLLM's
    PagedAttention) hands out `block_size`-token blocks on demand, so a sequence wastes at most the
    unused tail of its last block.
    """
    lengths = np.asarray(lengths)
    if lengths.size == 0 or np.any(lengths <= 0):
        raise ValueError("lengths must be a non-empty list of positive token counts")
    if max_len <= 0 or block_size <= 0:
        raise ValueError(f"max_len and block_size must be positive (got max_len={max_len}, block_size={block_size})")
    if np.any(lengths > max_len):
        raise ValueError(f"a length exceeds max_len={max_len}; per-sequence reservation cannot hold it")
    used = int(lengths.sum())
    reserved_max = int(max_len * lengths.size)
    reserved_paged = int((np.ceil(lengths / block_size) * block_size).sum())
    return {
        "used_tokens": used,
        "reserved_max_tokens": reserved_max,
        "reserved_paged_tokens": reserved_paged,
        "waste_frac_max": 1 - used / reserved_max,
        "waste_frac_paged": 1 - used / reserved_paged,
    }


def simulate_lru(model_bytes: dict[str, int], requests: list[str], budget_bytes: int) -> dict:
    """Serve `requests` (model names) keeping models in memory, evicting the least recently used one
    whenever loading the next would exceed `budget_bytes`. Returns loads, hits, evictions, peak bytes."""
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes!r}")
    too_big = [m for m, b in model_bytes.items() if b > budget_bytes]
    if too_big:
        raise ValueError(f"models {too_big} are larger than budget_bytes={budget_bytes} on their own")
    loaded: OrderedDict[str, int] = OrderedDict()
    loads = hits = evictions = peak = 0
    for name in requests:
        if name not in model_bytes:
            raise ValueError(f"request for unknown model {name!r}; known: {sorted(model_bytes)}")
        if name in loaded:
            loaded.move_to_end(name)
            hits += 1
            continue
        while sum(loaded.values()) + model_bytes[name] > budget_bytes:
            loaded.popitem(last=False)  # the least recently used model leaves first
            evictions += 1
        loaded[name] = model_bytes[name]
        loads += 1
        peak = max(peak, sum(loaded.values()))
    return {
        "loads": loads,
        "hits": hits,
        "evictions": evictions,
        "peak_bytes": peak,
        "hit_rate": hits / len(requests) if requests else 0.0,
    }


def _unit(nbytes: float) -> tuple[str, int]:
    for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return name, size
    return "bytes", 1


def kv_view(config: DecoderConfig, seq_len: int, batch: int, dtype="float16", measured: dict | None = None) -> dict:
    """What the KV-cache widget draws (arithmetic, not a measurement): the cache of `config` against
    sequence length at `batch` in `dtype`, beside the weights in the same dtype, titled with the size at
    `seq_len`. `measured` ({(seq_len, batch, dtype): bytes}) names a cache allocated for real; when the
    chosen point is one, the title compares it with the formula. Returns viz.line_chart kwargs.
    """
    from ailab.memory.estimate import dtype_bytes, param_bytes

    for name, value in (("seq_len", seq_len), ("batch", batch)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if seq_len > config.max_context:
        raise ValueError(f"seq_len={seq_len} is past {config.name}'s context window of {config.max_context} tokens")
    dtype_bytes(dtype)  # a ValueError naming the known dtypes
    chosen = config.kv_bytes(int(seq_len), int(batch), dtype)
    lengths = sorted(
        {n for n in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768) if n <= config.max_context}
        | {int(seq_len), config.max_context}
    )
    weights = param_bytes(int(config.params_billion * 1e9), dtype) if config.params_billion > 0 else 0
    unit, size = _unit(max(config.kv_bytes(lengths[-1], int(batch), dtype), weights))
    series = {f"KV cache, batch {batch}, {dtype}": [config.kv_bytes(n, int(batch), dtype) / size for n in lengths]}
    if weights:
        series[f"weights, {dtype}"] = [weights / size] * len(lengths)
    cu, cs = _unit(chosen)
    title = f"{config.name}, {seq_len} tokens x batch {batch}, {dtype}: KV cache {chosen / cs:.2f} {cu}"
    if weights:
        title += f" ({chosen / weights:.0%} of the weights)"
    key = (int(seq_len), int(batch), dtype)
    if measured and key in measured:
        got = measured[key]
        title += f"; allocated for real here: {got:,} bytes, " + (
            "the formula's count exactly" if got == chosen else f"the formula says {chosen:,}"
        )
    return {
        "x": lengths,
        "series": series,
        "title": title,
        "x_title": "tokens per sequence",
        "y_title": unit,
        "subtitle": f"{config.name}: {config.layers} layers x {config.kv_heads} KV heads x {config.head_dim}; "
        "arithmetic on the config, not a measurement",
        "log_x": True,
    }
