"""Failure paths stay bounded (issue 11, section 2): malformed headers, slow and runaway clients, exposure,
and the memory budget during a hot swap. Every fault is injected for real: raw bytes on a socket to a
server on 127.0.0.1, a body that stalls, more connections than the limit, a swap that does not fit."""

import asyncio
import json
import select
import socket
import time

import httpx
import pytest

from ailab.server import SwapRefusedError, create_app, serve_main, start_in_thread
from ailab.server.protocol import diagnose
from ailab.server.config import config_from_args
from ailab.server.run import build_parser, exposure_problem
from test_server_helpers import SlowPredictor, tiny

BODY = b'{"inputs": "a fine film"}'
JSON_CT = b"Content-Type: application/json"
ODD = [
    "",
    " ",
    "abc",
    "1e3",
    "0x10",
    "+5",
    "-1",
    "1_000",
    "１２",
    "nan",
    "inf",
    "9" * 400,
    "5\x01",
    "5\x00",
    "--5",
    "²",
    "5, 6",
]


def _addr(url: str) -> tuple[str, int]:
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def read_response(sock: socket.socket, timeout: float = 20.0) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 response off `sock`: (status, lower-cased headers, body); status 0 if nothing came."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return 0, {}, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def raw(url: str, header_lines: list[bytes], body: bytes = BODY, content_length: bool = True):
    """POST /v1/predict with exactly these header lines (bytes, sent as they are)."""
    lines = [b"POST /v1/predict HTTP/1.1", b"Host: 127.0.0.1", *header_lines]
    if content_length:
        lines.append(b"Content-Length: %d" % len(body))
    with socket.create_connection(_addr(url), timeout=20) as s:
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        return read_response(s)


@pytest.fixture(scope="module")
def server():
    app = create_app({"t": lambda: tiny(0)}, torch_threads=1)
    with start_in_thread(app) as h:
        yield h


@pytest.fixture(scope="module")
def keyed():
    app = create_app({"t": lambda: tiny(0)}, torch_threads=1, api_key="s3cret")
    with start_in_thread(app) as h:
        yield h


def assert_refused(status, headers, body, header, allowed=(400, 413, 415, 422)):
    assert status in allowed, (header, status, body[:200])
    assert headers["content-type"].startswith("application/json"), (header, headers)
    message = json.loads(body)["error"]
    assert header.lower() in message.lower(), f"the message must name {header}: {message!r}"


# ---------------------------------------------------------------- 1. headers


@pytest.mark.parametrize("value", ODD)
@pytest.mark.parametrize("header", ["X-Timeout-Ms", "X-Priority", "X-Request-Id", "Content-Type"])
def test_odd_header_values_are_4xx_naming_the_header(server, header, value):
    lines = [f"{header}: {value}".encode()]
    if header != "Content-Type":
        lines.append(JSON_CT)
    if header == "X-Request-Id" and value in ("abc", "1e3", "0x10", "-1", "1_000", "--5", "nan", "inf"):
        status, _, body = raw(server.url, lines)  # these are valid ids: A-Z a-z 0-9 . _ -
        assert status == 200 and json.loads(body)["request_id"] == value
        return
    if header == "X-Priority" and value == "-1":
        assert raw(server.url, lines)[0] == 200  # a valid priority
        return
    assert_refused(*raw(server.url, lines), header)


@pytest.mark.parametrize("value", ODD + ["99999999999999999999999", "9" * 5000, "16, 16"])
def test_odd_content_length_is_a_json_400_naming_it(server, value):
    status, headers, body = raw(server.url, [JSON_CT, f"Content-Length: {value}".encode()], content_length=False)
    assert_refused(status, headers, body, "Content-Length")
    assert headers.get("connection", "").lower() == "close"


@pytest.mark.parametrize(
    "header, first, second",
    [
        ("X-Timeout-Ms", "100", "200"),
        ("X-Priority", "1", "2"),
        ("X-Request-Id", "a", "b"),
        ("Content-Type", "application/json", "application/json"),
        ("Content-Length", "25", "25"),
        ("Content-Length", "25", "26"),
    ],
)
def test_duplicated_headers_are_refused(server, header, first, second):
    lines = [f"{header}: {first}".encode(), f"{header}: {second}".encode()]
    lines += [JSON_CT] if header != "Content-Type" else []
    assert_refused(*raw(server.url, lines, content_length=header != "Content-Length"), header)


@pytest.mark.parametrize(
    "header, value",
    [
        ("X-Timeout-Ms", "250"),
        ("X-Timeout-Ms", "2500.5"),
        ("X-Timeout-Ms", "999999999"),
        ("X-Priority", "9999"),
        ("X-Priority", "-9999"),
        ("X-Priority", "007"),
        ("X-Request-Id", "req_1.2-3"),
        ("Content-Type", "application/json; charset=utf-8"),
        ("Content-Type", "Application/JSON;charset=UTF8"),
    ],
)
def test_valid_header_values_are_served(server, header, value):
    lines = [f"{header}: {value}".encode()] + ([JSON_CT] if header != "Content-Type" else [])
    status, _, body = raw(server.url, lines)
    assert status == 200, body


def test_out_of_range_and_wrong_charset_are_refused(server):
    assert_refused(*raw(server.url, [JSON_CT, b"X-Priority: 10000"]), "X-Priority")
    assert_refused(*raw(server.url, [JSON_CT, b"X-Timeout-Ms: 1234567890"]), "X-Timeout-Ms")
    assert_refused(*raw(server.url, [JSON_CT, b"X-Request-Id: " + b"a" * 65]), "X-Request-Id")
    assert_refused(*raw(server.url, [b"Content-Type: application/json; charset=utf-16"]), "Content-Type")
    assert_refused(*raw(server.url, [JSON_CT, b"Content-Length: 70000"], content_length=False), "Content-Length")


@pytest.mark.parametrize("value", ODD + ["Bearer", "Bearer ", "Bearer wrong", "Basic czNjcmV0", "bearer  s3cret x"])
def test_odd_authorization_is_401_or_400_never_500(keyed, value):
    for header in ("Authorization", "X-Api-Key"):
        status, headers, body = raw(keyed.url, [JSON_CT, f"{header}: {value}".encode()])
        if status == 401:
            assert headers["www-authenticate"] == "Bearer" and "API key" in json.loads(body)["error"]
        else:  # a control character: the HTTP parser's 400
            assert "\x00" in value or "\x01" in value, (header, value, status, body)
            assert_refused(status, headers, body, header, allowed=(400,))


def test_duplicated_authorization_is_400(keyed):
    lines = [JSON_CT, b"Authorization: Bearer s3cret", b"Authorization: Bearer other"]
    assert_refused(*raw(keyed.url, lines), "Authorization")


def test_server_still_serves_after_the_header_abuse(server):
    with httpx.Client(timeout=20) as c:
        assert c.get(server.url + "/healthz").status_code == 200
        assert c.post(server.url + "/v1/predict", json={"inputs": "still fine"}).status_code == 200
        assert 'status="500"}' not in c.get(server.url + "/metrics").text


def test_diagnose_names_the_header_for_the_protocol_400():
    assert "Content-Length" in diagnose(b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n")
    assert "X-Foo" in diagnose(b"GET / HTTP/1.1\r\nHost: a\r\nX-Foo: a\x01b\r\n\r\n")
    assert "Name: value" in diagnose(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n")
    assert "request line" in diagnose(b"\x16\x03\x01 binary junk")
    assert diagnose(b"")  # never raises, always says something


# ---------------------------------------------------------------- 2. slow and runaway clients


def stalled(url: str, sent: bytes = b'{"inputs": ', length: int = 100) -> socket.socket:
    """A connection that sent its headers and the start of a body, then stopped."""
    s = socket.create_connection(_addr(url), timeout=20)
    s.sendall(
        b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length + sent
    )
    return s


def closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return False


@pytest.fixture(scope="module")
def impatient():
    app = create_app({"t": lambda: tiny(0)}, torch_threads=1, body_timeout_s=0.5)
    with start_in_thread(app) as h:
        yield h


def test_stalled_body_gets_408_and_the_connection_is_closed(impatient):
    s = stalled(impatient.url)
    try:
        with httpx.Client(timeout=20) as c:  # the stalled client holds no worker: others are served meanwhile
            assert c.post(impatient.url + "/v1/predict", json={"inputs": "meanwhile"}).status_code == 200
        status, headers, body = read_response(s)
        assert status == 408 and headers["connection"].lower() == "close"
        assert "body" in json.loads(body)["error"]
        assert closed_by_server(s)
    finally:
        s.close()
    assert impatient.state.in_flight == 0


def test_trickled_body_gets_408_before_it_is_done(impatient):
    """One byte every 0.1 s: a per-chunk timeout would never fire; the whole-body one does (0.5 s of ~10 s)."""
    body = json.dumps({"inputs": "x" * 90}).encode()
    s = stalled(impatient.url, b"", len(body))
    try:
        answered = None
        for i, byte in enumerate(body):
            if select.select([s], [], [], 0.1)[0]:
                answered = i
                break
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                answered = i
                break
        assert answered is not None and answered < len(body), "the server waited for the whole trickle"
        status, headers, _ = read_response(s)
        assert status == 408 and headers["connection"].lower() == "close"
    finally:
        s.close()


def test_concurrency_limit_answers_503_beyond_it_and_recovers():
    limit = 4
    app = create_app({"t": lambda: tiny(0)}, torch_threads=1, max_concurrency=limit, body_timeout_s=3.0)
    with start_in_thread(app) as h:
        holders = [stalled(h.url) for _ in range(limit)]
        try:
            t_end = time.monotonic() + 20
            while h.state.in_flight < limit:  # every holder is inside the app, waiting for its body
                assert time.monotonic() < t_end, f"only {h.state.in_flight} of {limit} holders got in"
                time.sleep(0.02)
            extra = [socket.create_connection(_addr(h.url), timeout=20) for _ in range(12)]
            for s in extra:  # many more connections at once, each a complete request
                s.sendall(
                    b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
                )
            answers = [read_response(s) for s in extra]
            for s in extra:
                s.close()
            assert [a[0] for a in answers] == [503] * 12
            assert all(a[1]["retry-after"] and "in flight" in json.loads(a[2])["error"] for a in answers)
            with httpx.Client(timeout=20) as c:
                assert c.get(h.url + "/healthz").status_code == 200  # probes and metrics are never refused
                assert c.get(h.url + "/readyz").status_code == 200
                assert 'ailab_requests_total{route="/v1/predict",status="503"} 12.0' in c.get(h.url + "/metrics").text
        finally:
            for s in holders:
                s.close()
        with httpx.Client(timeout=20) as c:  # the slots come back once the holders are gone
            t_end = time.monotonic() + 20
            while (r := c.post(h.url + "/v1/predict", json={"inputs": "hi"})).status_code != 200:
                assert r.status_code == 503 and time.monotonic() < t_end
                time.sleep(0.05)
            assert 'status="500"}' not in c.get(h.url + "/metrics").text


def test_limits_are_on_the_command_line_and_in_the_config():
    args = build_parser().parse_args(["--body-timeout-s", "2.5", "--max-concurrency", "64"])
    assert args.body_timeout_s == 2.5 and args.max_concurrency == 64
    defaults = config_from_args(build_parser().parse_args([]))
    assert defaults.body_timeout_s == 10.0 and defaults.max_concurrency == 512
    from ailab.server import ServerConfig

    assert ServerConfig().body_timeout_s == 10.0 and ServerConfig().max_concurrency == 512
    with pytest.raises(ValueError, match="max_concurrency"):
        ServerConfig(max_concurrency=0)
    with pytest.raises(ValueError, match="body_timeout_s"):
        ServerConfig(body_timeout_s=0)


# ---------------------------------------------------------------- 3. exposure


def test_public_bind_without_key_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("AILAB_API_KEY", raising=False)
    assert serve_main(["--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "0.0.0.0" in err and "--api-key" in err and "--allow-public-without-key" in err
    with pytest.raises(ValueError, match="not loopback"):
        start_in_thread(create_app({"t": lambda: tiny(0)}), host="0.0.0.0")


def test_public_bind_allowed_with_a_key_or_the_flag(monkeypatch):
    monkeypatch.delenv("AILAB_API_KEY", raising=False)
    args = build_parser().parse_args(["--host", "0.0.0.0", "--allow-public-without-key"])
    assert exposure_problem(args.host, args.api_key, args.allow_public_without_key) is None
    assert exposure_problem("0.0.0.0", "k") is None and exposure_problem("::", None) is not None
    assert exposure_problem("127.0.0.1", None) is None and exposure_problem("::1", None) is None
    assert exposure_problem("localhost", None) is None
    monkeypatch.setenv("AILAB_API_KEY", "from-env")
    args = build_parser().parse_args(["--host", "0.0.0.0"])
    key = config_from_args(args).api_key
    assert key == "from-env" and exposure_problem(args.host, key) is None


def test_key_required_on_every_route_but_the_probes(keyed):
    with httpx.Client(timeout=20) as c:
        for method, path in [
            ("POST", "/v1/predict"),
            ("GET", "/v1/models"),
            ("GET", "/metrics"),
            ("POST", "/admin/models/t/swap"),
        ]:
            for auth in ({}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "wrong"}):
                r = c.request(method, keyed.url + path, json={"inputs": "hi"}, headers=auth)
                assert r.status_code == 401 and r.json()["error"], (path, auth, r.text)
        for path in ("/healthz", "/readyz"):
            assert c.get(keyed.url + path).status_code == 200
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post(keyed.url + "/v1/predict", json={"inputs": "hi"}, headers=ok).status_code == 200
        assert (
            c.post(keyed.url + "/v1/predict", json={"inputs": "hi"}, headers={"X-Api-Key": "s3cret"}).status_code == 200
        )
        assert c.get(keyed.url + "/v1/models", headers=ok).status_code == 200


def test_admin_without_a_key_answers_loopback_only():
    app = create_app({"t": lambda: tiny(0)})

    async def ask(client):
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as c:
            return await c.post("/admin/models/t/swap")

    r = asyncio.run(ask(("203.0.113.7", 40000)))
    assert r.status_code == 403 and "loopback" in r.json()["error"]


# ---------------------------------------------------------------- 4. the memory budget during a hot swap


class Counting:
    def __init__(self, make):
        self.make, self.calls = make, 0

    def __call__(self):
        self.calls += 1
        return self.make()


def test_swap_that_cannot_fit_beside_the_old_version_is_refused_and_old_keeps_serving():
    n = tiny(0).n_bytes
    loader = Counting(lambda: tiny(0))
    app = create_app({"a": loader}, torch_threads=1, max_model_bytes=int(n * 1.5))
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        r = c.post(h.url + "/admin/models/a/swap")
        assert (
            r.status_code == 409 and "budget" in r.json()["error"] and "old version keeps serving" in r.json()["error"]
        )
        assert loader.calls == 1, "the refused swap must not have loaded a second copy"
        r = c.post(h.url + "/v1/predict", json={"inputs": "hi"})
        assert r.status_code == 200 and r.json()["model_sha256"] == tiny(0).sha256
        assert [m["version"] for m in c.get(h.url + "/v1/models").json()["loaded"]] == [1]


def test_swap_evicts_other_models_to_fit_both_versions():
    n = tiny(0).n_bytes
    app = create_app(
        {"a": lambda: tiny(0), "b": lambda: tiny(1)}, torch_threads=1, max_models=10, max_model_bytes=int(n * 2.5)
    )
    with start_in_thread(app) as h, httpx.Client(timeout=30) as c:
        assert c.post(h.url + "/v1/predict", json={"inputs": "x", "model": "b"}).status_code == 200
        r = c.post(h.url + "/admin/models/a/swap")
        assert r.status_code == 200 and r.json()["version"] == 2
        models = c.get(h.url + "/v1/models").json()
        assert [m["name"] for m in models["loaded"]] == ["a"] and models["evictions"] == 1


def test_swap_to_a_bigger_version_than_fits_is_refused_after_loading():
    n = tiny(0).n_bytes

    def bigger():
        p = SlowPredictor(tiny(1), batch_s=0.0)
        p.n_bytes = 2 * n
        return p

    app = create_app({"a": lambda: tiny(0)}, torch_threads=1, max_model_bytes=int(n * 2.5))
    with start_in_thread(app) as h:
        with pytest.raises(SwapRefusedError, match="budget"):
            h.call(lambda: h.state.registry.swap("a", bigger))
        entry = h.state.registry.loaded["a"]
        assert entry.sha256 == tiny(0).sha256 and h.state.registry.loaders["a"] is not bigger
        with httpx.Client(timeout=30) as c:
            assert c.post(h.url + "/v1/predict", json={"inputs": "hi"}).json()["model_sha256"] == tiny(0).sha256
