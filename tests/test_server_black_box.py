"""Three holes black-box checks found in the HTTP server, each closed: a stop string holding a lone surrogate is a
400 naming `stop` (it was a 500), as the prompt's is; an API key with a no-break space or U+0085 after it is
refused (str.strip() dropped them), compared byte for byte with only SP/HTAB around it trimmed; and /readyz
names the served model (and why it cannot serve) only to callers with the key, when a key is set."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from starlette.requests import Request

import ailab.server.headers as hdr
from ailab.generation import Decoder
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.async_llm import AsyncLLM

KEY = "s3cret-key"
NAME = "ailab-gpt-hidden"  # the served model's name: what a caller without the key must not read
AUTH = {"Authorization": f"Bearer {KEY}"}


def _engine() -> AsyncLLM:
    return AsyncLLM(Decoder(tiny_gpt("1m", seed=0)), num_blocks=32, block_size=16, name=NAME)


@pytest.fixture(scope="module")
def url():
    with start_in_thread(create_app(generation=_engine(), api_key=KEY)) as handle:
        yield handle.url


# ---- 1. a lone surrogate in stop -----------------------------------------------------------------------------
# JSON can spell half of a UTF-16 pair ("\ud800") that is no character; the body is sent as raw bytes because a
# client's own JSON encoder refuses to write it (which is why only a hand-made request finds this).
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stop", [r'["\ud800"]', r'"\ud800"', r'["fine", "a\udfffb"]'])
def test_a_lone_surrogate_in_stop_is_a_400_naming_stop(url, route, stop):
    ask = r'"prompt": "hi"' if route == "/v1/completions" else r'"messages": [{"role": "user", "content": "hi"}]'
    body = f'{{"model": "{NAME}", {ask}, "max_tokens": 2, "stop": {stop}}}'.encode()
    r = httpx.post(url + route, content=body, headers={**AUTH, "Content-Type": "application/json"}, timeout=20)
    assert r.status_code == 400, r.text  # was 500 (UnicodeEncodeError)
    error = r.json()["error"]
    assert error["param"] == "stop" and error["type"] == "invalid_request_error" and error["code"] == 400
    assert "stop" in error["message"] and "surrogate" in error["message"] and "not a real character" in error["message"]
    assert set(r.json()) == {"error", "status", "request_id"}  # the one error body of the OpenAI routes


def test_every_text_field_refuses_a_surrogate_in_the_same_words(url):
    """prompt, messages and stop go through one check: the same sentence, each naming its own parameter. (The
    messages' own check was dead code: a UnicodeEncodeError is a ValueError, caught first as a template error.)"""
    bodies = {
        "prompt": r'{"prompt": "\ud800", "max_tokens": 2}',
        "messages": r'{"messages": [{"role": "user", "content": "\ud800"}], "max_tokens": 2}',
        "stop": r'{"prompt": "hi", "stop": "\ud800", "max_tokens": 2}',
    }
    messages = {}
    for param, body in bodies.items():
        route = "/v1/chat/completions" if param == "messages" else "/v1/completions"
        r = httpx.post(
            url + route, content=body.encode(), headers={**AUTH, "Content-Type": "application/json"}, timeout=20
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        messages[param] = r.json()["error"]["message"]
    assert len({m.replace(p, "<param>") for p, m in messages.items()}) == 1, messages


# ---- 2. the API key, byte for byte ----------------------------------------------------------------------------
def _key_of(*headers: tuple[bytes, bytes]) -> bytes:
    return hdr.api_key(Request({"type": "http", "headers": list(headers)}))


def test_only_sp_and_htab_are_trimmed_around_the_key():
    """The parser below the app may trim the whitespace around a field value already; this one does not."""
    assert _key_of((b"authorization", b"Bearer " + KEY.encode() + b" \t ")) == KEY.encode()
    assert _key_of((b"authorization", b"Bearer \t" + KEY.encode())) == KEY.encode()
    assert _key_of((b"x-api-key", b" " + KEY.encode() + b"\t")) == KEY.encode()
    for odd in (b"\xa0", b"\x85", b"\x0b", b"\x0c", b"\x1c", "\u00a0".encode(), "\u0085".encode()):
        assert _key_of((b"authorization", b"Bearer " + KEY.encode() + odd)) == KEY.encode() + odd, odd
        assert _key_of((b"x-api-key", odd + KEY.encode())) == odd + KEY.encode(), odd
    assert _key_of((b"authorization", "Bearer ключ".encode())) == "ключ".encode()  # the client's bytes, as sent
    assert _key_of() == b""


@pytest.mark.parametrize(
    "value, status",
    [
        (b"Bearer " + KEY.encode(), 200),
        (b"Bearer " + KEY.encode() + b" ", 200),  # optional whitespace around a field value: SP ...
        (b"Bearer " + KEY.encode() + b"\t", 200),  # ... and HTAB
        (b"Bearer " + KEY.encode() + b"\xa0", 401),  # a no-break space, as a latin-1 byte: was 200
        (b"Bearer " + KEY.encode() + b"\x85", 401),  # U+0085 (NEXT LINE), as a latin-1 byte: was 200
        (b"Bearer \xa0" + KEY.encode(), 401),  # in front: was 200
        (b"Bearer " + KEY.encode() + "\u00a0".encode(), 401),  # both in UTF-8
        (b"Bearer " + KEY.encode() + "\u0085".encode(), 401),
        (b"Bearer " + KEY.encode()[:-1], 401),  # a different length, shorter ...
        (b"Bearer " + KEY.encode() + b"x", 401),  # ... and longer
        (b"Bearer " + "s3cret-kéy".encode(), 401),  # non-ASCII: refused, never a TypeError from compare_digest
        (b"Bearer " + "s3cret-kéy".encode("latin-1"), 401),
        (b"Bearer \xff\xfe\x80", 401),
    ],
)
def test_the_key_is_compared_byte_for_byte_on_a_guarded_route(url, value, status):
    for header in (b"Authorization", b"X-Api-Key"):
        sent = value if header == b"Authorization" else value.removeprefix(b"Bearer ")
        code, body = _get(url, b"/v1/models", header + b": " + sent)
        assert code == status, (header, sent, code, body)
        if status == 401:
            assert "API key" in json.loads(body)["error"]["message"]


def _get(url: str, path: bytes, header: bytes) -> tuple[int, bytes]:
    """GET with one header line exactly as given, over a raw socket: an HTTP client refuses to send a value that
    ends in whitespace, or checks its bytes, and the point here is what the server does with them."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: test\r\n" + header + b"\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


# ---- 3. /readyz tells a caller without the key only whether it is ready -------------------------------------
def test_readyz_names_the_model_only_to_a_caller_with_the_key(url):
    with httpx.Client(timeout=20) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": b"Bearer " + KEY.encode() + b"\xa0"}):
            r = c.get(url + "/readyz", headers=headers)
            assert r.status_code == 200 and r.json() == {"ready": True}, (headers, r.text)  # was {"ready", "model"}
            assert NAME not in r.text
        r = c.get(url + "/readyz", headers=AUTH)
        assert r.status_code == 200 and r.json() == {"ready": True, "model": NAME}
        assert c.get(url + "/readyz", headers={"X-Api-Key": KEY}).json()["model"] == NAME


def test_readyz_without_a_key_configured_is_as_before():
    engine = _engine()
    with start_in_thread(create_app(generation=engine)) as h:
        r = httpx.get(h.url + "/readyz", timeout=20)
    assert r.status_code == 200 and r.json() == {"ready": True, "model": NAME}


def _broken_loader():
    raise FileNotFoundError(f"the weights of {NAME} are missing")


@pytest.mark.parametrize("api_key", [KEY, None])
def test_a_server_that_is_not_ready_says_why_only_to_a_caller_with_the_key(api_key):
    app = create_app({NAME: _broken_loader}, NAME, api_key=api_key, torch_threads=1)
    with start_in_thread(app, wait_ready=False) as h, httpx.Client(timeout=20) as c:
        deadline = time.monotonic() + 10
        while not h.state.load_error and time.monotonic() < deadline:  # the load fails in the background
            time.sleep(0.05)
        anyone, holder = c.get(h.url + "/readyz"), c.get(h.url + "/readyz", headers=AUTH)
    for r in (anyone, holder):  # the status code and Retry-After, for every caller
        assert r.status_code == 503 and r.headers["retry-after"] and r.json()["ready"] is False
    assert NAME in holder.json()["reason"] and "missing" in holder.json()["reason"]
    if api_key:
        assert NAME not in anyone.text and set(anyone.json()) <= {"ready", "reason"}
    else:
        assert anyone.json() == holder.json()  # without a key set, everyone reads why
