"""Check a request before it costs any compute (topics S3, S5).

Every refusal is an InvalidRequest with an HTTP status and a message a client can act on:
413 for too big (body, number of texts, characters), 415 for the wrong content type,
400 for bytes that are not UTF-8 JSON, 422 for JSON of the wrong shape.
Validation runs on the event loop, so it is kept cheap: one strict decode, one json.loads.
The headers (Content-Type, X-Timeout-Ms, ...) are checked in headers.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

ALLOWED_KEYS = {"inputs", "model"}


class InvalidRequest(ValueError):
    """A request the server refuses: its HTTP status, a message a client can act on, and the parameter at fault
    when there is one (OpenAI's error body names it)."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


@dataclass
class PredictRequest:
    texts: list[str]
    model: str | None
    single: bool  # the client sent one string, not a list


def _no_constants(name: str):
    raise InvalidRequest(400, f"JSON contains {name}, which is not valid JSON; send numbers or strings only")


def parse_json(body: bytes):
    """Strict: UTF-8 only (no guessing UTF-16), no NaN/Infinity, bounded nesting."""
    if not body or not body.strip():
        raise InvalidRequest(400, 'empty body; send JSON like {"inputs": "some text"}')
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(400, f"body is not valid UTF-8 (bad byte at position {e.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constants)
    except InvalidRequest:
        raise
    except RecursionError:
        raise InvalidRequest(400, "JSON is nested too deeply") from None
    except json.JSONDecodeError as e:
        raise InvalidRequest(400, f"body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def _check_text(t, where: str, max_chars: int) -> str:
    if not isinstance(t, str):
        raise InvalidRequest(422, f"{where} must be a string, got {type(t).__name__}")
    if not t.strip():
        raise InvalidRequest(422, f"{where} is empty or only whitespace; send some text")
    if len(t) > max_chars:
        raise InvalidRequest(413, f"{where} has {len(t)} characters; the limit is {max_chars}")
    try:
        t.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(422, f"{where} contains an unpaired surrogate escape (not a real character)") from None
    return t


def parse_predict(body: bytes, max_items: int = 64, max_chars: int = 5_000) -> PredictRequest:
    """{"inputs": "text" | ["text", ...], "model": optional name} -> PredictRequest, or InvalidRequest."""
    data = parse_json(body)
    if not isinstance(data, dict):
        raise InvalidRequest(
            422, f'body must be a JSON object like {{"inputs": "text"}}, got a JSON {type(data).__name__}'
        )
    unknown = set(data) - ALLOWED_KEYS
    if unknown:
        raise InvalidRequest(422, f"unknown field(s) {sorted(unknown)}; allowed: {sorted(ALLOWED_KEYS)}")
    if "inputs" not in data:
        raise InvalidRequest(422, 'missing field "inputs" (a string or a list of strings)')
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model or len(model) > 100):
        raise InvalidRequest(422, '"model" must be a model name (a short string) or left out')
    inputs = data["inputs"]
    if isinstance(inputs, str):
        return PredictRequest([_check_text(inputs, '"inputs"', max_chars)], model, True)
    if not isinstance(inputs, list):
        raise InvalidRequest(422, f'"inputs" must be a string or a list of strings, got {type(inputs).__name__}')
    if not inputs:
        raise InvalidRequest(422, '"inputs" is an empty list; send at least one text')
    if len(inputs) > max_items:
        raise InvalidRequest(413, f'"inputs" has {len(inputs)} texts; the limit per request is {max_items}')
    return PredictRequest([_check_text(t, f'"inputs"[{i}]', max_chars) for i, t in enumerate(inputs)], model, False)
