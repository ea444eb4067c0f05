"""Independent wrong answers for ex_kv_budget, written from labs/1_hardware/ex_kv_budget.ipynb's contract alone."""

import math


def max_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return budget_bytes // (per_token * tokens)


def rounds_blocks_to_nearest(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Rounds the number of blocks with round() instead of up, so 200 tokens in blocks of 16 hold 12 blocks."""
    # differs on: (384, 1, 1, 1, 200, 1, 16) -> right 0 (a sequence holds 208 tokens = 416 bytes), wrong 1
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else round(seq_len / block_tokens) * block_tokens
    return budget_bytes // (per_token * tokens)


def float_division_then_int(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Divides the budget with / and truncates with int(), which rounds up a quotient just below a whole number once
    the numbers pass float precision."""
    # differs on: (3 * 2**55 * 2 - 1, 1, 1, 1, 3, 1) -> right 2**55 - 1, wrong 2**55
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else math.ceil(seq_len / block_tokens) * block_tokens
    return int(budget_bytes / (per_token * tokens))


def one_more_block(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Rounds up by adding one block to the floor division, so a length that fills its blocks exactly gets an extra
    block."""
    # differs on: (2 * 192, 1, 1, 1, 192, 1, 16) -> right 1, wrong 0 (208 tokens)
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else (seq_len // block_tokens + 1) * block_tokens
    return budget_bytes // (per_token * tokens)


def last_sequence_must_fit_strictly(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Counts ceil(budget / per-sequence) - 1, dropping 'the sequence that does not fully fit', which also drops a
    sequence that fits exactly."""
    # differs on: (2 * 10, 1, 1, 1, 10, 1) -> right 1, wrong 0; budget 0 -> wrong -1
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return math.ceil(budget_bytes / (per_token * tokens)) - 1


def blocks_shared_across_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Rounds the budget down to whole blocks but then packs sequences into the pooled tokens, as if one block could
    hold the end of one sequence and the start of the next."""
    # differs on: (2 * 400, 1, 1, 1, 200, 1, 16) -> right 1 (208 tokens each), wrong 2 (25 blocks = 400 tokens)
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    if block_tokens is None:
        return budget_bytes // (per_token * seq_len)
    blocks = budget_bytes // (per_token * block_tokens)
    return blocks * block_tokens // seq_len


RIGHT = {"max_sequences": max_sequences}
WRONG = [
    ("max_sequences", rounds_blocks_to_nearest, "units/rounding"),
    ("max_sequences", float_division_then_int, "units/rounding"),
    ("max_sequences", one_more_block, "boundaries"),
    ("max_sequences", last_sequence_must_fit_strictly, "boundaries"),
    ("max_sequences", blocks_shared_across_sequences, "misread prose"),
]
