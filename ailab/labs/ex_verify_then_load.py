"""Exercise checks: verify a weights file's SHA-256 before parsing it, then load it safely (topic E6).

The learner writes one function:
  verify_then_load(path, expected_sha256) -> what the file holds (a state dict)
      hash the file's bytes with SHA-256, reading it in chunks (a weights file can be larger than the memory
      you want to spend on checking it); compare with the trusted hex digest (upper or lower case); on a
      mismatch raise ailab.models.WeightsIntegrityError naming the file and both hashes, without parsing a
      byte of it; only then load it with torch.load(..., weights_only=True). A missing file raises
      FileNotFoundError or WeightsIntegrityError naming it.

The checks are derived from what the function must guarantee, on files they craft:
  a trusted file loads: the same tensors come back (not the bytes, not None); an upper-case digest is the
      same digest; the file (13.3 MiB) is larger than any single read the large-file check allows, so hashing
      only the first read fails one check or the other; a str path works.
  a mismatch is refused before parsing: a pickle whose unpickling calls a tripwire function, with a digest
      that does not match, must raise WeightsIntegrityError and leave the tripwire untouched (a loader that
      parses first - pickle, torch.load with weights_only=False, or torch.load with weights_only=True whose
      UnpicklingError comes first - fails); the message names the file, the file's actual SHA-256 and the
      expected one; a digest that differs in its last character only, and an empty digest, are refused
      (a prefix or substring comparison fails); the wrong exception type fails; a str path is refused the same
      way, its message still naming the file (not an AttributeError from `path.name`).
  weights_only: the same tripwire pickle with its own, matching digest (the attacker shipped both) must
      still be refused and the tripwire must not fire.
  a missing file, as a Path and as a str, raises (not None, not an empty dict) an error naming it; a 32 MiB file with a wrong
      digest is hashed in chunks: Python's peak allocation while checking it stays under 12 MiB (reading
      the whole file first fails).
"""

from __future__ import annotations

import hashlib
import pickle
import tracemalloc
from pathlib import Path

import torch

from ailab.labs.core import check, expect, refused, shared
from ailab.models import WeightsIntegrityError
from ailab.scratch import scratch_dir

LAB = "ex_verify_then_load"

TRIPPED: list[str] = []


def _tripwire(note: str) -> str:
    """What a malicious checkpoint calls while it is unpickled; here it only records that it ran."""
    TRIPPED.append(note)
    return note


class _Payload:
    def __init__(self, note: str):
        self.note = note

    def __reduce__(self):
        return (_tripwire, (self.note,))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _workdir() -> Path:
    return scratch_dir("ailab-ex-verify-")


def _trusted_state() -> dict:
    # 13.3 MiB: larger than the 12 MiB the large-file check allows at the peak, so no single read covers it and
    # passes that check too: every chunk has to reach the hash
    return {
        "weight": torch.arange(3400 * 1024, dtype=torch.float32).reshape(3400, 1024),
        "bias": torch.tensor([0.5, -1.0, 2.0]),
    }


def _trusted_file(folder: Path | None = None) -> tuple[Path, dict]:
    """The trusted file (written once per process unless `folder` is given) and the state dict it holds."""

    def write(where: Path) -> Path:
        torch.save(_trusted_state(), where / "model.pt")
        return where / "model.pt"

    path = (
        write(folder)
        if folder is not None
        else shared("ex_verify_then_load-trusted", lambda: write(_workdir()), alive=lambda p: p.is_file())
    )
    return path, _trusted_state()


def _evil_file(folder: Path, note: str) -> Path:
    path = folder / "evil.pt"
    torch.save({"weight": torch.zeros(2), "extra": _Payload(note)}, path)
    return path


def _same_state(got, want) -> bool:
    return (
        isinstance(got, dict)
        and set(got) == set(want)
        and all(isinstance(got[k], torch.Tensor) and torch.equal(got[k], want[k]) for k in want)
    )


@check(LAB, "a file whose hash matches loads (upper-case hex too)")
def check_loads_trusted_file(verify_then_load):
    path, state = _trusted_file()
    digest = _sha(path)
    for expected, what in [(digest, "its lower-case hex digest"), (digest.upper(), "its digest in upper case")]:
        out = verify_then_load(path, expected)
        expect(out is not None, f"verify_then_load(path, {what}) returned None: return what torch.load gives")
        expect(
            not isinstance(out, (bytes, bytearray)),
            f"verify_then_load(path, {what}) returned the file's bytes: "
            "parse them with torch.load(..., weights_only=True) and "
            "return the state dict",
        )
        expect(
            _same_state(out, state),
            f"verify_then_load(path, {what}) should return the saved state dict "
            f"{{'weight': (3400, 1024) tensor, 'bias': (3,) tensor}}; got {out!r:.200}",
        )
    out = verify_then_load(str(path), digest)
    expect(_same_state(out, state), "the path may also be a str: verify_then_load(str(path), digest) should load it")


def _expect_integrity_error(verify_then_load, path, expected, what, note=None):
    """Call and return the WeightsIntegrityError; fail on anything else (a result, another exception, the tripwire)."""
    TRIPPED.clear()
    try:
        out = verify_then_load(path, expected)
    except NotImplementedError:
        raise
    except WeightsIntegrityError as e:
        expect(
            not TRIPPED,
            f"{what}: the refusal came after the file was unpickled - the payload ran. Hash and "
            "compare first; parse nothing before the digest matches",
        )
        return e
    except Exception as e:  # noqa: BLE001 - the wrong type is the mistake this check names
        if TRIPPED:
            expect(
                False,
                f"{what}: the file was unpickled before its hash was checked - the payload ran. Hash "
                "and compare first; parse nothing before the digest matches",
            )
        parsed = "unpickl" in f"{type(e).__name__} {e}".lower() or "weights_only" in str(e)
        expect(
            False,
            f"{what}: raise ailab.models.WeightsIntegrityError; your code raised {type(e).__name__}: "
            f"{str(e)[:160]}"
            + (" - that is the parser's refusal: the file was parsed before its hash was compared" if parsed else ""),
        )
    expect(
        not TRIPPED, f"{what}: the file was unpickled - the payload ran - and verify_then_load returned {out!r:.120}"
    )
    expect(False, f"{what}: verify_then_load returned {out!r:.120}; it must refuse (raise WeightsIntegrityError)")


@check(LAB, "a hash mismatch is refused before the file is parsed, naming the file and both hashes")
def check_refuses_mismatch(verify_then_load):
    folder = _workdir()
    path = _evil_file(folder, "mismatch")
    actual = _sha(path)
    wrong = hashlib.sha256(b"the trusted weights").hexdigest()
    err = _expect_integrity_error(
        verify_then_load, path, wrong, "a pickle with a payload and a digest that does not match"
    )
    message = str(err)
    expect(path.name in message, f"the error should name the file ({path.name}); its message is {message!r:.300}")
    expect(
        actual in message.lower(),
        f"the error should give the file's actual SHA-256 ({actual[:12]}...) so "
        f"whoever reads it can tell which file is on disk; its message is "
        f"{message!r:.300}",
    )
    expect(
        wrong in message.lower(),
        f"the error should give the expected SHA-256 ({wrong[:12]}...); its message is {message!r:.300}",
    )
    err = _expect_integrity_error(
        verify_then_load,
        str(path),
        wrong,
        "the same file and digest, its path given as a str (what a config file holds)",
    )
    expect(
        path.name in str(err),
        f"with a str path, the error should still name the file ({path.name}); its message is {str(err)!r:.300}",
    )
    good, _ = _trusted_file()
    digest = _sha(good)
    last = "0" if digest[-1] != "0" else "1"
    _expect_integrity_error(
        verify_then_load, good, digest[:-1] + last, "a digest that differs from the file's in its last character only"
    )
    _expect_integrity_error(verify_then_load, good, "", "an empty expected digest")
    _expect_integrity_error(verify_then_load, good, digest[:16], "the first 16 characters of the file's digest")


@check(LAB, "a matching hash is not enough: torch.load(weights_only=True) refuses a pickle that runs code")
def check_weights_only(verify_then_load):
    path = _evil_file(_workdir(), "matching")
    TRIPPED.clear()
    try:
        out = verify_then_load(path, _sha(path))
    except NotImplementedError:
        raise
    except WeightsIntegrityError as e:
        expect(
            False,
            f"the file's hash matches (the attacker shipped both), yet verify_then_load raised "
            f"WeightsIntegrityError: {str(e)[:160]} - compare the digest of the file's bytes with the one "
            "you are given",
        )
    except pickle.UnpicklingError:  # torch.load(weights_only=True)'s refusal
        expect(
            not TRIPPED,
            "the payload ran while the file was loaded: load with torch.load(..., weights_only=True), "
            "which refuses anything but tensors and plain containers",
        )
    except Exception as e:  # noqa: BLE001 - another exception is not the loader's refusal
        expect(not TRIPPED, "the payload ran while the file was loaded: load with torch.load(..., weights_only=True)")
        expect(
            False,
            f"a pickle that calls a function on load, with a matching hash: torch.load(..., "
            f"weights_only=True) refuses it with pickle.UnpicklingError; your code raised "
            f"{type(e).__name__}: {str(e)[:160]}",
        )
    else:
        expect(
            False,
            "a pickle that calls a function on load was loaded"
            + (" and its payload ran" if TRIPPED else "")
            + f" (got {out!r:.120}): load with torch.load(..., weights_only=True), never pickle or "
            "weights_only=False",
        )


@check(LAB, "a missing file is an error; a large file is hashed in chunks")
def check_missing_and_large(verify_then_load):
    folder = _workdir()
    missing = folder / "no-such-model.pt"
    for given in (missing, str(missing)):
        what = f"a missing file, its path given as a {'str' if isinstance(given, str) else 'Path'}"
        e = refused(
            verify_then_load,
            given,
            "0" * 64,
            error=(FileNotFoundError, WeightsIntegrityError),
            what=what,
            should="raise FileNotFoundError or WeightsIntegrityError naming it, so that a server does not "
            "start without its weights",
        )
        expect(
            missing.name in str(e),
            f"{what} should raise an error naming it ({missing.name}); its message is {str(e)!r:.200}",
        )
    big = folder / "large.bin"
    size = 32 * 2**20
    with open(big, "wb") as f:
        f.truncate(size)  # 32 MiB of zeros (sparse where the file system allows)
    wrong = hashlib.sha256(b"something else").hexdigest()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        _expect_integrity_error(verify_then_load, big, wrong, "a 32 MiB file with a digest that does not match")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    expect(
        peak < 12 * 2**20,
        f"checking a 32 MiB file took {peak / 2**20:.0f} MiB of Python memory at its peak: read "
        "and hash it in chunks (1 MiB, say; a few MiB at most) rather than reading the whole file at once",
    )
