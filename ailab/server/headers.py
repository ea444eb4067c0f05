"""The request headers the server reads: what is valid in each, and a 4xx that names the header otherwise.

A header that is present must be valid; an empty value is not "absent". Each is read at most once:
a header sent twice is 400, because which copy a client (or a proxy in between) meant is ambiguous.
Numbers are plain ASCII decimal - no sign but the one allowed, no exponent ("1e3"), no hex ("0x10"),
no underscores ("1_000"), no full-width digits ("１２"), no "nan"/"inf" - because Python's float()/int()
accept most of those and a server must not guess.

    header          valid                                                          otherwise
    Content-Type    application/json, optionally "; charset=utf-8"                 415
    Content-Length  ASCII digits (uvicorn's HTTP parser refuses any other form,     400 (protocol layer,
                    a duplicate, or one beside Transfer-Encoding; see protocol.py)  JSON, see protocol.py)
                    more than max_body_bytes                                       413
    X-Timeout-Ms    milliseconds, 0 or more: 1-9 ASCII digits, optional .fraction  400
                    (1-3 digits); above the server's deadline it is capped to it
    X-Priority      an integer -9999..9999: optional "-" then 1-4 ASCII digits     400
    X-Request-Id    1-64 characters of A-Z a-z 0-9 . _ -                           400
    Authorization   "Bearer <key>" (or X-Api-Key: <key>), only when a key is set,  401 (400 if sent twice)
                    the key's bytes exactly (only SP/HTAB around it are dropped)

Control characters in any header value, and header lines that are not "name: value", never reach
the app: the HTTP parser answers them with 400 (protocol.py makes that answer JSON too).
"""

from __future__ import annotations

import re
import time
import uuid

from starlette.requests import Request

from ailab.batching import MAX_PRIORITY, MIN_PRIORITY
from ailab.server.validation import InvalidRequest

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TIMEOUT_MS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,3})?")
_PRIORITY = re.compile(r"-?[0-9]{1,4}")
_CHARSET = re.compile(r'charset\s*=\s*"?utf-?8"?', re.IGNORECASE)
_OWS = " \t"  # RFC 9110's optional whitespace around a field value: SP and HTAB, nothing else


def _show(value: str) -> str:
    """The value for a message, quoted and cut; Starlette decodes header bytes as latin-1, so UTF-8 sent
    by the client ("１２") is shown as the client wrote it."""
    try:
        value = value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        pass
    return repr(value if len(value) <= 40 else value[:40] + "...")


def single(request: Request, name: str) -> str | None:
    """The header's one value, None when absent; 400 when it was sent more than once."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise InvalidRequest(400, f"header {name} was sent {len(values)} times; send it once")
    return values[0] if values else None


def request_id(request: Request) -> tuple[str, str | None]:
    """(the id to answer with, an error message or None). The id is the client's when valid, else a fresh one,
    so that even the 400 for a bad X-Request-Id carries an id to quote."""
    try:
        rid = single(request, "X-Request-Id")
    except InvalidRequest as e:
        return uuid.uuid4().hex, e.message
    if rid is None:
        return uuid.uuid4().hex, None
    if not _REQUEST_ID.fullmatch(rid):
        return uuid.uuid4().hex, (
            f"header X-Request-Id must be 1-64 characters of A-Z a-z 0-9 . _ - (got {_show(rid)})"
        )
    return rid, None


def check_content_type(request: Request) -> None:
    raw = single(request, "Content-Type")
    media, _, params = (raw or "").partition(";")
    if media.strip().lower() != "application/json":
        raise InvalidRequest(415, f"header Content-Type must be application/json (got {_show(raw) if raw else 'none'})")
    params = params.strip()
    if params and not _CHARSET.fullmatch(params):
        raise InvalidRequest(
            415, f"header Content-Type: the body must be UTF-8 JSON; drop {_show(params)} or send charset=utf-8"
        )


def declared_length(request: Request, max_bytes: int) -> int | None:
    """Content-Length as an int (None without one); 413 above max_bytes, checked before a byte is read."""
    raw = single(request, "Content-Length")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit():  # the HTTP parser already refuses these; kept as a guard
        raise InvalidRequest(400, f"header Content-Length must be a number of bytes in ASCII digits (got {_show(raw)})")
    if len(raw) > 15 or int(raw) > max_bytes:  # no int() of a 5000-digit string
        raise InvalidRequest(413, f"header Content-Length says {_show(raw)} bytes; the limit is {max_bytes}")
    return int(raw)


def deadline(request: Request, default_s: float) -> float:
    """time.monotonic() by which the answer is due: the server's default, lowered by X-Timeout-Ms."""
    timeout = default_s
    raw = single(request, "X-Timeout-Ms")
    if raw is not None:
        if not _TIMEOUT_MS.fullmatch(raw):
            raise InvalidRequest(
                400,
                f"header X-Timeout-Ms must be milliseconds, 0 or more, in plain digits "
                f"such as 250 or 2.5 (got {_show(raw)})",
            )
        timeout = min(timeout, float(raw) / 1e3)
    return time.monotonic() + timeout


def priority(request: Request) -> int:
    """X-Priority: an integer, higher served first (e.g. interactive 1, batch jobs -1); default 0."""
    raw = single(request, "X-Priority")
    if raw is None:
        return 0
    if not _PRIORITY.fullmatch(raw):
        raise InvalidRequest(
            400,
            f"header X-Priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, "
            f"e.g. 1 or -1 (got {_show(raw)})",
        )
    return int(raw)


def api_key(request: Request) -> bytes:
    """The key the client sent, as the bytes it sent (b"" for none): Authorization: Bearer <key>, else X-Api-Key.

    Only the optional whitespace HTTP allows around a field value (SP and HTAB) is trimmed. str.strip() would
    also drop a no-break space (0xA0), U+0085 and the rest of Unicode's spaces, so "<key>\xa0" would pass: no
    token holds them (RFC 6750's b64token), and a key is compared byte for byte. Bytes, not str, because
    hmac.compare_digest refuses a str with non-ASCII characters (TypeError), and a header may hold any byte."""
    auth = single(request, "Authorization") or ""
    key = auth[7:] if auth[:7].lower() == "bearer " else single(request, "X-Api-Key") or ""
    return key.strip(_OWS).encode("latin-1")  # Starlette decoded the header's bytes as latin-1: the bytes again
