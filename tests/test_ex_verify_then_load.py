"""The verify-then-load exercise's checks pass the right answer and reject plausible wrong ones.

verify_then_load(path, expected_sha256) -> state dict
| question | what the checks try |
|---|---|
| which input varies each field | the file (trusted, a payload pickle, missing, 32 MiB of zeros) and the digest (its own, upper case, another, one character off, a prefix, empty) each alone |
| boundaries | a file larger than the 12 MiB any single read may take (13.3 MiB), a 32 MiB file under a 12 MiB peak; an empty digest; a digest off in its last character |
| a type the notes never show | the path as a str, also where it is refused or missing |
| order or ties | the order of hashing and parsing: a payload that records whether it ran |
| errors: type and message | WeightsIntegrityError (not ValueError, not the parser's UnpicklingError) naming the file and both hashes; a missing file FileNotFoundError or WeightsIntegrityError naming it; the loader's own refusal kept for a matching payload |
| policy: which item | - |

Each wrong answer is one class of mistake (parse before verifying, with an unsafe or a safe loader; verify
and then load unsafely; read the whole file; hash only the first chunk; a case-sensitive, prefix or
substring comparison; an error that names nothing, of the wrong type, or swallowed; bytes returned, ...).
"""

import hashlib
import pickle
from pathlib import Path

import pytest
import torch

from ailab.labs import LabCheckFailed
from ailab.labs import ex_verify_then_load as E
from ailab.models import WeightsIntegrityError

CHUNK = 1 << 20


def _digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _refuse(path, actual, expected):
    raise WeightsIntegrityError(f"refusing {path}: SHA-256 {actual}, expected {expected}")


def verify_then_load(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, map_location="cpu", weights_only=True)


def verify_then_load_alt(path, expected_sha256):
    """Also right: its own existence check, a walrus loop, whitespace stripped from the digest."""
    path = Path(path)
    if not path.is_file():
        raise WeightsIntegrityError(f"{path} does not exist")
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(4 * CHUNK):
            h.update(chunk)
    if h.hexdigest() != expected_sha256.strip().lower():
        raise WeightsIntegrityError(f"{path.name}: got {h.hexdigest()} want {expected_sha256}")
    with path.open("rb") as f:
        return torch.load(f, weights_only=True)


def verify_file_digest(path, expected_sha256):
    """Also right, and lean: hashlib.file_digest reads in chunks itself."""
    with open(path, "rb") as f:
        actual = hashlib.file_digest(f, "sha256").hexdigest()
    if actual.lower() != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def load_then_verify(path, expected_sha256):
    state = torch.load(path, weights_only=False)
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return state


def safe_load_then_verify(path, expected_sha256):
    """weights_only=True, but parsed before the hash is compared."""
    state = torch.load(path, weights_only=True)
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return state


def verify_then_unsafe_load(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=False)


def verify_then_pickle(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    with open(path, "rb") as f:
        return torch.load(f, pickle_module=pickle, weights_only=False)


def whole_file(path, expected_sha256):
    actual = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def first_chunk_only(path, expected_sha256):
    with open(path, "rb") as f:
        actual = hashlib.sha256(f.read(CHUNK)).hexdigest()
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def case_sensitive(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256:
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def prefix_compare(path, expected_sha256):
    actual = _digest(path)
    if not actual.startswith(expected_sha256.lower()):
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def short_compare(path, expected_sha256):
    """Compares the first 12 characters, as a log line would show them."""
    actual = _digest(path)
    if actual[:12] != expected_sha256.lower()[:12]:
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def substring_compare(path, expected_sha256):
    actual = _digest(path)
    if expected_sha256.lower() not in actual:
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def silent_message(path, expected_sha256):
    if _digest(path) != expected_sha256.lower():
        raise WeightsIntegrityError("hash mismatch")
    return torch.load(path, weights_only=True)


def message_without_file(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(f"SHA-256 {actual}, expected {expected_sha256}")
    return torch.load(path, weights_only=True)


def value_error(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        raise ValueError(f"refusing {path}: SHA-256 {actual}, expected {expected_sha256}")
    return torch.load(path, weights_only=True)


def swallows_missing(path, expected_sha256):
    try:
        return verify_then_load(path, expected_sha256)
    except FileNotFoundError:
        return None


def returns_bytes(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return Path(path).read_bytes()


def returns_nothing(path, expected_sha256):
    actual = _digest(path)
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    torch.load(path, weights_only=True)


def wraps_unpickling(path, expected_sha256):
    """Turns the loader's refusal into an integrity error: the file's hash was fine."""
    try:
        return verify_then_load(path, expected_sha256)
    except pickle.UnpicklingError as e:
        raise WeightsIntegrityError(str(e)) from e


def stub(*a, **k):
    raise NotImplementedError("write it")


CHECKS = [
    E.check_loads_trusted_file,
    E.check_refuses_mismatch,
    E.check_weights_only,
    E.check_missing_and_large,
    E.check_same_as_reference,
]


@pytest.mark.parametrize("fn", [verify_then_load, verify_then_load_alt, verify_file_digest])
def test_right_answers_pass(fn):
    for chk in CHECKS:
        chk(fn)
    assert not E.TRIPPED


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (E.check_loads_trusted_file, case_sensitive, "your code raised WeightsIntegrityError"),
        (E.check_loads_trusted_file, first_chunk_only, "your code raised WeightsIntegrityError"),
        (E.check_loads_trusted_file, returns_bytes, "returned the file's bytes"),
        (E.check_loads_trusted_file, returns_nothing, "returned None"),
        (E.check_refuses_mismatch, load_then_verify, "the refusal came after the file was unpickled - the payload ran"),
        (E.check_refuses_mismatch, safe_load_then_verify, "the parser's refusal: the file was parsed before its hash"),
        (
            E.check_refuses_mismatch,
            value_error,
            "raise ailab.models.WeightsIntegrityError; your code raised ValueError",
        ),
        (E.check_refuses_mismatch, silent_message, r"should name the file \(evil.pt\)"),
        (E.check_refuses_mismatch, message_without_file, r"should name the file \(evil.pt\)"),
        (E.check_refuses_mismatch, prefix_compare, "an empty expected digest: verify_then_load returned"),
        (E.check_refuses_mismatch, substring_compare, "an empty expected digest: verify_then_load returned"),
        (
            E.check_refuses_mismatch,
            short_compare,
            "differs from the file's in its last character only: verify_then_load returned",
        ),
        (E.check_weights_only, verify_then_unsafe_load, "was loaded and its payload ran"),
        (E.check_weights_only, verify_then_pickle, "was loaded and its payload ran"),
        (E.check_weights_only, wraps_unpickling, "yet verify_then_load raised WeightsIntegrityError"),
        (E.check_missing_and_large, swallows_missing, "a missing file, its path given as a Path: .*it returned None"),
        (E.check_missing_and_large, whole_file, "took 32 MiB of Python memory at its peak"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_the_tripwire_fires_on_an_unsafe_load(tmp_path):
    E.TRIPPED.clear()
    path = E._evil_file(tmp_path, "probe")
    torch.load(path, weights_only=False)
    assert E.TRIPPED == ["probe"]
    E.TRIPPED.clear()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert not E.TRIPPED


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


def names_the_file_by_path_name(path, expected_sha256):
    """Builds its message from path.name: a str path turns the refusal into AttributeError."""
    actual = _digest(path)
    if actual != expected_sha256.lower():
        raise WeightsIntegrityError(f"refusing {path.name}: SHA-256 {actual}, expected {expected_sha256}")
    return torch.load(path, weights_only=True)


def one_big_read(path, expected_sha256):
    """Hashes a single read of 8 MiB: 'in chunks', but only the first one."""
    with open(path, "rb") as f:
        actual = hashlib.sha256(f.read(8 * CHUNK)).hexdigest()
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def one_read_of_the_whole_size(path, expected_sha256):
    """One read as big as the file: right digest, all of it in memory."""
    with open(path, "rb") as f:
        actual = hashlib.sha256(f.read(Path(path).stat().st_size)).hexdigest()
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def missing_str_path_crashes(path, expected_sha256):
    """Checks existence with Path methods on whatever it is given."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return verify_then_load(path, expected_sha256)


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            E.check_refuses_mismatch,
            names_the_file_by_path_name,
            r"its path given as a str.*your code raised "
            r"AttributeError",
        ),
        (E.check_loads_trusted_file, one_big_read, r"your code raised WeightsIntegrityError"),
        (E.check_missing_and_large, one_read_of_the_whole_size, r"took 32 MiB of Python memory"),
        (
            E.check_missing_and_large,
            missing_str_path_crashes,
            r"a missing file, its path given as a str.*AttributeError",
        ),
    ],
)
def test_sizes_and_types_nobody_listed(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


# --------------------------------------------------------------------------- the differential check (issue 42)
_VERIFIED: dict = {}
_BY_STAT: dict = {}


def cache_by_path(path, expected_sha256):
    """State: remembers which path it verified against which digest, and skips hashing it again."""
    key = str(path)
    if _VERIFIED.get(key) != expected_sha256.lower():
        actual = _digest(path)
        if actual != expected_sha256.lower():
            _refuse(path, actual, expected_sha256)
        _VERIFIED[key] = actual
    return torch.load(path, weights_only=True)


def cache_by_size_and_mtime(path, expected_sha256):
    """State: hashes again only when the file's size or mtime changed - a rewrite that keeps both is not seen."""
    st = Path(path).stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _BY_STAT:
        _BY_STAT[key] = _digest(path)
    actual = _BY_STAT[key]
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def first_64_characters(path, expected_sha256):
    """Boundaries: keeps the first 64 characters "in case of a trailing newline" - a digest one too long passes."""
    actual = _digest(path)
    if actual != expected_sha256[:64].lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def at_least_one_chunk(path, expected_sha256):
    """Boundaries: a do-while loop that hashes one chunk, then stops at the first short read without hashing it."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        chunk = f.read(CHUNK)
        h.update(chunk)
        while len(chunk) == CHUNK:
            chunk = f.read(CHUNK)
            if len(chunk) == CHUNK:
                h.update(chunk)
    actual = h.hexdigest()
    if actual != expected_sha256.lower():
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


def hex_bytes_compare(path, expected_sha256):
    """Parsing: bytes.fromhex(expected) - an odd-length digest raises ValueError instead of being refused."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    if h.digest() != bytes.fromhex(expected_sha256):
        _refuse(path, h.hexdigest(), expected_sha256)
    return torch.load(path, weights_only=True)


def strips_prefix_characters(path, expected_sha256):
    """Parsing: .strip("sha256:") meant as removeprefix - it strips those characters from both ends of a digest."""
    actual = _digest(path)
    if actual != expected_sha256.lower().strip("sha256:"):
        _refuse(path, actual, expected_sha256)
    return torch.load(path, weights_only=True)


NEW_WRONG = [
    cache_by_path,
    cache_by_size_and_mtime,
    first_64_characters,
    at_least_one_chunk,
    hex_bytes_compare,
    strips_prefix_characters,
]


@pytest.mark.parametrize("fn", [verify_then_load, verify_then_load_alt, verify_file_digest])
def test_right_answers_agree_with_the_reference(fn):
    E.check_same_as_reference(fn)
    assert not E.TRIPPED


@pytest.mark.parametrize("wrong", NEW_WRONG)
def test_new_wrong_answers_pass_the_old_checks_but_not_the_differential_one(wrong):
    _VERIFIED.clear()
    _BY_STAT.clear()
    with pytest.raises(LabCheckFailed, match="where the two differ|at call"):
        E.check_same_as_reference(wrong)


# whole_file, one_big_read and one_read_of_the_whole_size give the reference's answer on every story (their
# fault is memory, or a file larger than any story writes): check_missing_and_large and check_loads_trusted_file
# catch them, as test_wrong_answers_fail and test_sizes_and_types_nobody_listed show.
NOT_FOR_THE_DIFFERENTIAL_CHECK = {"whole_file", "one_big_read", "one_read_of_the_whole_size"}


@pytest.mark.parametrize(
    "wrong",
    [
        load_then_verify,
        safe_load_then_verify,
        verify_then_unsafe_load,
        verify_then_pickle,
        first_chunk_only,
        case_sensitive,
        prefix_compare,
        short_compare,
        substring_compare,
        silent_message,
        message_without_file,
        value_error,
        swallows_missing,
        returns_bytes,
        returns_nothing,
        wraps_unpickling,
        names_the_file_by_path_name,
        missing_str_path_crashes,
    ],
)
def test_the_differential_check_catches_the_old_wrong_answers(wrong):
    with pytest.raises(LabCheckFailed, match="at call"):
        E.check_same_as_reference(wrong)


def test_the_differential_check_says_which_call_and_both_outcomes():
    with pytest.raises(LabCheckFailed) as e:
        E.check_same_as_reference(cache_by_size_and_mtime)
    message = str(e.value)
    assert "mtime set back" in message and "at call 2 the reference returns the state dict {'w': int64" in message
    assert "yours raises WeightsIntegrityError" in message
