"""Exercise checks: how many sequences fit in a KV-cache budget, with and without paging (topic H3).

The learner writes
  max_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None) -> int
      one sequence of `seq_len` tokens keeps K and V for every layer and KV head: 2 x layers x kv_heads x head_dim
      x dtype_bytes bytes per token. Without `block_tokens` it takes exactly seq_len tokens' worth; with it, the
      cache is handed out in blocks of `block_tokens` tokens and a sequence holds whole blocks of its own (its
      length rounded up to a multiple of block_tokens, as in paged attention). The answer is how many whole
      sequences fit in budget_bytes.

The checks are derived from what the function must guarantee:
  the boundary both ways (a budget that is exactly n sequences gives n, one byte less gives n - 1, one byte more
  still n); zero budget and a budget under one sequence give 0; an int, not a float; every argument used on its
  own (layers, kv_heads - grouped-query attention -, head_dim, seq_len, dtype_bytes 1, 2 and 4), against ailab's
  own KV formula on published configs; blocks: a length that is not a multiple of the block rounds up, one that
  is does not gain a block, a block longer than the sequence is one block, block_tokens=1 and None agree, and a
  block belongs to one sequence (blocks are not pooled across sequences).
  Then the same answer as a reference written from this contract on generated shapes: budgets at n sequences and
  one byte either side, zero, and far beyond 2**53 (where a float division is no longer exact); one layer, one
  head, one token; blocks of 1, of the sequence's length, a divisor, and longer than it.
"""

from __future__ import annotations

import numbers

from ailab import memory
from ailab.labs.core import check, expect
from ailab.labs.differential import same_as_reference

LAB = "ex_kv_budget"
GiB = 2**30
# layers=4, kv_heads=2, head_dim=32, fp16: 2 x 4 x 2 x 32 x 2 = 1,024 bytes per token
SMALL = {"layers": 4, "kv_heads": 2, "head_dim": 32, "dtype_bytes": 2}
PER_TOKEN = 1024


def _n(fn, budget, what, **kw) -> int:
    args = {**SMALL, **kw}
    out = fn(
        budget,
        args["layers"],
        args["kv_heads"],
        args["head_dim"],
        args["seq_len"],
        args["dtype_bytes"],
        **({"block_tokens": args["block_tokens"]} if "block_tokens" in args else {}),
    )
    expect(
        isinstance(out, numbers.Integral) and not isinstance(out, bool),
        f"{what}: max_sequences() should return a whole number of sequences (an int); got {type(out).__name__} {out!r}",
    )
    return int(out)


def _twice(got: int, want: int) -> str:
    return (
        " That is twice the right answer: a token keeps two tensors per layer and KV head, its key AND its value."
        if want > 0 and got == 2 * want
        else ""
    )


def _describe(**kw) -> str:
    args = {**SMALL, **kw}
    return ", ".join(f"{k}={v}" for k, v in args.items())


@check(LAB, "the boundary: exactly n sequences, one byte short, zero")
def check_boundary(max_sequences):
    per_seq = 200 * PER_TOKEN  # 204,800 bytes for 200 tokens
    cases = [
        (5 * per_seq, 5, "exactly 5 sequences' worth"),
        (5 * per_seq - 1, 4, "one byte short of 5 sequences"),
        (5 * per_seq + 1, 5, "one byte more than 5 sequences"),
        (per_seq, 1, "exactly one sequence"),
        (per_seq - 1, 0, "one byte short of a single sequence"),
        (0, 0, "a zero budget"),
        (123 * per_seq + per_seq // 2, 123, "123 and a half sequences' worth"),
    ]
    for budget, want, what in cases:
        got = _n(max_sequences, budget, what, seq_len=200)
        expect(
            got == want,
            f"{what} ({budget:,} bytes; {_describe(seq_len=200)} -> {per_seq:,} bytes per sequence): "
            f"{want} sequence(s) fit; got {got}. Only whole sequences count, and a sequence that "
            "does not fit entirely does not fit" + _twice(got, want),
        )


@check(LAB, "every argument counts, grouped-query attention included")
def check_arguments(max_sequences):
    base = {"layers": 4, "kv_heads": 2, "head_dim": 32, "seq_len": 200, "dtype_bytes": 2}
    budget = 24 * 200 * PER_TOKEN  # 24 sequences of the base shape
    for name, value, want in [
        ("layers", 8, 12),
        ("layers", 1, 96),
        ("kv_heads", 8, 6),
        ("kv_heads", 1, 48),
        ("head_dim", 64, 12),
        ("head_dim", 96, 8),
        ("seq_len", 100, 48),
        ("seq_len", 1, 4800),
        ("seq_len", 4800, 1),
        ("dtype_bytes", 1, 48),
        ("dtype_bytes", 4, 12),
    ]:
        kw = {**base, name: value}
        got = _n(max_sequences, budget, f"{name}={value}", **kw)
        expect(
            got == want,
            f"budget {budget:,} bytes with {_describe(**kw)}: {want} sequences fit; got {got}."
            + (
                _twice(got, want)
                or f" Does your formula use {name}? (the same budget fits 24 sequences at {name}={base[name]})"
            ),
        )
    for cfg in memory.PUBLISHED_CONFIGS.values():
        for seq_len, dtype_bytes, dtype in [(4096, 2, "float16"), (1000, 1, "int8"), (512, 4, "float32")]:
            per_seq = cfg.kv_bytes(seq_len, 1, dtype)
            want = (40 * GiB) // per_seq
            got = _n(
                max_sequences,
                40 * GiB,
                f"{cfg.name}",
                layers=cfg.layers,
                kv_heads=cfg.kv_heads,
                head_dim=cfg.head_dim,
                seq_len=seq_len,
                dtype_bytes=dtype_bytes,
            )
            expect(
                got == want,
                f"{cfg.name} ({cfg.layers} layers, {cfg.heads} query heads but {cfg.kv_heads} KV heads, "
                f"head_dim {cfg.head_dim}), {seq_len} tokens, {dtype_bytes}-byte {dtype}, 40 GiB: "
                f"{want} sequences fit ({per_seq:,} bytes each: keys AND values, per layer and KV "
                f"head); got {got}." + _twice(got, want),
            )


@check(LAB, "paged: each sequence holds whole blocks of its own")
def check_blocks(max_sequences):
    cases = [  # seq_len, block_tokens, tokens held per sequence
        (200, 16, 208),
        (192, 16, 192),
        (193, 16, 208),
        (10, 16, 16),
        (1, 16, 16),
        (200, 1, 200),
        (200, 200, 200),
        (200, 64, 256),
        (4096, 16, 4096),
    ]
    for seq_len, block, held in cases:
        for n in (1, 7):
            budget = n * held * PER_TOKEN
            for b, want, edge in [(budget, n, "exactly"), (budget - 1, n - 1, "one byte short of")]:
                got = _n(max_sequences, b, "paged", seq_len=seq_len, block_tokens=block)
                expect(
                    got == want,
                    f"seq_len={seq_len} in blocks of {block} tokens: each sequence holds {held} "
                    f"tokens' worth ({held // block} whole block(s)); a budget of {edge} {n} such "
                    f"sequences ({b:,} bytes, {_describe(seq_len=seq_len, block_tokens=block)}) fits "
                    f"{want}; got {got}",
                )
    plain = _n(max_sequences, 7 * 200 * PER_TOKEN, "block_tokens=None", seq_len=200, block_tokens=None)
    expect(
        plain == 7, f"block_tokens=None means no paging: 7 sequences of 200 tokens in exactly their bytes; got {plain}"
    )
    default = _n(max_sequences, 7 * 200 * PER_TOKEN, "block_tokens left out", seq_len=200)
    expect(default == 7, f"block_tokens left out means no paging: 7 sequences; got {default}")
    # A block is one sequence's: 20 blocks of 16 tokens hold 10 sequences of 20 tokens (2 blocks each), not 16.
    got = _n(max_sequences, 20 * 16 * PER_TOKEN, "pooled blocks", seq_len=20, block_tokens=16)
    expect(
        got == 10,
        "a budget of 20 blocks of 16 tokens, sequences of 20 tokens: each sequence needs 2 blocks of its "
        f"own (a block is never shared between sequences), so 10 fit; got {got}",
    )


def _reference_max_sequences(budget_bytes, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=None):
    """The contract, in integers from start to end."""
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    return budget_bytes // (2 * layers * kv_heads * head_dim * dtype_bytes * tokens)


def _shapes():
    """Hypothesis: (budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens) from the contract."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        layers = d(st.one_of(st.sampled_from([1, 2, 32, 80]), st.integers(1, 128)))
        kv_heads = d(st.one_of(st.sampled_from([1, 8]), st.integers(1, 64)))
        head_dim = d(st.one_of(st.sampled_from([1, 64, 128]), st.integers(1, 256)))
        seq_len = d(st.one_of(st.sampled_from([1, 16, 200, 4096, 32_768]), st.integers(1, 200_000)))
        dtype_bytes = d(st.sampled_from([1, 2, 4, 8]))
        block = d(
            st.one_of(
                st.none(),
                st.sampled_from([1, 16, seq_len, seq_len + 1]),
                st.integers(1, 2 * seq_len + 2),
                st.integers(1, 64).filter(lambda b: seq_len % b == 0),
            )
        )
        tokens = seq_len if block is None else -(-seq_len // block) * block
        per_seq = 2 * layers * kv_heads * head_dim * dtype_bytes * tokens
        n = d(
            st.one_of(
                st.sampled_from([0, 1, 2]), st.integers(0, 10_000), st.integers(2**53 // per_seq, 2**62 // per_seq)
            )
        )
        budget = max(0, n * per_seq + d(st.sampled_from([0, 0, -1, 1, per_seq // 2])))
        return budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block

    return draw()


def _whole_and_equal(mine, ref) -> str | None:
    if not isinstance(mine, numbers.Integral) or isinstance(mine, bool):
        return (
            f"your answer should be a whole number of sequences (an int) like {ref}; got {type(mine).__name__} {mine!r}"
        )
    if int(mine) != ref:
        return f"{ref} sequence(s) fit; yours says {int(mine)}" + _twice(int(mine), ref)
    return None


def _say(budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens):
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = seq_len if block_tokens is None else -(-seq_len // block_tokens) * block_tokens
    held = "" if block_tokens is None else f" (held as {tokens} tokens in blocks of {block_tokens})"
    return (
        f"max_sequences({budget}, layers={layers}, kv_heads={kv_heads}, head_dim={head_dim}, seq_len={seq_len}, "
        f"dtype_bytes={dtype_bytes}, block_tokens={block_tokens}) - {per_token:,} bytes per token, "
        f"{per_token * tokens:,} bytes per sequence{held}"
    )


@check(LAB, "the same count as the reference on every shape and budget tried")
def check_same_as_reference(max_sequences):
    same_as_reference(
        lambda budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens: max_sequences(
            budget, layers, kv_heads, head_dim, seq_len, dtype_bytes, block_tokens=block_tokens
        ),
        _reference_max_sequences,
        _shapes(),
        describe=_say,
        compare=_whole_and_equal,
        edges=[  # an exact fit first: an answer that counts one by one fails here, before the huge budget
            (5 * 200 * PER_TOKEN, 4, 2, 32, 200, 2, None),
            (5 * 200 * PER_TOKEN - 1, 4, 2, 32, 200, 2, None),
            (0, 4, 2, 32, 200, 2, 16),
            (80 * GiB, 80, 8, 128, 32_768, 2, 16),  # a 70B model's 32k-token sequence: 10.7 GB, past 2**31
            (2**62 - 1, 1, 1, 1, 1, 1, None),
        ],
        arg_names=("budget_bytes", "layers", "kv_heads", "head_dim", "seq_len", "dtype_bytes", "block_tokens"),
        examples=300,
    )
