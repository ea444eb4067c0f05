"""The compiled decode step (ailab.generation.compiled): same tokens as eager, padding that changes nothing."""

import copy

import pytest
import torch

from ailab.generation import Decoder, PagedKVCache, Request, EngineCore, generate
from ailab.generation.compiled import BUCKETS, bucket_for, pad_view
from ailab.generation.decode import decode_paged
from ailab.generation.paged import store_kv
from ailab.models import tiny_gpt


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Decoder(tiny_gpt("1m"))


def test_bucket_for_takes_the_smallest_bucket_that_holds_the_batch():
    assert [bucket_for(b) for b in (1, 2, 3, 4, 5, 8, 9, 256)] == [1, 2, 4, 4, 8, 8, 16, 256]
    assert bucket_for(3, (2, 6)) == 6
    with pytest.raises(ValueError, match="over the largest bucket"):
        bucket_for(BUCKETS[-1] + 1)


def test_store_kv_writes_the_slots_of_one_layer_in_place():
    pool = torch.zeros(2, 6, 1, 2)
    rows = torch.arange(4.0).view(2, 1, 2)
    store_kv(pool, 1, torch.tensor([4, 0]), rows)
    expected = torch.zeros(2, 6, 1, 2)
    expected[1, 4], expected[1, 0] = rows[0], rows[1]
    assert torch.equal(pool, expected)


def _cache_with(model, lengths, block_size=4):
    cache = PagedKVCache.for_model(model, 32, block_size)
    gen = torch.Generator().manual_seed(1)
    cache.k.normal_(generator=gen), cache.v.normal_(generator=gen)  # stands for what earlier steps wrote
    for i, n in enumerate(lengths):
        cache.allocator.allocate(i, n)
    return cache


def test_padding_a_decode_step_changes_no_logit_and_no_cached_value(model):
    lengths = [9, 3, 6]  # tables of 3, 1 and 2 blocks of 4: the view pads them to 3
    plain, padded = _cache_with(model, lengths), _cache_with(model, lengths)
    token = torch.tensor([[5], [7], [11]])  # (3, 1)
    want = decode_paged(model, plain.view([0, 1, 2], 1), token)  # (3, vocab)
    view, tokens = pad_view(padded.view([0, 1, 2], 1), token, 8, 6)
    assert tuple(tokens.shape) == (8, 1) and tuple(view.table.shape) == (8, 6)
    got = decode_paged(model, view, tokens)  # (8, vocab)
    torch.testing.assert_close(got[:3], want)
    torch.testing.assert_close(got[3:], want[:1].expand(5, -1))  # the padding repeats row 0
    # the padding wrote what row 0 wrote, where row 0 wrote it (a batch of 8 may round differently from one of 3)
    torch.testing.assert_close(padded.k, plain.k)
    torch.testing.assert_close(padded.v, plain.v)
    with pytest.raises(ValueError, match="cannot pad"):
        pad_view(padded.view([0, 1, 2], 1), token, 2, 6)


def test_the_compiled_scheduler_makes_the_tokens_the_eager_one_makes():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)  # one layer: the compilation takes a quarter of tiny_gpt's four
    model = Decoder(GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=1, n_head=2)))
    reqs = [
        Request(i, torch.randint(0, 256, (n,)).tolist(), m)
        for i, (n, m) in enumerate([(5, 30), (40, 8), (12, 20), (3, 12)])
    ]
    sched = EngineCore(model, PagedKVCache.for_model(model, 64, 16), max_running=4, compile=True)
    done = copy.deepcopy(reqs)
    for r in done:
        sched.add_request(r)
    while not sched.idle:
        sched.step()  # batches of 4, 3, 2 and 1, tables of 1 to 4 blocks: one compilation serves them all
    for r in done:
        assert r.output == generate(model, torch.tensor([r.prompt]), r.max_new_tokens)[0].tolist(), r.id
