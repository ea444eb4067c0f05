"""Starting the server: in a background thread (notebooks, tests, benchmarks) or from `ailab serve`.

start_in_thread() binds a socket first (port 0 = a free one), so the caller knows the URL
before uvicorn starts and two notebooks never fight over port 8000.

Exposure: a bind to an address other than loopback needs an API key (--api-key or AILAB_API_KEY), or
the explicit --allow-public-without-key; `ailab serve --host 0.0.0.0` alone exits with a message.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

import uvicorn
from pydantic import ValidationError

from ailab.server.config import add_config_flags, config_from_args, misspelt_env_settings
from ailab.server.predictors import engine_choices


@dataclass
class ServerHandle:
    url: str
    server: uvicorn.Server
    thread: threading.Thread
    app: object

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful: stop accepting, let in-flight requests finish, drain the batchers (lifespan exit)."""
        self.server.should_exit = True
        self.thread.join(timeout)

    def call(self, coro_fn, timeout: float = 120.0):
        """Run `await coro_fn()` on the server's event loop (e.g. a registry swap) and return its result."""
        import asyncio

        loop = self.app.state.ailab.loop
        return asyncio.run_coroutine_threadsafe(coro_fn(), loop).result(timeout)

    @property
    def state(self):
        return self.app.state.ailab

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_in_thread(
    app,
    host: str = "127.0.0.1",
    port: int = 0,
    wait_ready: bool = True,
    timeout: float = 180.0,
    log_level: str = "warning",
    allow_public_without_key: bool = False,
) -> ServerHandle:
    """Run `app` under uvicorn in a daemon thread; return once it answers (and /readyz says 200).
    Refuses (ValueError) a non-loopback `host` for an app without an API key unless allow_public_without_key."""
    import httpx

    from ailab.server.protocol import JsonErrorsProtocol

    state = getattr(getattr(app, "state", None), "ailab", None)
    problem = exposure_problem(host, getattr(getattr(state, "config", None), "api_key", None), allow_public_without_key)
    if problem:
        raise ValueError(problem)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=10,
        backlog=2048,
        http=JsonErrorsProtocol,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"uvicorn-{port}")
    thread.start()
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    handle = ServerHandle(url, server, thread, app)
    t_end = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > t_end:
            raise RuntimeError(f"the server at {url} did not start (see the log above)")
        time.sleep(0.02)
    if wait_ready:
        with httpx.Client(timeout=5.0) as client:
            while True:
                r = client.get(url + "/readyz")
                if r.status_code == 200:
                    break
                reason = r.json().get("reason", "")
                if "Error" in reason or time.monotonic() > t_end:
                    handle.stop()
                    raise RuntimeError(f"the server at {url} did not become ready: {reason}")
                time.sleep(0.05)
    return handle


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def exposure_problem(host: str, api_key: str | None, allow_public_without_key: bool = False) -> str | None:
    """Why serving on `host` is refused (None when it is fine): a non-loopback bind needs a key or the flag."""
    if _is_loopback(host) or api_key or allow_public_without_key:
        return None
    return (
        f"refusing to bind {host!r} (not loopback) without an API key: anyone who can reach it could use it, "
        f"and swap models through /admin. Set --api-key KEY (or AILAB_API_KEY), bind 127.0.0.1, or pass "
        f"--allow-public-without-key if the network is yours (/admin then still answers loopback only)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The flags of `ailab serve`: where to bind and which engine, then one per ServerConfig field
    (their defaults and bounds live in server/config.py, and AILAB_<FIELD> variables set them too)."""
    p = argparse.ArgumentParser(
        prog="ailab serve",
        description="Serve the MiniLM sentiment classifier over HTTP, or (--generate) a byte-level GPT through OpenAI's completions API. "
        "Every setting can also come from an AILAB_<SETTING> environment variable "
        "(AILAB_MAX_BATCH_SIZE=8); a flag wins over the variable.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (0 = any free port)")
    p.add_argument(
        "--engine",
        choices=engine_choices(),
        default="torch_eager",
        help="an engine variant of ailab.variants by name (torch_eager: PyTorch, ort_plain: ONNX Runtime FP32, "
        "ort_int8_dynamic: dynamic INT8, ...), or auto (the fastest variant here that passes the accuracy gate, "
        "measured at start-up)",
    )
    p.add_argument(
        "--allow-public-without-key",
        action="store_true",
        help="allow a non-loopback --host without an API key (otherwise refused)",
    )
    p.add_argument("--fallback-label", default=None, help="answer this label, marked degraded, when no model can serve")
    p.add_argument("--quiet", action="store_true", help="no JSON access log on stderr")
    p.add_argument("--ray", action="store_true", help="serve through Ray Serve: each replica runs this whole app")
    p.add_argument("--replicas", type=int, default=1, help="with --ray: how many replicas (default 1)")
    p.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="with --ray: Ray nodes to start on this machine (a test cluster: one raylet each)",
    )
    p.add_argument(
        "--generate",
        default=None,
        metavar="SIZE",
        help="serve OpenAI's /v1/completions and /v1/chat/completions with a byte-level tiny_gpt of this "
        "size (1m, 8m or 30m): random weights, or those notebook 5.1 trained and saved "
        "(--generate-weights). Alone, it serves generation only (no encoder weights needed)",
    )
    p.add_argument(
        "--classifier",
        action="store_true",
        help="with --generate: serve the sentiment classifier (POST /v1/predict) beside it",
    )
    p.add_argument(
        "--generation-in-thread",
        action="store_true",
        help="with --generate: run the engine core in a thread of the server's process instead of a "
        "process of its own (which keeps the HTTP side's Python off the core's GIL)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        metavar="NAME",
        help="with --generate: the model name clients send and /v1/models lists (default ailab-gpt-SIZE)",
    )
    p.add_argument(
        "--generate-weights",
        default=None,
        metavar="FILE",
        help="with --generate: a .safetensors file written by ailab.generation.train.save_lm",
    )
    p.add_argument(
        "--generate-sha256",
        default=None,
        metavar="HEX",
        help="the trusted SHA-256 of --generate-weights (save_lm returns it); a file that differs is refused",
    )
    p.add_argument(
        "--generate-seats",
        type=int,
        default=None,
        metavar="N",
        help="with --generate: sequences decoded together at most (the scheduler's max_running; default 8). Beyond "
        "them a request waits for a seat, and its time to first token with it",
    )
    p.add_argument(
        "--generate-blocks",
        type=int,
        default=None,
        metavar="N",
        help="with --generate: KV blocks in the pool (16 tokens each; default 256). What vLLM sizes in bytes "
        "(--kv-cache-memory-bytes): N x 16 x the model's KV bytes per token",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action="store_true",
        help="with --generate: keep full KV blocks and share them between prompts that begin alike (a chat's "
        "system prompt is prefilled once, then looked up), as vLLM's flag of that name; /metrics counts "
        "ailab_prefix_cache_queries and _hits in tokens",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        metavar="N",
        help="with --generate: chunked prefill, at most N tokens computed a step (decodes first, then prompt "
        "chunks), so a long prompt no longer stalls the answers being decoded beside it, as vLLM's flag of that "
        "name; at least --generate-seats. Default: none (a prompt is computed in the step that admits it)",
    )
    p.add_argument(
        "--quantization",
        choices=("int8", "int4"),
        default=None,
        help="with --generate: the decoder's linear weights stored in fewer bits (weight-only: int8 per output "
        "channel, int4 in groups of 32 inputs; ailab.quantize.weight_only), as vLLM's flag of that name. A decode "
        "step reads 4x (int8) or 5.3x (int4) fewer weight bytes; activations and the KV cache stay fp32",
    )
    add_config_flags(p)
    p.add_argument(
        "--timeout-s", dest="request_timeout_s", type=float, default=None, help="the same as --request-timeout-s"
    )
    return p


def serve_main(argv: list[str] | None = None) -> int:
    from ailab.server.app import create_app, default_models
    from ailab.server.metrics import configure_json_logging

    args = build_parser().parse_args(argv)
    for warning in misspelt_env_settings():
        print(f"warning: {warning}", file=sys.stderr)
    try:
        extra = {"fallback": {"label": args.fallback_label, "score": None}} if args.fallback_label else {}
        config = config_from_args(args, **extra)
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        print(f"ailab serve: bad setting ({bad}). Check the flag or its AILAB_* environment variable.", file=sys.stderr)
        return 2
    problem = exposure_problem(args.host, config.api_key, args.allow_public_without_key)
    if problem:
        print(f"ailab serve: {problem}", file=sys.stderr)
        return 2
    if not _is_loopback(args.host) and not config.api_key:
        print(
            f"warning: binding {args.host} (not loopback) without --api-key: anyone who can reach it can use it",
            file=sys.stderr,
        )
    if not args.quiet:
        configure_json_logging(sys.stderr)
    from ailab.models import WeightsIntegrityError

    try:
        generation = generation_engine(args, config.torch_threads)
    except (ValueError, OSError, RuntimeError, WeightsIntegrityError) as e:
        print(f"ailab serve: {e}", file=sys.stderr)
        return 2
    models, default = (
        default_models(args.engine, config.too_long) if generation is None or args.classifier else ({}, None)
    )
    if args.ray:
        if generation is not None:
            generation.close()
            print("ailab serve: --generate is not served through --ray (yet); drop one of the two", file=sys.stderr)
            return 2
        return _serve_with_ray(args, models, default, config)
    app = create_app(models, default, config, generation=generation)
    print(f"loading the model{'s' if models and generation else ''} ...", file=sys.stderr, flush=True)
    handle = start_in_thread(
        app, args.host, args.port, log_level="warning", allow_public_without_key=args.allow_public_without_key
    )
    routes = (["POST /v1/predict"] if models else []) + (
        [f"POST /v1/completions /v1/chat/completions (model {generation.name!r})"] if generation else []
    )
    print(
        f"ailab server ready at {handle.url}  ({', '.join(routes)}; GET /v1/models /healthz /readyz /metrics)",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: handle.server.__setattr__("should_exit", True))
    try:
        while handle.thread.is_alive():
            handle.thread.join(0.5)
    except KeyboardInterrupt:
        print("shutting down: draining in-flight requests ...", file=sys.stderr)
        handle.stop()
    return 0


def generation_engine(args, threads: int | None = None):
    """The AsyncLLM that --generate asks for, or None. A bad flag raises ValueError; a weights file that
    is missing or differs from its trusted hash, WeightsIntegrityError."""
    if args.generate is None:
        if (
            args.generate_weights
            or args.generate_sha256
            or args.classifier
            or args.served_model_name
            or args.generation_in_thread
            or args.generate_seats is not None
            or args.generate_blocks is not None
            or args.enable_prefix_caching
            or args.max_num_batched_tokens is not None
            or args.quantization
        ):
            raise ValueError(
                "--generate-weights, --generate-sha256, --classifier, --served-model-name, --generate-seats, "
                "--generate-blocks, --generation-in-thread, --enable-prefix-caching, --max-num-batched-tokens and "
                "--quantization need --generate SIZE (the model's size)"
            )
        return None
    from functools import partial

    from ailab.server.async_llm import AsyncLLM
    from ailab.server.generation_policy import engine_defaults, generation_model

    chosen = engine_defaults(args.generate)  # raises ValueError naming the sizes for an unknown one
    seats = chosen.seats if args.generate_seats is None else args.generate_seats
    if not 1 <= seats <= 256:
        raise ValueError(f"--generate-seats must be between 1 and 256 sequences, got {seats}")
    if args.generate_blocks is not None and not 1 <= args.generate_blocks <= 65_536:
        raise ValueError(f"--generate-blocks must be between 1 and 65536 blocks, got {args.generate_blocks}")

    if args.generate_weights and not args.generate_sha256:
        raise ValueError(
            "--generate-weights needs --generate-sha256 (the hash save_lm returned): an unverified file is never loaded"
        )
    if args.generate_weights:
        from ailab.models import verify_file

        verify_file(args.generate_weights, args.generate_sha256)  # refused here, with its words, before any process
    factory = partial(
        generation_model, args.generate, args.generate_weights, args.generate_sha256, quantization=args.quantization
    )
    name = args.served_model_name or f"ailab-gpt-{args.generate}"
    told = {"seats": args.generate_seats is not None, "core_threads": bool(threads)}
    threads = threads or chosen.core_threads
    budget = args.max_num_batched_tokens
    if budget is not None and budget < seats:
        raise ValueError(
            f"--max-num-batched-tokens must be at least --generate-seats ({seats}): every seat decodes a token a "
            f"step; got {budget}"
        )
    kw = {"max_running": seats, "name": name, "threads": threads, "enable_prefix_caching": args.enable_prefix_caching}
    kw["max_num_batched_tokens"] = budget
    if args.generate_blocks is not None:
        kw["num_blocks"] = args.generate_blocks
    # What the engine runs with and where each setting came from: printed now, and in /healthz's private half.
    settings = {
        "seats": seats,
        "core_threads": threads,
        "quantization": args.quantization or "none (fp32 weights)",
        "chosen_by": {k: "flag" if v else "default" for k, v in told.items()},
        "why": chosen.why,
    }
    print(
        f"generation engine for {args.generate} ({chosen.params / 1e6:.1f} M parameters): {seats} seats "
        f"({settings['chosen_by']['seats']}), {threads} core thread(s) ({settings['chosen_by']['core_threads']}), "
        f"weights {settings['quantization']}; "
        f"the defaults because {chosen.why}",
        file=sys.stderr,
        flush=True,
    )
    kw["settings"] = settings
    return AsyncLLM(factory(), **kw) if args.generation_in_thread else AsyncLLM(factory, process=True, **kw)


def _serve_with_ray(args, models, default, config) -> int:
    """`ailab serve --ray`: Ray Serve's proxy on --host:--port, --replicas copies of this app behind it."""
    from ailab.server.ray_serve import RayCluster, deployment

    if args.replicas < 1 or args.nodes < 1:
        print("ailab serve: --replicas and --nodes must be at least 1", file=sys.stderr)
        return 2
    if not _is_loopback(args.host):
        print(
            "ailab serve: --ray binds 127.0.0.1 only in this course (Ray's own ports stay on loopback too)",
            file=sys.stderr,
        )
        return 2
    print(
        f"starting Ray ({args.nodes} node(s)) and {args.replicas} replica(s) (engine={args.engine}) ...",
        file=sys.stderr,
        flush=True,
    )
    cluster = RayCluster(
        deployment(models, default, config, replicas=args.replicas).bind(), nodes=args.nodes, port=args.port or None
    )
    print(
        f"ailab server on Ray Serve ready at {cluster.url}  ({cluster.running_replicas()} replicas; "
        f"POST {cluster.url}/v1/predict)",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    print("shutting down Ray Serve ...", file=sys.stderr)
    cluster.stop()
    return 0
