"""Checks for labs/1_hardware/lab_estimate_memory.ipynb: the learner writes the parameter,
activation and KV-cache estimators; each is compared with the formula and with a measurement.

Each estimator is a formula, so each check is exact (to the byte) and takes it apart: every argument
is varied on its own (a constant where an argument belongs, or a term that counts the wrong thing,
moves the answer the wrong way and the message names that argument or term), at shapes and dtypes
beyond the ones the notes use (float64, int32, bool, ...; a hidden size whose intermediate is not 4x;
grouped- and multi-query attention), and at the edges (no parameters, one token, an empty batch, an
empty cache).

Then each estimator against a reference written from the formula, on generated arguments: counts beyond 2**31 (a
7B model, a long cache in fp32), 0 and 1 for every count, every dtype torch can store (the float8 types, complex,
unsigned, bool), hidden and intermediate sizes in any ratio, configs that share a name but not a shape.
"""

from __future__ import annotations

import numbers

import torch

from ailab import memory
from ailab.labs.core import check, expect
from ailab.labs.differential import same_as_reference, short

LAB = "lab_estimate_memory"
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8)
# dtypes no note lists: an 8-byte float, integer types, a 1-byte bool
OTHER_DTYPES = (torch.float64, torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool)


def _mib(x: float) -> str:
    return f"{x / 2**20:.2f} MiB"


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _bytes(got, what: str) -> int:
    """The learner's answer as a whole number of bytes (a float that is whole is accepted)."""
    expect(
        isinstance(got, numbers.Real) and not isinstance(got, bool),
        f"{what} should return a number of bytes, got {type(got).__name__} {got!r}",
    )
    expect(float(got).is_integer(), f"{what} returned {got!r}: a count of bytes is a whole number (not MiB or GiB)")
    return int(got)


def _unit_hint(got: int, truth: int) -> str:
    return " That is the answer in bits: return bytes." if truth and got == 8 * truth else ""


@check(LAB, "param_bytes")
def check_param_bytes(param_bytes, model: torch.nn.Module) -> None:
    """param_bytes(n_params, dtype): the bytes torch reports for `model` in each dtype, then any n and dtype."""
    n_model = sum(p.numel() for p in model.parameters())
    for dtype in DTYPES:
        truth = sum(p.numel() for p in model.parameters()) * _size(dtype)
        got = _bytes(param_bytes(n_model, dtype), "param_bytes")
        expect(
            got == truth,
            f"{n_model:,} parameters in {dtype} take {truth:,} bytes, your function says {got:,}. "
            "Is the size per element right for this dtype (fp16 and bf16 are 2 bytes, int8 is 1)?"
            + _unit_hint(got, truth),
        )
    for n in (0, 1, 7, 1_000_003, 6_738_415_616):  # no weights, one, a prime, a 7B model (no overflow)
        for dtype in DTYPES + OTHER_DTYPES:
            truth = n * _size(dtype)
            got = _bytes(param_bytes(n, dtype), "param_bytes")
            if got == truth:
                continue
            if dtype in OTHER_DTYPES:
                why = (
                    f" ({dtype} is a dtype the notes do not list: {_size(dtype)} byte(s) per element. Take the "
                    "size from the dtype itself rather than a table of the four you know.)"
                )
            elif got == n_model * _size(dtype):
                why = " (that is the model's count: use the n_params you are given)"
            else:
                why = _unit_hint(got, truth) or " It must be n_params times the size of one element of dtype."
            expect(False, f"param_bytes({n:,}, {dtype}) should be {truth:,} bytes; yours is {got:,}.{why}")


# shapes for the formula: the notes' MiniLM, BERT-base, and shapes no note mentions (one token, an
# intermediate size that is not 4x hidden, float64)
_FORMULA_SHAPES = [
    (1, 32, 384, 1536, torch.float32),
    (8, 128, 384, 1536, torch.float32),
    (4, 512, 384, 1536, torch.float32),
    (16, 64, 384, 1536, torch.float16),
    (2, 512, 384, 1536, torch.bfloat16),
    (2, 384, 768, 3072, torch.float32),
    (1, 1, 8, 32, torch.float32),
    (3, 7, 64, 100, torch.float64),
    (5, 33, 120, 200, torch.float16),
]


def _activation_truth(batch, seq, hidden, intermediate, dtype) -> int:
    """memory.activation_bytes (the course's formula), for any hidden/intermediate and any torch dtype."""
    return batch * seq * (3 * hidden + 2 * intermediate) * _size(dtype) + batch * seq * seq


@check(LAB, "activation_formula")
def check_activation_formula(activation_bytes) -> None:
    """Each term on its own (hidden, intermediate, the mask, batch), then the total at several shapes, exactly."""

    def f(b, t, h, i, d):
        return _bytes(activation_bytes(b, t, h, i, d), "activation_bytes")

    B, T, H, I = 2, 16, 64, 256  # noqa: E741
    for dtype in (torch.float32, torch.float16):
        s, where = _size(dtype), f"at batch {B}, {T} tokens, {dtype}"
        base = f(B, T, H, I, dtype)
        d_hidden = f(B, T, H + 1, I, dtype) - base
        expect(
            d_hidden == 3 * B * T * s,
            f"{where}: one more unit of `hidden` should add {3 * B * T * s:,} bytes (three (B, T, H) tensors of "
            f"{s} byte(s) per element); yours adds {d_hidden:,}. Check the (B, T, H) term, and that it uses "
            "the `hidden` argument.",
        )
        d_inter = f(B, T, H, I + 1, dtype) - base
        expect(
            d_inter == 2 * B * T * s,
            f"{where}: one more unit of `intermediate` should add {2 * B * T * s:,} bytes (two (B, T, I) tensors "
            f"of {s} byte(s) per element); yours adds {d_inter:,}. Check the (B, T, I) term, and that it uses "
            "the `intermediate` argument (it is not always 4 x hidden).",
        )
        mask = base - B * T * (3 * H + 2 * I) * s
        expect(
            mask == B * T * T,
            f"{where}: with the (B, T, H) and (B, T, I) terms right, what is left should be the mask: "
            f"B x T x T = {B * T * T:,} bytes, 1 byte per element whatever the dtype; yours leaves {mask:,}. "
            "The mask is (B, 1, T, T) of torch.bool: not per head, not in the model's dtype.",
        )
        expect(
            f(2 * B, T, H, I, dtype) == 2 * base,
            f"{where}: doubling the batch should double every tensor (and the estimate); yours goes from "
            f"{base:,} to {f(2 * B, T, H, I, dtype):,} bytes",
        )
    got = f(0, 16, 64, 256, torch.float32)
    expect(got == 0, f"an empty batch (batch 0) holds no activations; your estimate is {got:,} bytes")
    for batch, seq, hidden, inter, dtype in _FORMULA_SHAPES:
        truth = _activation_truth(batch, seq, hidden, inter, dtype)
        got = f(batch, seq, hidden, inter, dtype)
        expect(got > 0, f"at batch {batch}, {seq} tokens your estimate is {got}: activations are not free")
        expect(
            got == truth,
            f"at batch {batch}, {seq} tokens, hidden {hidden}, intermediate {inter}, {dtype}: the formula gives "
            f"{truth:,} bytes ({_mib(truth)}), yours {got:,} ({(got - truth) / truth:+.2%}). Count 3 (B,T,H) and "
            "2 (B,T,I) tensors in the model's dtype, plus a 1-byte (B,T,T) mask.",
        )


@check(LAB, "activation_measured")
def check_activation_measured(activation_bytes, model: torch.nn.Module, shapes=((1, 32), (16, 64), (8, 256))) -> None:
    """Against the measured peak of real forwards of `model` (within 15 %)."""
    cfg = model.config
    dtype = next(model.parameters()).dtype
    for batch, seq in shapes:
        measured = memory.forward_peak(model, batch, seq)
        got = activation_bytes(batch, seq, cfg.hidden_size, cfg.intermediate_size, dtype)
        err = (got - measured) / measured
        expect(
            abs(err) <= 0.15,
            f"at batch {batch}, {seq} tokens the forward's measured peak is {_mib(measured)}, your estimate "
            f"{_mib(got)} ({err:+.0%}). "
            + (
                "Too low: which live tensors did you leave out?"
                if err < 0
                else "Too high: in inference each layer's tensors are freed, so the "
                "peak does not multiply by the number of layers."
            ),
        )


def _decoder(name="tiny", layers=3, heads=4, kv_heads=2, head_dim=16, max_context=64) -> memory.DecoderConfig:
    return memory.DecoderConfig(
        name,
        0.0,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_context=max_context,
        source="test",
    )


def _real_cache_bytes(cfg, seq, batch, dtype) -> int:
    """Bytes of an actual cache: a K and a V tensor per layer, each (batch, kv_heads, seq, head_dim)."""
    kv = [torch.zeros(batch, cfg.kv_heads, seq, cfg.head_dim, dtype=dtype) for _ in range(2 * cfg.layers)]
    return sum(t.numel() * t.element_size() for t in kv)


@check(LAB, "kv_cache")
def check_kv_cache(kv_cache_bytes) -> None:
    """kv_cache_bytes(config, seq_len, batch, dtype) against real tensors, field by field, and published configs."""

    def f(cfg, seq, batch, dtype):
        return _bytes(kv_cache_bytes(cfg, seq, batch, dtype), "kv_cache_bytes")

    tiny = _decoder()
    # each field on its own: doubling it doubles the cache, whatever else is right or wrong; query heads do not count
    own = f(tiny, 40, 5, torch.float16)
    for field, changed in (
        ("layers", _decoder(layers=6)),
        ("kv_heads", _decoder(heads=8, kv_heads=4)),
        ("head_dim", _decoder(head_dim=32)),
    ):
        got = f(changed, 40, 5, torch.float16)
        expect(
            got == 2 * own,
            f"doubling config.{field} (3 layers, 2 KV heads, head_dim 16 -> {field} x 2) should "
            f"double the cache, from your {own:,} to {2 * own:,} bytes; yours gives {got:,}. Does "
            f"your formula use config.{field}?",
        )
    for what, args in (("seq_len", (80, 5)), ("batch", (40, 10))):
        got = f(tiny, *args, torch.float16)
        expect(
            got == 2 * own,
            f"doubling {what} should double the cache, from your {own:,} to {2 * own:,} bytes; "
            f"yours gives {got:,}. Use the {what} argument (not config.max_context or a constant).",
        )
    got = f(_decoder(heads=16), 40, 5, torch.float16)
    expect(
        got == own,
        f"with 16 query heads instead of 4 (still 2 KV heads) the cache should stay at your {own:,} "
        f"bytes; yours gives {got:,}. Only the KV heads are cached (config.kv_heads, not config.heads).",
    )
    # a tiny cache you can hold: K and V, each (batch, kv_heads, seq, head_dim), per layer
    real = _real_cache_bytes(tiny, 40, 5, torch.float16)
    got = f(tiny, 40, 5, torch.float16)
    expect(
        got == real,
        f"a real fp16 cache for 3 layers x (K, V) x (5, 2, 40, 16) holds {real:,} bytes; yours says "
        f"{got:,}. Did you count both K and V, and the KV heads (not the query heads)?" + _unit_hint(got, real),
    )
    # edges and shapes the notes do not use: an empty cache, one token, multi-query and multi-head attention
    got = f(tiny, 0, 5, torch.float16)
    expect(got == 0, f"a cache of 0 tokens holds nothing; yours says {got:,} bytes")
    for cfg, seq, batch, dtype in (
        (tiny, 1, 1, torch.float16),
        (_decoder(heads=8, kv_heads=1), 7, 3, torch.bfloat16),
        (_decoder(heads=4, kv_heads=4, layers=2), 9, 2, torch.float32),
        (_decoder(layers=5, head_dim=24), 11, 3, torch.int8),
        (_decoder(layers=1, kv_heads=3, heads=6), 5, 2, torch.float64),
    ):
        real = _real_cache_bytes(cfg, seq, batch, dtype)
        got = f(cfg, seq, batch, dtype)
        expect(
            got == real,
            f"a real {dtype} cache of {cfg.layers} layers x (K, V) x ({batch}, {cfg.kv_heads}, {seq}, "
            f"{cfg.head_dim}) (query heads {cfg.heads}) holds {real:,} bytes; yours says {got:,}"
            + _unit_hint(got, real),
        )
    for name in ("Llama-2-7B", "Mistral-7B-v0.1"):
        cfg = memory.PUBLISHED_CONFIGS[name]
        for dtype in (torch.float16, torch.float32):
            truth = cfg.kv_bytes(2048, 8, dtype)
            got = f(cfg, 2048, 8, dtype)
            expect(
                got == truth,
                f"{name} at 2,048 tokens x batch 8 in {dtype}: expected {truth / 2**30:.2f} GiB, "
                f"got {got / 2**30:.2f} GiB"
                + (" (Mistral uses grouped-query attention: 8 KV heads)" if "Mistral" in name else ""),
            )


def activation_error_table(
    activation_bytes, model: torch.nn.Module, shapes=((1, 32), (8, 64), (16, 128))
) -> list[dict]:
    """A small table for the notebook: estimate vs measured at a few shapes."""
    cfg, dtype = model.config, next(model.parameters()).dtype
    rows = []
    for b, t in shapes:
        measured = memory.forward_peak(model, b, t)
        est = activation_bytes(b, t, cfg.hidden_size, cfg.intermediate_size, dtype)
        rows.append(
            {
                "batch": b,
                "seq_len": t,
                "estimate_mib": round(est / 2**20, 2),
                "measured_mib": round(measured / 2**20, 2),
                "error": f"{(est - measured) / measured:+.1%}",
            }
        )
    return rows


# --------------------------------------------------------------------------- the differential checks (issue 42)


_ALL_DTYPES = (
    DTYPES
    + OTHER_DTYPES
    + tuple(
        getattr(torch, name)
        for name in ("complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
        if hasattr(torch, name)
    )
)


def _reference_param_bytes(n_params, dtype) -> int:
    return n_params * _size(dtype)


def _reference_activation_bytes(batch, seq_len, hidden, intermediate, dtype) -> int:
    return _activation_truth(batch, seq_len, hidden, intermediate, dtype)


def _reference_kv_cache_bytes(config, seq_len, batch, dtype) -> int:
    return 2 * config.layers * config.kv_heads * config.head_dim * seq_len * batch * _size(dtype)


def _whole_bytes(mine, ref) -> str | None:
    if not isinstance(mine, numbers.Real) or isinstance(mine, bool):
        return f"your answer should be a number of bytes like {ref:,}; got {type(mine).__name__} {short(mine)}"
    if not float(mine).is_integer():
        return f"your answer {mine!r} is not a whole number of bytes (not MiB or GiB); the reference's is {ref:,}"
    if int(mine) != ref:
        return f"yours is {int(mine):,} bytes where the reference's is {ref:,}" + _unit_hint(int(mine), ref)
    return None


def _counts(limit: int):
    from hypothesis import strategies as st

    return st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 1000), st.integers(0, limit))


@check(LAB, "param_bytes: the same bytes as the formula for every count and dtype")
def check_param_bytes_same_as_reference(param_bytes) -> None:
    from hypothesis import strategies as st

    same_as_reference(
        param_bytes,
        _reference_param_bytes,
        st.tuples(
            st.one_of(_counts(2**40), st.sampled_from([2**31 - 1, 2**31, 2**32 + 1, 6_738_415_616, 70 * 10**9])),
            st.sampled_from(_ALL_DTYPES),
        ),
        describe=lambda n, dtype: f"param_bytes({n:,}, {dtype})",
        compare=_whole_bytes,
        edges=[(6_738_415_616, torch.float32), (0, torch.bfloat16)],
        arg_names=("n_params", "dtype"),
        examples=200,
    )


@check(LAB, "activation_bytes: the same bytes as the formula at every shape and dtype")
def check_activation_same_as_reference(activation_bytes) -> None:
    from hypothesis import strategies as st

    same_as_reference(
        activation_bytes,
        _reference_activation_bytes,
        st.tuples(
            _counts(64),
            _counts(8192),
            _counts(8192).map(lambda h: max(h, 1)),  # a model has a hidden size and an intermediate size
            _counts(32_768).map(lambda i: max(i, 1)),
            st.sampled_from(_ALL_DTYPES),
        ),
        describe=lambda b, t, h, i, d: (
            f"activation_bytes(batch={b}, seq_len={t}, hidden={h}, intermediate={i}, dtype={d})"
        ),
        compare=_whole_bytes,
        edges=[(64, 8192, 8192, 32_768, torch.float32), (3, 0, 64, 256, torch.float16)],
        arg_names=("batch", "seq_len", "hidden", "intermediate", "dtype"),
        examples=200,
    )


def _decoders():
    """Hypothesis: (config, seq_len, batch, dtype); a few names shared by configs of different shapes."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        kv_heads = d(st.one_of(st.sampled_from([1, 8]), st.integers(1, 64)))
        cfg = memory.DecoderConfig(
            d(st.sampled_from(["tiny", "Llama-2-7B", "my-decoder"])),
            0.0,
            layers=d(st.one_of(st.sampled_from([1, 32, 80]), st.integers(1, 128))),
            heads=kv_heads * d(st.sampled_from([1, 1, 2, 4, 8])),
            kv_heads=kv_heads,
            head_dim=d(st.one_of(st.sampled_from([1, 64, 128]), st.integers(1, 256))),
            max_context=d(st.sampled_from([2048, 4096, 32_768])),
            source="generated",
        )
        return cfg, d(_counts(131_072)), d(_counts(64)), d(st.sampled_from(_ALL_DTYPES))

    return draw()


def _say_kv(cfg, seq, batch, dtype) -> str:
    return (
        f"kv_cache_bytes(config(layers={cfg.layers}, heads={cfg.heads}, kv_heads={cfg.kv_heads}, "
        f"head_dim={cfg.head_dim}, name={cfg.name!r}), seq_len={seq}, batch={batch}, dtype={dtype})"
    )


@check(LAB, "kv_cache_bytes: the same bytes as the formula for every config")
def check_kv_same_as_reference(kv_cache_bytes) -> None:
    llama = memory.PUBLISHED_CONFIGS["Llama-2-7B"]
    same_as_reference(
        kv_cache_bytes,
        _reference_kv_cache_bytes,
        _decoders(),
        describe=_say_kv,
        compare=_whole_bytes,
        edges=[(llama, 4096, 16, torch.float32), (_decoder(), 0, 5, torch.float16)],
        arg_names=("config", "seq_len", "batch", "dtype"),
        examples=200,
    )
