"""A small byte-level language model trained here, on the Rotten Tomatoes snippets that ship with the
course's data (ailab.data.sentiment), so that generated text reads like text and nothing is downloaded.

The bar it must clear is the unigram baseline: the loss of predicting every byte from the byte frequencies
of the training text alone. A model that has learnt nothing about context cannot beat it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F


def corpus(split: str = "train") -> torch.Tensor:
    """The review snippets of one split, one per line, as a 1-D tensor of byte values (int64)."""
    from ailab.data import sentiment

    s = sentiment()
    texts = {"train": s.X_train, "test": s.X_test}.get(split)
    if texts is None:
        raise ValueError(f"split={split!r}; choose 'train' or 'test'")
    blob = "\n".join(texts).encode("utf-8")
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).long()


def unigram_loss(train: torch.Tensor, held_out: torch.Tensor, vocab: int = 256) -> float:
    """Cross-entropy (nats per byte) on `held_out` of the byte frequencies counted on `train` (add-one)."""
    counts = torch.bincount(train, minlength=vocab).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[held_out].mean())


def batches(data: torch.Tensor, batch: int, block: int, generator: torch.Generator):
    """Random windows: inputs (batch, block) and the next bytes as targets (batch, block)."""
    starts = torch.randint(0, len(data) - block - 1, (batch,), generator=generator)
    x = torch.stack([data[s : s + block] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + block + 1] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def held_out_loss(hf_model, data: torch.Tensor, block: int = 128, windows: int = 64) -> float:
    """Mean next-byte cross-entropy (nats) over `windows` evenly spaced windows of `data`."""
    hf_model.eval()
    starts = torch.linspace(0, len(data) - block - 2, windows).long().tolist()
    x = torch.stack([data[s : s + block] for s in starts])
    y = torch.stack([data[s + 1 : s + block + 1] for s in starts])
    logits = hf_model(x).logits  # (windows, block, 256)
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))


@dataclass
class TrainedLM:
    model: object  # a GPT2LMHeadModel (run it with ailab.generation.Decoder)
    steps: int
    seconds: float
    val_loss: float  # nats per byte on the test split
    unigram_val_loss: float
    losses: list[float] = field(default_factory=list)  # training loss per step

    @property
    def bits_per_byte(self) -> float:
        return self.val_loss / math.log(2)


def train_lm(
    size: str = "1m",
    steps: int = 400,
    batch: int = 32,
    block: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    max_seconds: float | None = 90.0,
) -> TrainedLM:
    """Train ailab.models.tiny_gpt(size) on the training snippets with AdamW and a cosine schedule, for
    `steps` steps or `max_seconds`, whichever comes first; the loss is measured on the test snippets."""
    from ailab.models import tiny_gpt

    if steps < 1 or batch < 1 or block < 2:
        raise ValueError(f"steps, batch must be >= 1 and block >= 2 (got {steps}, {batch}, {block})")
    train, test = corpus("train"), corpus("test")
    model = tiny_gpt(size, seed=seed)
    if block > model.config.n_positions:
        raise ValueError(f"block={block} is longer than the model's {model.config.n_positions} positions")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    losses, t0 = [], time.perf_counter()
    model.train()
    for step in range(steps):
        for g in opt.param_groups:  # warm up for 20 steps, then cosine decay to a tenth
            g["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        x, y = batches(train, batch, block, gen)
        logits = model(x).logits  # (batch, block, 256)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
    seconds = time.perf_counter() - t0
    model.eval()
    return TrainedLM(model, len(losses), seconds, held_out_loss(model, test, block), unigram_loss(train, test), losses)


def save_lm(trained: TrainedLM, path: str | Path) -> str:
    """Save the weights as safetensors (the tied output head is the embedding: stored once); returns the
    SHA-256 to keep as the trusted hash for load_lm."""
    from ailab.models import save_state_dict

    state = {k: v for k, v in trained.model.state_dict().items() if k != "lm_head.weight"}
    return save_state_dict(state, path)


def load_lm(path: str | Path, sha256: str, size: str = "1m"):
    """The saved model, after its file's SHA-256 was checked against `sha256` (a mismatch is refused)."""
    from ailab.models import load_state_dict, tiny_gpt

    model = tiny_gpt(size)
    missing, unexpected = model.load_state_dict(load_state_dict(path, sha256), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{path} does not hold a tiny_gpt({size!r}): missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def decode_bytes(ids) -> str:
    """Generated byte values back to text (an incomplete UTF-8 sequence is shown as the replacement mark)."""
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
