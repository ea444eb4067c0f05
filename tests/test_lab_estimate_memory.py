"""The memory-estimation lab's checks pass the right estimators and fail plausible wrong ones, with a message
naming what is wrong: a dtype size from a table or a constant, a constant where an argument belongs, a term
that counts the wrong tensors or the wrong dtype, a formula that only fits MiniLM or Llama, units.

param_bytes(n_params, dtype) -> int
| question | what the checks try |
|---|---|
| which input varies each field | n alone (0, 1, 7, a prime, 6.7 billion), dtype alone (ten dtypes) |
| boundaries | no parameters; one; a 7B model (no overflow) |
| a type the notes never show | float64, int64, int32, int16, uint8, bool (no table of sizes passes) |
| order or ties | - |
| errors: type and message | a whole number of bytes (not MiB, not a float with a fraction) |
| policy: which item | - |

activation_bytes(batch, seq_len, hidden, intermediate, dtype) -> int
| question | what the checks try |
|---|---|
| which input varies each field | hidden, intermediate, seq_len (the mask) and batch each by one unit, the term it moves named |
| boundaries | one token; an empty batch; an intermediate that is not 4x hidden |
| a type the notes never show | fp16 beside fp32, the mask's dtype apart |
| order or ties | - |
| errors: type and message | bytes, not MiB; measured against the real peak of a model (activation_measured) |
| policy: which item | - |

kv_cache_bytes(config, seq_len, batch, dtype) -> int
| question | what the checks try |
|---|---|
| which input varies each field | layers, KV heads, head_dim, seq_len, batch each doubled alone; query heads changed alone (must not move it) |
| boundaries | an empty cache (0 tokens); one token |
| a shape the notes never show | multi-query (1 KV head) and multi-head attention; a real fp16 cache of tensors measured |
| order or ties | - |
| errors: type and message | bytes, not MiB |
| policy: which item | - |
"""

import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import lab_estimate_memory as lab


def size_of(dtype):
    return torch.empty((), dtype=dtype).element_size()


def good_param_bytes(n_params, dtype):
    return n_params * size_of(dtype)


def good_activation_bytes(batch, seq_len, hidden, intermediate, dtype):
    return batch * seq_len * (3 * hidden + 2 * intermediate) * size_of(dtype) + batch * seq_len * seq_len


def good_kv(config, seq_len, batch, dtype):
    return 2 * config.layers * config.kv_heads * config.head_dim * seq_len * batch * size_of(dtype)


@pytest.fixture(scope="module")
def tiny():
    from ailab.models import tiny_bert

    return tiny_bert().model


def test_right_answers_pass(tiny):
    lab.check_param_bytes(good_param_bytes, tiny)
    lab.check_activation_formula(good_activation_bytes)
    lab.check_activation_measured(good_activation_bytes, tiny, shapes=((2, 16), (4, 32)))
    lab.check_kv_cache(good_kv)


def test_other_right_answers_pass(tiny):
    """dtype.itemsize, floats that are whole, a different but equal arrangement of the same terms."""
    lab.check_param_bytes(lambda n, d: float(n * d.itemsize), tiny)
    lab.check_activation_formula(lambda b, t, h, i, d: (3 * b * t * h + 2 * b * t * i) * d.itemsize + b * t * t)
    lab.check_kv_cache(lambda c, t, b, d: (c.layers * 2) * (b * c.kv_heads * t * c.head_dim) * d.itemsize)


# --- param_bytes -------------------------------------------------------------------------------------------------

FOUR_DTYPES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int8: 1}


def hard_coded_model_count(tiny):
    n_model = sum(p.numel() for p in tiny.parameters())
    return lambda n, dtype: n_model * size_of(dtype)


WRONG_PARAM_BYTES = [
    ("always fp32", lambda n, dtype: n * 4, r"parameters in torch.float16 take .* bytes, your function says"),
    ("always fp16", lambda n, dtype: n * 2, r"parameters in torch.float32 take"),
    ("bits, not bytes", lambda n, dtype: n * size_of(dtype) * 8, r"That is the answer in bits"),
    ("divided by 8", lambda n, dtype: n * size_of(dtype) // 8, r"parameters in torch.float32 take"),
    ("a table of the four dtypes", lambda n, dtype: n * FOUR_DTYPES[dtype], r"raised KeyError"),
    (
        "the table, 4 bytes otherwise",
        lambda n, dtype: n * FOUR_DTYPES.get(dtype, 4),
        r"param_bytes\(1, torch.float64\) should be 8 bytes; yours is 4.*notes do not list",
    ),
    ("floats 4, the rest 1", lambda n, dtype: n * (4 if dtype.is_floating_point else 1), r"torch.float16 take"),
    ("finfo bits", lambda n, dtype: n * torch.finfo(dtype).bits // 8, r"raised TypeError"),
    ("MiB", lambda n, dtype: n * size_of(dtype) / 2**20, r"a count of bytes is a whole number"),
    ("the size alone", lambda n, dtype: size_of(dtype), r"parameters in torch.float32 take"),
    ("one extra element", lambda n, dtype: (n + 1) * size_of(dtype), r"parameters in torch.float32 take"),
]


@pytest.mark.parametrize("name, wrong, message", WRONG_PARAM_BYTES, ids=[w[0] for w in WRONG_PARAM_BYTES])
def test_wrong_param_bytes_fail(tiny, name, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_param_bytes(wrong, tiny)


def test_a_hard_coded_parameter_count_fails(tiny):
    with pytest.raises(LabCheckFailed, match=r"param_bytes\(0, torch.float32\) should be 0 bytes.*model's count"):
        lab.check_param_bytes(hard_coded_model_count(tiny), tiny)


def test_bool_is_not_a_number_of_bytes(tiny):
    with pytest.raises(LabCheckFailed, match="should return a number of bytes, got bool"):
        lab.check_param_bytes(lambda n, d: True, tiny)


# --- activation_bytes --------------------------------------------------------------------------------------------

FORGETS_ACTIVATIONS = lambda b, t, h, i, d: 0  # noqa: E731
OUTPUT_ONLY = lambda b, t, h, i, d: b * t * h * size_of(d)  # noqa: E731  only the layer output
ALWAYS_FP32 = lambda b, t, h, i, d: b * t * (3 * h + 2 * i) * 4 + b * t * t  # noqa: E731
TIMES_LAYERS = lambda b, t, h, i, d: 6 * good_activation_bytes(b, t, h, i, d)  # noqa: E731
NO_MASK = lambda b, t, h, i, d: b * t * (3 * h + 2 * i) * size_of(d)  # noqa: E731
MASK_IN_MODEL_DTYPE = lambda b, t, h, i, d: (b * t * (3 * h + 2 * i) + b * t * t) * size_of(d)  # noqa: E731
MASK_PER_HEAD = lambda b, t, h, i, d: good_activation_bytes(b, t, h, i, d) + 11 * b * t * t  # noqa: E731  12 heads
FOUR_TIMES_HIDDEN = lambda b, t, h, i, d: b * t * (3 * h + 2 * 4 * h) * size_of(d) + b * t * t  # noqa: E731
MINILM_CONSTANTS = lambda b, t, h, i, d: b * t * (3 * 384 + 2 * 1536) * size_of(d) + b * t * t  # noqa: E731
TWO_HIDDEN = lambda b, t, h, i, d: b * t * (2 * h + 2 * i) * size_of(d) + b * t * t  # noqa: E731
ONE_INTERMEDIATE = lambda b, t, h, i, d: b * t * (3 * h + i) * size_of(d) + b * t * t  # noqa: E731
MASK_NOT_PER_SEQUENCE = lambda b, t, h, i, d: b * t * (3 * h + 2 * i) * size_of(d) + t * t  # noqa: E731
PLUS_OVERHEAD = lambda b, t, h, i, d: good_activation_bytes(b, t, h, i, d) + 4096  # noqa: E731
MIB_FLOAT = lambda b, t, h, i, d: good_activation_bytes(b, t, h, i, d) / 2**20  # noqa: E731

WRONG_ACTIVATIONS = [
    ("forgets activations", FORGETS_ACTIVATIONS, r"one more unit of `hidden` should add .*; yours adds 0"),
    ("output only", OUTPUT_ONLY, r"one more unit of `hidden` should add 384 bytes .*; yours adds 128"),
    ("always fp32", ALWAYS_FP32, r"torch.float16: one more unit of `hidden` should add 192 bytes"),
    ("times the layers", TIMES_LAYERS, r"one more unit of `hidden` should add 384 bytes .*; yours adds 2,304"),
    ("no mask", NO_MASK, r"what is left should be the mask: B x T x T = 512 bytes.*yours leaves 0"),
    ("mask in the model's dtype", MASK_IN_MODEL_DTYPE, r"the mask: B x T x T = 512 bytes.*yours leaves 2,048"),
    ("mask per head", MASK_PER_HEAD, r"the mask: .*yours leaves 6,144.*not per head"),
    ("intermediate = 4 x hidden", FOUR_TIMES_HIDDEN, r"one more unit of `hidden` should add 384"),
    ("MiniLM's constants", MINILM_CONSTANTS, r"one more unit of `hidden` should add 384 bytes .*; yours adds 0"),
    ("two hidden tensors", TWO_HIDDEN, r"one more unit of `hidden` should add 384 bytes .*; yours adds 256"),
    ("one intermediate tensor", ONE_INTERMEDIATE, r"one more unit of `intermediate` should add 256 .*; yours adds 128"),
    ("mask without the batch", MASK_NOT_PER_SEQUENCE, r"the mask: B x T x T = 512 bytes.*yours leaves 256"),
    ("a fixed overhead", PLUS_OVERHEAD, r"what is left should be the mask.*yours leaves 4,608"),
    ("MiB", MIB_FLOAT, r"a count of bytes is a whole number"),
]


@pytest.mark.parametrize("name, wrong, message", WRONG_ACTIVATIONS, ids=[w[0] for w in WRONG_ACTIVATIONS])
def test_wrong_activation_formulas_fail(name, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_activation_formula(wrong)


def test_a_formula_right_only_at_the_notes_shapes_fails():
    """Right for MiniLM's hidden/intermediate, off elsewhere: the shapes no note mentions catch it."""

    def only_minilm(b, t, h, i, d):
        return good_activation_bytes(b, t, h, i, d) + (
            0 if (h, i) in ((384, 1536), (64, 256), (65, 256), (64, 257)) else 1000
        )

    with pytest.raises(LabCheckFailed, match=r"hidden 768, intermediate 3072"):
        lab.check_activation_formula(only_minilm)


def test_an_empty_batch_holds_nothing():
    with pytest.raises(LabCheckFailed, match=r"an empty batch \(batch 0\) holds no activations"):
        lab.check_activation_formula(lambda b, t, h, i, d: good_activation_bytes(max(b, 1), t, h, i, d))


@pytest.mark.parametrize("wrong", [FORGETS_ACTIVATIONS, OUTPUT_ONLY, TIMES_LAYERS])
def test_wrong_activations_fail_against_measurement(tiny, wrong):
    with pytest.raises(LabCheckFailed, match="measured peak"):
        lab.check_activation_measured(wrong, tiny, shapes=((2, 16), (4, 32)))


# --- kv_cache_bytes ----------------------------------------------------------------------------------------------

WRONG_KV = [
    (
        "forgot V",
        lambda c, t, b, d: c.layers * c.kv_heads * c.head_dim * t * b * size_of(d),
        r"holds 76,800 bytes; yours says 38,400",
    ),
    (
        "query heads",
        lambda c, t, b, d: 2 * c.layers * c.heads * c.head_dim * t * b * size_of(d),
        r"with 16 query heads instead of 4 .* should stay at your 153,600 bytes; yours gives 614,400",
    ),
    (
        "fp16 always",
        lambda c, t, b, d: 2 * c.layers * c.kv_heads * c.head_dim * t * b * 2,
        r"torch.bfloat16|torch.float32|torch.int8",
    ),
    (
        "forgot the layers",
        lambda c, t, b, d: 2 * c.kv_heads * c.head_dim * t * b * size_of(d),
        r"doubling config.layers .* yours gives 25,600. Does your formula use config.layers",
    ),
    (
        "max_context for seq_len",
        lambda c, t, b, d: good_kv(c, c.max_context, b, d),
        r"doubling seq_len should double the cache.*not config.max_context",
    ),
    (
        "Llama-2-7B's shape",
        lambda c, t, b, d: 2 * 32 * 32 * 128 * t * b * size_of(d),
        r"doubling config.layers .* Does your formula use config.layers",
    ),
    (
        "forgot the batch",
        lambda c, t, b, d: good_kv(c, t, 1, d),
        r"doubling batch should double the cache.*Use the batch argument",
    ),
    (
        "heads on the wrong side of GQA",
        lambda c, t, b, d: 2 * c.layers * (c.heads // c.kv_heads) * c.head_dim * t * b * size_of(d),
        r"doubling config.kv_heads .* yours gives 76,800",
    ),
    ("bits", lambda c, t, b, d: 8 * good_kv(c, t, b, d), r"yours says 614,400.*in bits"),
    ("GiB", lambda c, t, b, d: good_kv(c, t, b, d) / 2**30, r"a count of bytes is a whole number"),
    (
        "a spare token",
        lambda c, t, b, d: good_kv(c, t + 1, b, d),
        r"doubling seq_len should double the cache, from your 78,720 to 157,440 bytes; yours gives 155,520",
    ),
]


@pytest.mark.parametrize("name, wrong, message", WRONG_KV, ids=[w[0] for w in WRONG_KV])
def test_wrong_kv_fail(name, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        lab.check_kv_cache(wrong)


def test_kv_fields_are_named():
    """Right at the tiny shape the notes' check holds, but a field ignored: the field-by-field part names it."""
    tiny = lab._decoder()
    fixed = {"layers": tiny.layers, "head_dim": tiny.head_dim}
    for field, wrong in (
        ("layers", lambda c, t, b, d: 2 * fixed["layers"] * c.kv_heads * c.head_dim * t * b * size_of(d)),
        ("head_dim", lambda c, t, b, d: 2 * c.layers * c.kv_heads * fixed["head_dim"] * t * b * size_of(d)),
    ):
        with pytest.raises(LabCheckFailed, match=rf"doubling config.{field} .* Does your formula use config.{field}"):
            lab.check_kv_cache(wrong)
    with pytest.raises(LabCheckFailed, match=r"doubling seq_len should double .* Use the seq_len argument"):
        lab.check_kv_cache(lambda c, t, b, d: good_kv(c, 40, b, d))
    with pytest.raises(LabCheckFailed, match=r"with 16 query heads instead of 4 .* should stay at your 76,800 bytes"):
        lab.check_kv_cache(lambda c, t, b, d: good_kv(c, t, b, d) * (2 if c.heads > 8 else 1))  # MHA-only formula
    with pytest.raises(LabCheckFailed, match=r"a cache of 0 tokens holds nothing"):
        lab.check_kv_cache(lambda c, t, b, d: good_kv(c, max(t, 1), b, d) if t != 40 else good_kv(c, t, b, d))


def test_stubs_fail(tiny):
    def stub(*a, **k):
        raise NotImplementedError("write me")

    for fn, args in (
        (lab.check_param_bytes, (tiny,)),
        (lab.check_activation_formula, ()),
        (lab.check_activation_measured, (tiny, ((2, 16),))),
        (lab.check_kv_cache, ()),
    ):
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            fn(stub, *args)


# --- the differential checks (issue 42) --------------------------------------------------------------------------


def param_mib_round_trip(n, dtype):
    """Units and rounding: works in MiB rounded to 3 places, then converts back to bytes."""
    return int(round(n * size_of(dtype) / 2**20, 3) * 2**20)


def activation_float32(b, t, h, i, d):
    """Units and rounding: the element count as a float32 tensor's product (exact only up to 2**24)."""
    count = torch.tensor([b, t, 3 * h + 2 * i], dtype=torch.float32).prod().item()
    return int(count) * size_of(d) + b * t * t


def kv_int32(c, t, b, d):
    """Boundaries: the factors multiplied as a numpy int32 product, which wraps past 2**31 bytes."""
    import numpy as np

    return int(np.prod(np.array([2, c.layers, c.kv_heads, c.head_dim, t, b]), dtype=np.int32)) * size_of(d)


def kv_at_least_one_token(c, t, b, d):
    """Boundaries: "a prompt has at least one token", so an empty cache still holds one token."""
    return good_kv(c, max(t, 1), b, d)


_SIZE_ONCE: dict = {}


def param_size_once(n, dtype):
    """State: the element size looked up on the first call and kept, so a later dtype is not seen."""
    return n * _SIZE_ONCE.setdefault("size", size_of(dtype))


_PER_TOKEN_BY_NAME: dict = {}


def kv_cached_by_name(c, t, b, d):
    """State: bytes per token cached by the config's name, so another config with that name is not seen."""
    key = (c.name, d)
    if key not in _PER_TOKEN_BY_NAME:
        _PER_TOKEN_BY_NAME[key] = 2 * c.layers * c.kv_heads * c.head_dim * size_of(d)
    return _PER_TOKEN_BY_NAME[key] * t * b


def test_right_answers_agree_with_the_reference():
    lab.check_param_bytes_same_as_reference(good_param_bytes)
    lab.check_param_bytes_same_as_reference(lambda n, d: float(n * d.itemsize))
    lab.check_activation_same_as_reference(good_activation_bytes)
    lab.check_activation_same_as_reference(
        lambda b, t, h, i, d: (3 * b * t * h + 2 * b * t * i) * d.itemsize + b * t * t
    )
    lab.check_kv_same_as_reference(good_kv)
    lab.check_kv_same_as_reference(lambda c, t, b, d: (c.layers * 2) * (b * c.kv_heads * t * c.head_dim) * d.itemsize)


NEW_WRONG = [
    ("param MiB round trip", lab.check_param_bytes_same_as_reference, param_mib_round_trip),
    ("param size kept", lab.check_param_bytes_same_as_reference, param_size_once),
    ("activation float32", lab.check_activation_same_as_reference, activation_float32),
    ("kv int32", lab.check_kv_same_as_reference, kv_int32),
    ("kv one token", lab.check_kv_same_as_reference, kv_at_least_one_token),
    ("kv cached by name", lab.check_kv_same_as_reference, kv_cached_by_name),
]
ALL_WRONG = (
    [(n, lab.check_param_bytes_same_as_reference, w) for n, w, _ in WRONG_PARAM_BYTES]
    + [(n, lab.check_activation_same_as_reference, w) for n, w, _ in WRONG_ACTIVATIONS]
    + [(n, lab.check_kv_same_as_reference, w) for n, w, _ in WRONG_KV]
    + NEW_WRONG
)


@pytest.mark.parametrize("name, chk, wrong", ALL_WRONG, ids=[w[0] + "-" + w[1].__name__ for w in ALL_WRONG])
def test_the_differential_checks_catch_every_wrong_answer(name, chk, wrong):
    with pytest.raises(
        LabCheckFailed, match=r"where the reference's is|not a whole number|your code raised|two different answers"
    ):
        chk(wrong)


def test_the_differential_check_names_the_input_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        lab.check_kv_same_as_reference(kv_cached_by_name)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "kv_cache_bytes(config(layers=" in str(e.value) and "bytes where the reference's is" in str(e.value)


def test_stubs_fail_the_differential_checks():
    def stub(*a, **k):
        raise NotImplementedError("write me")

    for chk in (
        lab.check_param_bytes_same_as_reference,
        lab.check_activation_same_as_reference,
        lab.check_kv_same_as_reference,
    ):
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            chk(stub)
