"""The KV-budget exercise's checks pass the right answer and reject plausible wrong ones.

max_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None) -> int
| question | what the checks try |
|---|---|
| which input varies each field | each argument alone on a fixed budget (layers 1/8, kv_heads 1/8, head_dim 64/96, seq_len 1/100/4800, dtype_bytes 1/2/4); published configs with grouped-query attention |
| boundaries | exactly n sequences, one byte short, one byte more; exactly one; zero budget; a block longer than the sequence; a length that is a multiple of the block; block_tokens 1, None and left out |
| a type the notes never show | budgets of 40 GiB against sequences of a few hundred kB (large ints); the answer an int, not a float |
| order or ties | - |
| errors: type and message | - (nothing to refuse) |
| policy: which item | who owns a block: one sequence (20 blocks hold 10 sequences of 20 tokens in blocks of 16, not 16) |


Each wrong answer is one class of mistake (K or V forgotten, rounding to the nearest or up instead of down, a
float, a constant where an argument belongs, blocks rounded down or always one more, blocks pooled across
sequences, paging ignored, an off-by-one at the exact fit); each is rejected with the message that names it.
"""

import math

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import ex_kv_budget as L


def max_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return budget_bytes // (2 * layers * kv_heads * head_dim * dtype_bytes * tokens)


def max_sequences_alt(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Also right: count blocks per sequence with math.ceil, then bytes per block."""
    block = block_tokens or 1
    blocks = math.ceil(seq_len / block)
    per_block = 2 * layers * kv_heads * head_dim * dtype_bytes * block
    return int(budget_bytes // (blocks * per_block))


def _per_seq(layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None, kv=2):
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return kv * layers * kv_heads * head_dim * dtype_bytes * tokens


def only_keys(budget, *shape, block_tokens=None):
    return budget // _per_seq(*shape, block_tokens=block_tokens, kv=1)


def rounds_to_nearest(budget, *shape, block_tokens=None):
    return round(budget / _per_seq(*shape, block_tokens=block_tokens))


def rounds_up(budget, *shape, block_tokens=None):
    return math.ceil(budget / _per_seq(*shape, block_tokens=block_tokens))


def returns_float(budget, *shape, block_tokens=None):
    return float(max_sequences(budget, *shape, block_tokens=block_tokens))


def fp16_always(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    return max_sequences(budget, layers, kv_heads, head_dim, seq_len, 2, block_tokens)


def one_kv_head(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Forgets the KV heads (as if one head held the whole hidden size of the notes' example)."""
    return max_sequences(budget, layers, 2, head_dim, seq_len, dtype_bytes, block_tokens)


def blocks_round_down(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    tokens = seq_len if block_tokens is None else max(1, seq_len // block_tokens) * block_tokens
    return budget // (2 * layers * kv_heads * head_dim * dtype_bytes * tokens)


def blocks_always_one_more(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    tokens = seq_len if block_tokens is None else (seq_len // block_tokens + 1) * block_tokens
    return budget // (2 * layers * kv_heads * head_dim * dtype_bytes * tokens)


def pooled_blocks(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Counts the blocks the budget holds, then how many sequences' tokens those blocks add up to."""
    if block_tokens is None:
        return max_sequences(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes)
    per_block = 2 * layers * kv_heads * head_dim * dtype_bytes * block_tokens
    return (budget // per_block) * block_tokens // seq_len


def ignores_blocks(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    return max_sequences(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes)


def strict_fit(budget, *shape, block_tokens=None):
    """Counts a sequence only when there is room to spare after it."""
    per = _per_seq(*shape, block_tokens=block_tokens)
    n = 0
    while (n + 1) * per < budget:
        n += 1
    return n


def stub(*a, **k):
    raise NotImplementedError("max_sequences() is not implemented yet")


CHECKS = [L.check_boundary, L.check_arguments, L.check_blocks, L.check_same_as_reference]


@pytest.mark.parametrize("fn", [max_sequences, max_sequences_alt])
def test_right_answers_pass(fn):
    for chk in CHECKS:
        chk(fn)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (L.check_boundary, only_keys, r"exactly 5 sequences' worth .*: 5 sequence\(s\) fit; got 10.*key AND its value"),
        (L.check_arguments, only_keys, r"12 sequences fit; got 24\. That is twice the right answer.*key AND its value"),
        (L.check_boundary, rounds_to_nearest, r"one byte short of 5 sequences .*: 4 sequence\(s\) fit; got 5"),
        (L.check_boundary, rounds_up, r"one byte short of 5 sequences .*: 4 sequence\(s\) fit; got 5"),
        (L.check_boundary, returns_float, r"should return a whole number of sequences \(an int\); got float"),
        (L.check_boundary, strict_fit, r"exactly 5 sequences' worth .*got 4"),
        (L.check_arguments, fp16_always, r"Does your formula use dtype_bytes\?"),
        (L.check_arguments, one_kv_head, r"Does your formula use kv_heads\?"),
        (L.check_blocks, blocks_round_down, r"seq_len=200 in blocks of 16 tokens: each sequence holds 208"),
        (L.check_blocks, blocks_always_one_more, r"seq_len=192 in blocks of 16 tokens: each sequence holds 192"),
        (L.check_blocks, pooled_blocks, r"seq_len=200 in blocks of 16 tokens.*one byte short of 7 such.*fits 6; got 7"),
        (L.check_blocks, ignores_blocks, r"seq_len=200 in blocks of 16 tokens: each sequence holds 208"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_pooling_has_its_own_message():
    def pooled_only_when_shorter(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
        if block_tokens is not None and seq_len == 20:
            return pooled_blocks(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens)
        return max_sequences(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens)

    with pytest.raises(LabCheckFailed, match=r"a block is never shared between sequences.*got 16"):
        L.check_blocks(pooled_only_when_shorter)


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


# --------------------------------------------------------------------------- the differential check (issue 42)


def float_division(budget, *shape, block_tokens=None):
    """Units and rounding: a true division truncated, int(budget / per_seq): past 2**53 bytes the float is rounded."""
    return int(budget / _per_seq(*shape, block_tokens=block_tokens))


def works_in_kib(budget, *shape, block_tokens=None):
    """Units and rounding: budget and sequence in whole KiB (to keep the numbers small): both are rounded first."""
    return (budget // 1024) // math.ceil(_per_seq(*shape, block_tokens=block_tokens) / 1024)


def int32_bytes(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Boundaries: the bytes per sequence as a numpy int32 product, which wraps past 2**31 (a 70B model, 32k tokens)."""
    import numpy as np

    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    with np.errstate(over="ignore"):
        per_seq = int(np.prod(np.array([2, layers, kv_heads, head_dim, dtype_bytes, tokens]), dtype=np.int32))
    return budget // per_seq if per_seq > 0 else 0


def short_sequence_own_length(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """Boundaries: a sequence shorter than one block is given its own length, not a whole block."""
    if block_tokens is not None and seq_len < block_tokens:
        block_tokens = None
    return max_sequences(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens)


_PER_SEQ_BY_MODEL: dict = {}


def cached_per_model(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """State: the bytes per sequence cached by the model's shape, so a later seq_len or block size is not seen."""
    key = (layers, kv_heads, head_dim, dtype_bytes)
    if key not in _PER_SEQ_BY_MODEL:
        _PER_SEQ_BY_MODEL[key] = _per_seq(layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens)
    return budget // _PER_SEQ_BY_MODEL[key]


_PER_TOKEN_BY_SHAPE: dict = {}


def cached_per_token(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """State: bytes per token memoised by (layers, kv_heads, head_dim), so a later dtype_bytes is not seen."""
    key = (layers, kv_heads, head_dim)
    per_token = _PER_TOKEN_BY_SHAPE.setdefault(key, 2 * layers * kv_heads * head_dim * dtype_bytes)
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return budget // (per_token * tokens)


def test_right_answers_agree_with_the_reference():
    for fn in (max_sequences, max_sequences_alt):
        L.check_same_as_reference(fn)


@pytest.mark.parametrize(
    "wrong",
    [
        only_keys,
        rounds_to_nearest,
        rounds_up,
        returns_float,
        fp16_always,
        one_kv_head,
        blocks_round_down,
        blocks_always_one_more,
        pooled_blocks,
        ignores_blocks,
        strict_fit,
        float_division,
        works_in_kib,
        int32_bytes,
        short_sequence_own_length,
        cached_per_model,
        cached_per_token,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(LabCheckFailed, match=r"sequence\(s\) fit; yours says|an int\) like|two different answers"):
        L.check_same_as_reference(wrong)


@pytest.mark.parametrize(
    "wrong", [float_division, works_in_kib, int32_bytes, short_sequence_own_length, cached_per_model, cached_per_token]
)
def test_the_new_wrong_answers_fail_the_checks_together(wrong):
    failed = 0
    for chk in CHECKS:
        try:
            chk(wrong)
        except LabCheckFailed:
            failed += 1
    assert failed


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(blocks_round_down)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "bytes per sequence" in str(e.value) and "; yours says" in str(e.value)
