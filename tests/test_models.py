"""The offline zoo: MiniLM matches the reference implementation; tampered weights are refused."""

import pickle
import shutil

import numpy as np
import pytest
import torch

from ailab import models


@pytest.fixture(scope="module")
def enc():
    return models.load_encoder()


def test_minilm_matches_sentence_transformers(enc):
    # Oracle: sentence-transformers loading the same folder, its own pooling and normalisation.
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(models.minilm_dir()), device="cpu", local_files_only=True)
    texts = ["a gripping thriller", "the plot is thin and the jokes fall flat", "x"]
    ours = enc.embed(texts, max_length=256)
    theirs = ref.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_minilm_size_and_eval_mode(enc):
    assert 22.5e6 < enc.n_params < 22.8e6
    assert not enc.model.training


def _copy_minilm(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    shutil.copytree(models.minilm_dir(), folder)
    monkeypatch.setattr(models.weights, "minilm_wheel_dir", lambda: folder)
    return folder


def test_tampered_weights_are_refused_naming_file_and_hashes(tmp_path, monkeypatch):
    folder = _copy_minilm(tmp_path, monkeypatch)
    weights = folder / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte deep inside a weight tensor
    weights.write_bytes(bytes(blob))
    with pytest.raises(models.WeightsIntegrityError) as e:
        models.load_encoder()
    msg = str(e.value)
    assert str(weights) in msg and models.TRUSTED_SHA256["minilm"]["model.safetensors"] in msg
    assert "refusing to load" in msg


def test_missing_weights_say_what_to_run(tmp_path, monkeypatch):
    folder = _copy_minilm(tmp_path, monkeypatch)
    (folder / "model.safetensors").unlink()
    with pytest.raises(models.WeightsIntegrityError, match="does not exist; run `make setup`"):
        models.load_encoder()


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model 'bert-huge'"):
        models.load_encoder("bert-huge")


class _Evil:
    def __reduce__(self):
        return (print, ("this would have run arbitrary code",))


def test_torch_files_load_weights_only(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "payload": _Evil()}, path)
    sha = models.sha256_of(path)
    with pytest.raises(pickle.UnpicklingError):
        models.load_state_dict(path, sha)
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(2)}, good)
    assert torch.equal(models.load_state_dict(good, models.sha256_of(good))["w"], torch.ones(2))


def test_save_and_verify_roundtrip(tmp_path):
    head = torch.nn.Linear(4, 2)
    sha = models.save_state_dict(head.state_dict(), tmp_path / "head.safetensors")
    state = models.load_state_dict(tmp_path / "head.safetensors", sha)
    assert torch.equal(state["weight"], head.weight.detach())
    with pytest.raises(models.WeightsIntegrityError):
        models.load_state_dict(tmp_path / "head.safetensors", "0" * 64)


def test_tiny_bert_is_small_and_runs():
    tiny = models.tiny_bert()
    assert 1.3e6 < tiny.n_params < 1.7e6
    assert tiny.embed(["hello", "world"]).shape == (2, 48)


def test_digits_mlp_learns():
    trained = models.digits_mlp(epochs=20)
    assert trained.test_accuracy > 0.93


def test_sentiment_classifier_beats_chance_and_predicts(enc):
    clf = models.sentiment_classifier(enc)
    majority = max(clf.split.y_test.mean(), 1 - clf.split.y_test.mean())
    assert clf.test_accuracy > majority + 0.15
    rows = models.predict_sentiment(clf, ["A wonderful, moving film.", "A dull, tedious mess.", "   "])
    assert len(rows) == 3, "one answer per text given, in order: a caller zips them with its texts"
    assert [r["label"] for r in rows[:2]] == ["positive", "negative"]
    assert all(set(r) == set(models.TextLabel.__annotations__) for r in rows)
    assert rows[0]["score"] == max(rows[0]["probs"]) and abs(sum(rows[0]["probs"]) - 1) < 1e-5
    long = " ".join(["wonderful"] * 100)
    assert [r["truncated"] for r in models.predict_sentiment(clf, ["fine", long], max_length=16)] == [False, True]
    logits = clf.model(**enc.tokenize(["fine"]))
    assert logits.shape == (1, 2)


def test_embed_rejects_a_bare_string(enc):
    with pytest.raises(TypeError, match="list of texts"):
        enc.embed("just one")


def test_text_labels_is_one_row_per_text_with_every_field_checked():
    from ailab.models import text_labels

    probs = np.array([[0.2, 0.8], [0.9, 0.1], [0.5, 0.5]])  # (3, 2), the last a tie
    rows = text_labels(probs, ["negative", "positive"], [False, True, False])
    assert [r["label"] for r in rows] == ["positive", "negative", "negative"]  # a tie goes to the first class
    assert [r["score"] for r in rows] == [0.8, 0.9, 0.5]
    assert rows[1]["probs"] == [0.9, 0.1] and [r["truncated"] for r in rows] == [False, True, False]
    assert text_labels(np.array([[1 / 3, 2 / 3]]), ["a", "b"])[0]["probs"] == [0.333333, 0.666667]
    assert text_labels(np.zeros((0, 2)), ["a", "b"]) == []
    with pytest.raises(ValueError, match="3 classes"):
        text_labels(probs, ["a", "b", "c"])
    with pytest.raises(ValueError, match="2 truncation flags for 3"):
        text_labels(probs, ["a", "b"], [False, True])
