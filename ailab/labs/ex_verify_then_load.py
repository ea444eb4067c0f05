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
import math
import os
import pickle
import re
import shutil
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import torch

from ailab.labs.core import LabCheckFailed, check, expect, refused, shared
from ailab.labs.differential import exactly, same_as_reference, short
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


# --------------------------------------------------------------------------- the differential check (issue 42)
#
# A story: one file name in a fresh folder, and 1-4 calls in turn. Before each call the file is (re)written - a
# state dict saved with torch.save, raw bytes (some exactly at, one under or one over a common read size), the
# payload pickle, one byte of the file before flipped (same size; with keep_stat, the same mtime too), deleted,
# or left as it was - and the call is given a digest: the file's own (lower or upper case), one character
# off, a prefix, one character too long, the digest of the file before (a stale one), another file's, or "".
# The reference and the learner each play the story in their own folder; what each call does is compared.

_NAMES = ("model.pt", "weights.bin", "model", "my model (v2).pt", "modèle-ü.pt")
_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool")
_SHAPES = ((), (0,), (1,), (3,), (2, 3), (0, 4), (4, 1))
_READ_EDGES = (0, 1, 4095, 4096, 4097, 65535, 65536, 65537, 2**20 - 1, 2**20, 2**20 + 1)


def _reference_verify_then_load(path, expected_sha256):
    """The contract: hash in 1 MiB chunks, compare whole lower-case digests, refuse before parsing, load safely."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(f"refusing {path}: its SHA-256 is {actual}, the trusted one {expected_sha256}")
    return torch.load(path, map_location="cpu", weights_only=True)


def _stories():
    """Hypothesis: (file name, steps), each step (content, digest, as_str, keep_stat) as plain data."""
    from hypothesis import strategies as st

    def values(dtype: str, n: int):
        if dtype == "bool":
            one = st.booleans()
        elif dtype.startswith("float"):
            one = st.floats(width=int(dtype[5:]), allow_nan=True, allow_infinity=True)
        else:
            info = np.iinfo(dtype)
            edges = [
                v
                for v in (0, 1, -1, 2**31, 2**31 + 1, -(2**31) - 1, 2**53 + 1, info.min, info.max)
                if info.min <= v <= info.max
            ]
            one = st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max)))
        return st.lists(one, min_size=n, max_size=n)

    @st.composite
    def tensor(d):
        dtype, shape = d(st.sampled_from(_DTYPES)), d(st.sampled_from(_SHAPES))
        return dtype, shape, tuple(d(values(dtype, int(np.prod(shape, dtype=int)))))

    state = st.dictionaries(st.text(max_size=6), tensor(), max_size=3).map(lambda s: ("state", tuple(s.items())))
    first = st.one_of(
        state,
        st.binary(max_size=40).map(lambda b: ("bytes", b)),
        st.sampled_from(_READ_EDGES).map(lambda n: ("zeros", n)),
        st.just(("payload",)),
        st.just(("missing",)),
    )
    later = st.one_of(first, st.integers(0, 2**20 + 2).map(lambda i: ("flip", i)), st.just(("unchanged",)))
    digest = st.one_of(
        st.just(("own",)),
        st.just(("own",)),
        st.sampled_from([("upper",), ("extend",), ("stale",), ("other",), ("empty",)]),
        st.integers(0, 63).map(lambda i: ("flip", i)),
        st.integers(0, 63).map(lambda k: ("prefix", k)),
    )

    @st.composite
    def story(d):
        name = d(st.sampled_from(_NAMES))
        n = d(st.integers(1, 4))
        steps = [(d(first if i == 0 else later), d(digest), d(st.booleans()), d(st.booleans())) for i in range(n)]
        return name, tuple(steps)

    return story()


def _write(path: Path, content: tuple) -> None:
    kind = content[0]
    if kind == "state":
        state = {k: torch.tensor(list(v), dtype=getattr(torch, dt)).reshape(shape) for k, (dt, shape, v) in content[1]}
        torch.save(state, path)
    elif kind == "bytes":
        path.write_bytes(content[1])
    elif kind == "zeros":
        path.write_bytes(bytes(content[1]))
    elif kind == "payload":
        torch.save({"weight": torch.zeros(2), "extra": _Payload("story")}, path)
    elif kind == "missing":
        path.unlink(missing_ok=True)
    elif kind == "flip" and path.is_file() and path.stat().st_size:
        blob = bytearray(path.read_bytes())
        blob[content[1] % len(blob)] ^= 0x01
        path.write_bytes(bytes(blob))
    # "unchanged", or a flip of a file that is missing or empty: nothing to do


def _expected(kind: tuple, actual: str | None, before: str | None) -> str:
    own = actual or before or "0" * 64
    name = kind[0]
    if name == "own":
        return own
    if name == "upper":
        return own.upper()
    if name == "flip":
        i = kind[1]
        return own[:i] + format((int(own[i], 16) + 1) % 16, "x") + own[i + 1 :]
    if name == "prefix":
        return own[: kind[1]]
    if name == "extend":
        return own + "0"
    if name == "stale":
        return before or hashlib.sha256(b"the trusted weights").hexdigest()
    if name == "other":
        return hashlib.sha256(b"another file").hexdigest()
    return ""


def _say_content(content: tuple) -> str:
    kind = content[0]
    if kind == "state":
        tensors = ", ".join(f"{k!r}: {dt} {list(shape)} {short(list(v))}" for k, (dt, shape, v) in content[1])
        return f"torch.save({{{tensors}}})"
    if kind == "bytes":
        return f"the {len(content[1])} bytes {short(content[1])}"
    if kind == "zeros":
        return f"{content[1]} zero bytes"
    if kind == "payload":
        return "a pickle whose unpickling calls a function"
    if kind == "missing":
        return "deleted"
    if kind == "flip":
        return f"with its byte at {content[1]} (modulo its size) flipped"
    return "left as it was"


_SAY_DIGEST = {
    "own": "its own digest",
    "upper": "its own digest in upper case",
    "flip": "its digest with character {} changed",
    "prefix": "the first {} characters of its digest",
    "extend": "its digest with one more character",
    "stale": "the digest of the file as it was before this call",
    "other": "another file's digest",
    "empty": "an empty digest",
}


def _say_story(name: str, steps: tuple) -> str:
    calls = []
    for i, (content, digest, as_str, keep_stat) in enumerate(steps, 1):
        verb = "written as " if content[0] not in ("flip", "unchanged", "missing") else ""
        what = verb + _say_content(content)
        if keep_stat and i > 1 and content[0] not in ("missing", "unchanged"):
            what += " (its mtime set back to the earlier file's)"
        say_digest = _SAY_DIGEST[digest[0]].format(*digest[1:])
        calls.append(f"call {i}: the file {what}, given as a {'str' if as_str else 'Path'} with {say_digest}")
    return f"one file, {name!r}, in a fresh folder - " + "; ".join(calls)


def _first_line(e: BaseException) -> str:
    line = next((x for x in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines() if x.strip()), "")
    return line[:120] + ("..." if len(line) > 120 else "")


def _normal_state(out):
    """('loads', ((key, dtype, shape, values), ...)) for a dict of tensors; ('returns', type) for anything else."""
    if isinstance(out, dict) and all(isinstance(v, torch.Tensor) for v in out.values()):
        items = sorted(((repr(k), str(v.dtype), tuple(v.shape), v.tolist()) for k, v in out.items()), key=str)
        return "loads", tuple(items)
    return "returns", type(out).__name__


def _observe(fn, given, expected: str, path: Path, actual: str | None) -> tuple:
    """What one call does: (kind, detail, payload ran, words about it, file name); the first three are compared."""
    return (*_call_once(fn, given, expected, path, actual), path.name)


def _call_once(fn, given, expected: str, path: Path, actual: str | None) -> tuple:
    TRIPPED.clear()
    try:
        out = fn(given, expected)
    except (NotImplementedError, LabCheckFailed):
        raise
    except Exception as e:  # noqa: BLE001 - what the learner raised is what this call did
        text = f"{type(e).__name__}: {_first_line(e)}"
        if actual is None:
            if isinstance(e, (FileNotFoundError, WeightsIntegrityError)):
                return "missing", (path.name in str(e),), bool(TRIPPED), text
            return "raises", (type(e).__name__,), bool(TRIPPED), text
        if isinstance(e, WeightsIntegrityError):
            message = str(e).lower()
            detail = (path.name in str(e), actual in message, expected.lower() in message)
            return "integrity", detail, bool(TRIPPED), text
        return "loader", (), bool(TRIPPED), text
    kind, detail = _normal_state(out)
    return kind, detail, bool(TRIPPED), short(out)


def _say_call(outcome: tuple, reference: bool) -> str:
    kind, detail, ran, words, name = outcome
    said = {
        "loads": lambda: (
            "returns the state dict {"
            + ", ".join(f"{k}: {dt.removeprefix('torch.')} {list(s)} {short(v)}" for k, dt, s, v in detail)
            + "}"
        ),
        "returns": lambda: f"returns {words}",
        "missing": lambda: (
            f"raises {words.split(':')[0]}" + ("" if detail[0] else f" without naming the file ({name}): {words}")
        ),
        "raises": lambda: f"raises {words}",
        "loader": lambda: f"lets torch.load's refusal through ({words})" if reference else f"raises {words}",
        "integrity": lambda: (
            "raises WeightsIntegrityError"
            + (
                ""
                if all(detail)
                else " whose message does not "
                + " or ".join(
                    w
                    for w, ok in zip(
                        (f"name the file ({name})", "give the file's actual SHA-256", "give the expected SHA-256"),
                        detail,
                    )
                    if not ok
                )
                + f": {words}"
            )
        ),
    }[kind]()
    return said + (" - and the payload in the file ran" if ran else "")


def _same_calls(mine: list, ref: list) -> str | None:
    for i, (m, r) in enumerate(zip(mine, ref), 1):
        if (m[0], m[2]) != (r[0], r[2]) or exactly(m[1], r[1]) is not None:
            return f"at call {i} the reference {_say_call(r, True)}; yours {_say_call(m, False)}"
    return None


def _story_player(fn, base: Path):
    def play(name: str, steps: tuple) -> list:
        folder = Path(tempfile.mkdtemp(dir=base))
        path, before, calls = folder / name, None, []
        try:
            for content, digest, as_str, keep_stat in steps:
                old = path.stat() if path.is_file() else None
                _write(path, content)
                if keep_stat and old is not None and path.is_file():
                    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
                actual = _sha(path) if path.is_file() else None
                expected = _expected(digest, actual, before)
                calls.append(_observe(fn, str(path) if as_str else path, expected, path, actual))
                before = actual or before
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return calls

    return play


_STORY_EDGES = (
    (
        "model.pt",
        (
            (("state", (("w", ("float32", (2,), (1.0, math.nan))),)), ("own",), False, False),
            (("unchanged",), ("upper",), True, False),  # the same digest in upper case, the path as a str
        ),
    ),
    ("model.pt", ((("zeros", 2**20 + 1), ("own",), False, False),)),  # one byte past a 1 MiB read
    (
        "model.pt",
        (
            (("state", (("w", ("int64", (1,), (2**31,))),)), ("own",), False, False),
            (("state", (("w", ("int64", (1,), (2**31 + 1,))),)), ("own",), True, True),  # rewritten: same size
            (("flip", 2**20), ("stale",), False, True),  # one byte flipped, mtime kept: the old digest no longer fits
        ),
    ),
    ("model.pt", ((("payload",), ("own",), False, False), (("unchanged",), ("prefix", 0), True, False))),
)


@check(LAB, "does what the reference does on every file and digest tried, including a file changed between calls")
def check_same_as_reference(verify_then_load):
    base = _workdir()
    try:
        same_as_reference(
            _story_player(verify_then_load, base),
            _story_player(_reference_verify_then_load, base),
            _stories(),
            describe=_say_story,
            compare=_same_calls,
            edges=_STORY_EDGES,
            arg_names=("name", "steps"),
            examples=60,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
