import numpy as np
import pytest

from ailab import data


def test_digits_scaled_globally():
    s = data.digits()
    assert s.X_train.dtype == np.float32 and s.X_train.shape[1] == 64
    assert 0.0 <= s.X_train.min() and s.X_train.max() <= 1.0
    assert len(s.y_train) + len(s.y_test) == 1797


def test_mnist_sample():
    s = data.mnist_sample()
    assert len(s.y_train) + len(s.y_test) == 5000 and s.X_test.shape[1] == 784
    assert s.X_train.max() <= 1.0


def test_sentiment_split_is_deterministic_and_balanced():
    a, b = data.sentiment(), data.sentiment()
    assert a.X_test == b.X_test and len(a.X_train) + len(a.X_test) == 4863
    assert 0.4 < a.y_train.mean() < 0.6
    assert not set(a.X_train) & set(a.X_test) - {""}


def test_changed_data_file_is_refused(monkeypatch):
    monkeypatch.setitem(data.DATA_SHA256, "rotten_tomatoes_corpus.csv.bz2", "0" * 64)
    with pytest.raises(data.DataUnavailableError, match="the data file changed"):
        data.sentiment()


def test_missing_package_says_what_to_run():
    with pytest.raises(data.DataUnavailableError, match="make setup"):
        data.package_dir("no_such_package_here")
