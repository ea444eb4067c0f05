"""The memory-estimation lab's checks pass the right estimators and fail plausible wrong ones."""
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


@pytest.mark.parametrize("wrong", [
    lambda n, dtype: n * 4,  # every dtype as fp32
    lambda n, dtype: n * 2,  # every dtype as fp16
    lambda n, dtype: n * size_of(dtype) // 8,  # bits vs bytes confusion
])
def test_wrong_param_bytes_fail(tiny, wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_param_bytes(wrong, tiny)


FORGETS_ACTIVATIONS = lambda b, t, h, i, d: 0  # noqa: E731
OUTPUT_ONLY = lambda b, t, h, i, d: b * t * h * size_of(d)  # noqa: E731  only the layer output
ALWAYS_FP32 = lambda b, t, h, i, d: b * t * (3 * h + 2 * i) * 4 + b * t * t  # noqa: E731
TIMES_LAYERS = lambda b, t, h, i, d: 6 * good_activation_bytes(b, t, h, i, d)  # noqa: E731
NO_MASK = lambda b, t, h, i, d: b * t * (3 * h + 2 * i) * size_of(d)  # noqa: E731


@pytest.mark.parametrize("wrong", [FORGETS_ACTIVATIONS, OUTPUT_ONLY, ALWAYS_FP32, TIMES_LAYERS, NO_MASK])
def test_wrong_activation_formulas_fail(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_activation_formula(wrong)


@pytest.mark.parametrize("wrong", [FORGETS_ACTIVATIONS, OUTPUT_ONLY, TIMES_LAYERS])
def test_wrong_activations_fail_against_measurement(tiny, wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_activation_measured(wrong, tiny, shapes=((2, 16), (4, 32)))


@pytest.mark.parametrize("wrong", [
    lambda c, t, b, d: c.layers * c.kv_heads * c.head_dim * t * b * size_of(d),  # forgot V (the 2)
    lambda c, t, b, d: 2 * c.layers * c.heads * c.head_dim * t * b * size_of(d),  # query heads, not KV heads
    lambda c, t, b, d: 2 * c.layers * c.kv_heads * c.head_dim * t * b * 2,  # fp16 always
])
def test_wrong_kv_fail(wrong):
    with pytest.raises(LabCheckFailed):
        lab.check_kv_cache(wrong)


def test_stubs_fail(tiny):
    def stub(*a, **k):
        raise NotImplementedError("write me")

    for fn, args in ((lab.check_param_bytes, (tiny,)), (lab.check_activation_formula, ()),
                     (lab.check_kv_cache, ())):
        with pytest.raises(LabCheckFailed):
            fn(stub, *args)
