"""Weight-only quantization of the decoder (ailab.quantize.weight_only): the quantizers keep every weight within
half a step, PyTorch's kernels agree with the plain dequantize-then-matmul, and a quantized tiny_gpt runs through
Hugging Face's forward, ailab's Decoder, the paged engine and the server, with the same tokens batched or alone."""

from __future__ import annotations

import math

import pytest
import torch

from ailab.generation import Decoder, EngineCore, PagedKVCache, Request, generate
from ailab.models import tiny_gpt
from ailab.quantize import weight_only as W


def _matrix(out=24, inp=96, seed=0):
    return torch.randn(out, inp, generator=torch.Generator().manual_seed(seed)) * 0.02


def test_int8_keeps_every_weight_within_half_a_step_and_uses_the_row_maximum():
    w = _matrix()
    w[3] = 0.0  # a zero row
    w[:, 7] *= 50  # an outlier column: every row's scale grows with it
    codes, scale = W.quantize_int8(w)
    assert codes.dtype == torch.int8 and codes.shape == w.shape and scale.shape == (w.shape[0],)
    assert int(codes.abs().max()) == 127 and int(codes.min()) >= -127
    assert torch.allclose(scale[torch.arange(24) != 3], w.abs().amax(1)[torch.arange(24) != 3] / 127)
    assert scale[3] == 1.0 and not codes[3].any()
    err = (W.dequantize_int8(codes, scale) - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())


@pytest.mark.parametrize("inp,group", [(96, 32), (100, 32), (31, 64), (64, 1)])
def test_int4_keeps_every_weight_within_half_a_step_in_groups_that_may_not_divide_the_width(inp, group):
    w = _matrix(inp=inp)
    w[0, :] = 0.25  # a constant row: every group of it is given back exactly
    w[1, :] = w[1, :].abs() + 1.0  # all positive: the offset is not zero
    codes, scales, lows = W.quantize_int4(w, group)
    groups = math.ceil(inp / group)
    assert codes.dtype == torch.uint8 and codes.shape == w.shape and int(codes.max()) <= 15
    assert scales.shape == lows.shape == (w.shape[0], groups)
    back = W.dequantize_int4(codes, scales, lows, group)
    assert torch.equal(back[0], w[0])
    step = scales[:, torch.arange(inp) // group]
    assert bool(((back - w).abs() <= step / 2 + 1e-7).all())
    if inp % group:  # the last, shorter group is quantized over its own weights only
        last = w[:, (groups - 1) * group :]
        assert torch.allclose(lows[:, -1], last.amin(1))


def test_fewer_bits_give_a_larger_error_and_groups_a_smaller_one():
    w = _matrix(64, 256)
    w[:, 5] *= 30
    errors = {}
    for bits in (8, 4, 3, 2):
        for group in (32, 256):
            codes, scales, lows = W.quantize_groupwise(w, group, bits)
            errors[bits, group] = float((W.dequantize_int4(codes, scales, lows, group) - w).pow(2).mean())
    for group in (32, 256):
        assert errors[8, group] < errors[4, group] < errors[3, group] < errors[2, group]
    for bits in (4, 3, 2):
        assert errors[bits, 32] < errors[bits, 256]


def test_two_codes_pack_into_a_byte_and_come_back():
    codes = torch.randint(0, 16, (5, 33), dtype=torch.uint8)
    packed = W.pack_int4(codes)
    assert packed.shape == (5, 17) and packed.dtype == torch.uint8
    assert torch.equal(W.unpack_int4(packed, 33), codes)
    assert int(W.pack_int4(torch.tensor([[1, 2]], dtype=torch.uint8))) == 0x21


@pytest.mark.parametrize("scheme", W.SCHEMES)
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_pytorch_kernels_agree_with_the_plain_matmul(scheme, rows):
    layer = torch.nn.Linear(128, 96)
    make = (
        (lambda k: W.Int8WeightOnlyLinear(layer, k))
        if scheme == "int8"
        else (lambda k: W.Int4WeightOnlyLinear(layer, 32, k))
    )
    plain, aten = make("plain"), make("aten")
    x = torch.randn(2, rows, 128)
    want = plain(x)
    assert want.shape == (2, rows, 96)
    assert torch.allclose(aten(x), want, rtol=2e-2, atol=2e-2)  # the kernel takes bf16 activations
    assert torch.allclose(want, x @ plain.dequantized().t() + layer.bias.detach(), atol=1e-5)


def test_bad_weights_and_settings_are_refused_in_words():
    with pytest.raises(ValueError, match="2-D floating-point"):
        W.quantize_int8(torch.zeros(4))
    with pytest.raises(ValueError, match="inf or NaN"):
        W.quantize_int4(torch.tensor([[1.0, math.nan]]))
    with pytest.raises(ValueError, match="group_size"):
        W.quantize_int4(_matrix(), 0)
    with pytest.raises(ValueError, match="bits"):
        W.quantize_groupwise(_matrix(), 32, 9)
    with pytest.raises(ValueError, match="divides the input width"):
        W.Int4WeightOnlyLinear(torch.nn.Linear(100, 8), 32, "aten")
    assert W.Int4WeightOnlyLinear(torch.nn.Linear(100, 8), 32, "plain")(torch.randn(3, 100)).shape == (3, 8)
    with pytest.raises(ValueError, match="choose one of"):
        W.quantize_decoder(tiny_gpt("1m"), "int3")
    with pytest.raises(TypeError, match="GPT-2"):
        W.quantize_decoder(torch.nn.Linear(2, 2))


@pytest.fixture(scope="module")
def fp32():
    return tiny_gpt("1m")


@pytest.mark.parametrize("scheme", W.SCHEMES)
def test_a_quantized_decoder_runs_in_hugging_face_and_in_ailab_alike(fp32, scheme):
    q = W.quantize_decoder(fp32, scheme)
    assert type(fp32.transformer.h[0].attn.c_attn).__name__ == "Conv1D", "the original is left as it was"
    assert isinstance(
        q.transformer.h[0].mlp.c_fc, W.Int8WeightOnlyLinear if scheme == "int8" else W.Int4WeightOnlyLinear
    )
    ratio = W.linear_weight_bytes(fp32) / W.linear_weight_bytes(q)
    # 4 bytes a weight against 1 (int8) or half a byte and two fp32 numbers a group of 32 (int4); plus a scale a row
    assert 3.8 < ratio <= 4 if scheme == "int8" else 5.1 < ratio <= 4 / (0.5 + 8 / 32)
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf = q(ids).logits
        near = fp32(ids).logits
    assert (hf - near).abs().max() < (0.1 if scheme == "int8" else 0.5)  # close to fp32, not equal
    mine = generate(Decoder(q), ids, 1)  # prefill through ailab's own forward
    assert torch.equal(mine[:, 0], hf[:, -1].argmax(-1))


def test_a_quantized_decoder_gives_the_same_tokens_batched_as_alone(fp32):
    model = Decoder(W.quantize_decoder(fp32, "int4"))
    g = torch.Generator().manual_seed(3)
    reqs = [
        Request(i, torch.randint(0, 256, (n,), generator=g).tolist(), m)
        for i, (n, m) in enumerate([(5, 9), (23, 4), (12, 12)])
    ]
    core = EngineCore(model, PagedKVCache.for_model(model, 64, 4), max_running=3)
    for r in reqs:
        core.add_request(r)
    while not core.idle:
        core.step()
    for r in reqs:
        assert r.output == generate(model, torch.tensor([r.prompt]), r.max_new_tokens)[0].tolist(), r.id


def test_the_server_serves_quantized_weights_and_says_so(capsys):
    from ailab.server.run import build_parser, generation_engine

    with pytest.raises(ValueError, match="need --generate"):
        generation_engine(build_parser().parse_args(["--quantization", "int8"]))
    engine = generation_engine(
        build_parser().parse_args(["--generate", "1m", "--generation-in-thread", "--quantization", "int8"]), 1
    )
    try:
        assert engine.ready.wait(60)
        assert isinstance(engine.core.model.hf.transformer.h[0].attn.c_attn, W.Int8WeightOnlyLinear)
        assert engine.settings["quantization"] == "int8"
    finally:
        engine.close()
    assert "weights int8" in capsys.readouterr().err
