"""Independent wrong answers for ex_verify_then_load, written from labs/2_engine/ex_verify_then_load.ipynb's contract
alone."""

import hashlib
import hmac

import torch

from ailab.models import WeightsIntegrityError

CHUNK_BYTES = 1 << 20


def verify_then_load(path, expected_sha256):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(
            f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def keeps_every_chunk(path, expected_sha256):
    """Reads the file in 1 MiB chunks but collects them in a list and hashes their join, so the whole file sits in
    memory anyway."""
    # differs on: a 32 MiB file -> right peaks at ~1 MiB of Python memory, wrong at ~64 MiB (list + join)
    chunks = []
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            chunks.append(chunk)
    actual = hashlib.sha256(b"".join(chunks)).hexdigest()
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(
            f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def constant_time_compare_case_sensitive(path, expected_sha256):
    """Compares with hmac.compare_digest (constant time) but without lower-casing the expected digest, so an
    upper-case trusted hash is refused."""
    # differs on: expected = the file's digest .upper() -> right loads, wrong WeightsIntegrityError
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if not hmac.compare_digest(actual, expected_sha256):
        raise WeightsIntegrityError(
            f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def mismatch_is_a_value_error(path, expected_sha256):
    """Raises ValueError ('the value does not match') on a digest mismatch instead of WeightsIntegrityError."""
    # differs on: any file with a wrong digest -> right WeightsIntegrityError, wrong ValueError
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        raise ValueError(f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}")
    return torch.load(path, map_location="cpu", weights_only=True)


def message_without_expected_hash(path, expected_sha256):
    """Names the file and its own hash in the refusal but not the expected one."""
    # differs on: any file with a wrong digest -> right message holds both digests, wrong only the file's
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(f"refusing to load {path}: unexpected SHA-256 {actual}")
    return torch.load(path, map_location="cpu", weights_only=True)


_verified = set()


def remembers_verified_paths(path, expected_sha256):
    """Skips hashing a path it has already verified (hashing gigabytes is slow), so a file replaced after its first
    load is never checked again."""
    # differs on: load p with its digest, overwrite p with other bytes, load again with the same digest
    #   -> right WeightsIntegrityError, wrong loads the replaced file
    key = (str(path), expected_sha256.lower())
    if key not in _verified:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
                digest.update(chunk)
        actual = digest.hexdigest()
        if actual != expected_sha256.lower():
            raise WeightsIntegrityError(
                f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}"
            )
        _verified.add(key)
    return torch.load(path, map_location="cpu", weights_only=True)


def missing_file_loads_nothing(path, expected_sha256):
    """Returns None for a file that does not exist instead of raising."""
    # differs on: a path that does not exist -> right FileNotFoundError, wrong None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(
            f"refusing to load {path}: its SHA-256 is {actual} but the trusted hash is {expected_sha256}"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


RIGHT = {"verify_then_load": verify_then_load}
WRONG = [
    ("verify_then_load", keeps_every_chunk, "resources"),
    ("verify_then_load", constant_time_compare_case_sensitive, "order/parsing"),
    ("verify_then_load", mismatch_is_a_value_error, "error handling"),
    ("verify_then_load", message_without_expected_hash, "misread prose"),
    ("verify_then_load", remembers_verified_paths, "state"),
    ("verify_then_load", missing_file_loads_nothing, "error handling"),
]
