"""The HTTP layer below the app: uvicorn's own 400s made JSON, naming the header at fault.

Some malformed requests never reach FastAPI: uvicorn's parser (httptools, or h11 without it) refuses a
Content-Length that is not plain digits ("1e3", "+5", "-1", "0x10", "１２"), two Content-Lengths, one
beside Transfer-Encoding, a control character in any header value, a header line that is not
"Name: value". uvicorn answers those with a bare text/plain "Invalid HTTP request received."; this
protocol answers the same 400 as JSON, like every other refusal, and says which header was wrong.
It also turns h11's ValueError on a Content-Length of thousands of digits (Python's int() limit) into
that 400 instead of a dropped connection.

    uvicorn.Config(app, http=JsonErrorsProtocol)      # what start_in_thread does
"""

from __future__ import annotations

import json
import re

from uvicorn.protocols.http.auto import AutoHTTPProtocol

_REQUEST_LINE = re.compile(rb"(?:^|\n)([A-Z]{1,20} [^ \r\n]* HTTP/)")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_KEEP = 8192  # bytes of the latest input kept to explain a refusal (a request head rarely needs more)


def _name(raw: bytes) -> str:
    return raw.decode("latin-1")[:60]


def _show(raw: bytes) -> str:
    return repr(raw[:40].decode("latin-1") + ("..." if len(raw) > 40 else ""))


def diagnose(data: bytes) -> str:
    """What is wrong with the last request head in `data`, in words; best effort, never raises."""
    starts = [m.start(1) for m in _REQUEST_LINE.finditer(data)]
    head = data[starts[-1] :] if starts else data
    head = re.split(rb"\r?\n\r?\n", head, maxsplit=1)[0]
    lines = re.split(rb"\r?\n", head)
    if not starts:
        return f"the request line {_show(lines[0])} is not 'METHOD /path HTTP/1.1'"
    lengths, chunked = [], False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            return f"the header line {_show(line)} is not 'Name: value'"
        value = value.strip(b" \t")
        if _CONTROL.search(value):
            return f"header {_name(name)} has a control character in its value"
        lengths += [value] if name.lower() == b"content-length" else []
        chunked = chunked or name.lower() == b"transfer-encoding"
    if len(lengths) > 1:
        return f"header Content-Length was sent {len(lengths)} times; send it once"
    if lengths and not re.fullmatch(rb"[0-9]+", lengths[0]):
        return f"header Content-Length must be a number of bytes in ASCII digits (got {_show(lengths[0])})"
    if lengths and chunked:
        return "headers Content-Length and Transfer-Encoding were both sent; send one"
    if lengths:
        return f"header Content-Length is too large ({len(lengths[0])} digits)"
    return "malformed HTTP request (the request line or a header could not be parsed)"


class JsonErrors:
    """Mixin over a uvicorn HTTP protocol class: JSON 400s that name the header."""

    _seen = b""

    def data_received(self, data: bytes) -> None:
        self._seen = (self._seen + data)[-_KEEP:]
        try:
            super().data_received(data)
        except ValueError:  # h11: int() of a Content-Length over Python's digit limit
            self.send_400_response("Invalid HTTP request received.")

    def send_400_response(self, msg: str) -> None:
        try:
            why = diagnose(self._seen)
        except Exception:  # noqa: BLE001 - the answer must go out whatever the bytes were
            why = "malformed HTTP request"
        body = json.dumps({"error": why, "status": 400, "request_id": "-"}).encode()
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\ncontent-length: ",
            str(len(body)).encode(),
            b"\r\nconnection: close\r\n\r\n",
            body,
        ]
        if not self.transport.is_closing():
            self.transport.write(b"".join(head))
        self.transport.close()


class JsonErrorsProtocol(JsonErrors, AutoHTTPProtocol):
    """uvicorn's HTTP protocol (httptools when installed, else h11) with JSON 400s that name the header."""
