"""Where a request's time goes in the server (topic S4): what notebook 3/07 measures.

    server_stages(url, clients, seconds)   one closed-loop run (ailab.bench, in a child process) and the server's
                                           own /metrics read before and after it: queue wait, tokenize, forward,
                                           post-process, the handler's whole time and the client's, per request
                                           and per batch, and how much of the time the model was busy
    handler_costs()                        microseconds of the handler's own Python per request: parse and
                                           validate the body, serialise the answer, write the access-log line
    profile_threads(pid, seconds)          a py-spy sampling profile of a running server, by thread and by frame

Every figure comes from the running server or from the handler's own functions; nothing here is a model of
the server. The server's histograms give sums and counts, so the stages are means, not percentiles.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def _sum_count(metrics: dict, name: str, stage: str = "") -> tuple[float, float]:
    """(sum, count) of histogram `name` as read by monitoring.read_metrics, over every model (one stage)."""

    def total(suffix: str) -> float:
        return sum(
            v
            for k, v in metrics.items()
            if k.partition("{")[0] == name + suffix and (not stage or f'stage="{stage}"' in k)
        )

    return total("_sum"), total("_count")


def server_stages(base_url: str, clients: int, seconds: float = 4.0, text: str = "a wonderful, moving film") -> dict:
    """One closed loop of `clients` against POST /v1/predict, and what the server measured meanwhile.

    Per request (ms): queue_wait (submit to its batch starting), the batch's tokenize, forward and
    postprocess, handler (the handler's whole time, from reading the headers to the answer built) and
    client (the client's mean, send to last byte); outside_handler = client - handler is HTTP, the event
    loop and the socket. Per batch: batch_size, compute_ms, cycle_ms (from one batch to the next, from the
    client's rate: batch_size / rps) and model_busy (the share of the time the model computed)."""
    import httpx

    from ailab import bench
    from ailab.monitoring import read_metrics

    def scrape() -> dict:
        return read_metrics(httpx.get(base_url + "/metrics", timeout=10).text)

    # Warm up here, then count every request of the run on both sides (warmup_s=0): the server's histograms
    # and the client's records then hold the same requests, and each request's handler time lies inside its
    # client time. With the warm-up inside the run, the server also counted requests the client did not, and
    # beside a busy neighbour its mean handler time came out above the client's mean (9.18 against 8.88 ms).
    with httpx.Client(timeout=30) as c:
        for _ in range(max(8, 2 * clients)):
            c.post(base_url + "/v1/predict", json={"inputs": text})
    before = scrape()
    run = bench.in_subprocess(
        "closed_loop",
        base_url + "/v1/predict",
        [{"inputs": text}],
        clients=clients,
        duration_s=seconds,
        warmup_s=0.0,
        timeout_s=30.0,
    )
    after = scrape()

    def mean(metric: str, stage: str = "", scale: float = 1e3) -> tuple[float, float]:
        (s0, c0), (s1, c1) = _sum_count(before, metric, stage), _sum_count(after, metric, stage)
        n = c1 - c0
        return ((s1 - s0) / n * scale if n else float("nan")), n

    batches_compute, _ = mean("ailab_batch_compute_seconds")
    batch_size, _ = mean("ailab_batch_size", scale=1.0)
    handler, n_requests = mean("ailab_request_latency_seconds")
    out = {
        "clients": clients,
        "rps": round(run.rps, 1),
        "client_p50_ms": run.stats.p50_ms,
        "client_p99_ms": run.stats.p99_ms,
        "client_ms": round(run.stats.mean_ms, 2),
        "handler_ms": round(handler, 2),
        "queue_wait_ms": round(mean("ailab_queue_wait_seconds")[0], 2),
        "batch_size": round(batch_size, 2),
        "compute_ms": round(batches_compute, 2),
        "requests": int(n_requests),
        "errors": run.n - run.n_ok,
    }
    for stage in ("tokenize", "forward", "postprocess"):
        out[f"{stage}_ms"] = round(mean("ailab_batch_stage_seconds", stage)[0], 2)
    out["outside_handler_ms"] = round(out["client_ms"] - out["handler_ms"], 2)
    # The pace comes from the client's rate and the server's mean batch, both steady over a run.
    batches_per_s = run.rps / batch_size
    out["cycle_ms"] = round(1e3 / batches_per_s, 2)
    out["model_busy"] = round(batches_per_s * batches_compute / 1e3, 3)
    return out


def _per_call_us(fn, n: int) -> float:
    fn()  # warm
    best = float("inf")
    for _ in range(5):  # the best of 5 runs of n calls: the cost, without the machine's noise
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def handler_costs(n: int = 2000, text: str = "a wonderful, moving film") -> dict:
    """Microseconds per request of the handler's own Python, each step called as the handler calls it."""
    from ailab.server.config import ServerConfig
    from ailab.server.metrics import ACCESS_LOG, JsonLineFormatter, log_request, text_fields
    from ailab.server.routes import _json
    from ailab.server.validation import parse_predict

    config = ServerConfig()
    body = json.dumps({"inputs": text}).encode()
    answer = {
        "outputs": [{"label": "positive", "score": 0.9987}],
        "model": "sentiment",
        "model_sha256": "0" * 64,
        "request_id": "0123456789abcdef0123456789abcdef",
    }
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonLineFormatter())
    saved = (ACCESS_LOG.level, ACCESS_LOG.propagate, list(ACCESS_LOG.handlers))
    ACCESS_LOG.handlers[:] = [handler]
    ACCESS_LOG.setLevel(logging.INFO)
    ACCESS_LOG.propagate = False
    try:
        return {
            "parse_and_validate_us": _per_call_us(lambda: parse_predict(body, config.max_items, config.max_chars), n),
            "serialise_us": _per_call_us(lambda: _json(answer).body, n),
            "access_log_us": _per_call_us(
                lambda: log_request(
                    "r1", 200, 0.02, "/v1/predict", "POST", {**text_fields([text]), "model": "sentiment"}
                ),
                n,
            ),
        }
    finally:
        ACCESS_LOG.setLevel(saved[0])
        ACCESS_LOG.propagate = saved[1]
        ACCESS_LOG.handlers[:] = saved[2]


def thread_role(name: str) -> str:
    """A server thread by what it does: its name says (the registry names each model's thread batcher-...)."""
    if name.startswith("batcher-"):
        return "model thread"
    if name == "MainThread" or name.startswith("uvicorn"):
        return "HTTP event loop"
    return "other"


def profile_threads(pid: int, seconds: float = 5.0, rate: int = 50) -> dict:
    """py-spy samples of process `pid` for `seconds`: {'samples', 'by_role': {role: share of samples},
    'top_frames': {role: [(function (file:line), share of that role's samples), ...]}}.

    py-spy reads the process's memory from outside (ptrace), so it needs the right to: as root, or as the user
    who started the server when kernel.yama.ptrace_scope is 0 (Debian's default; Ubuntu sets 1, which allows it
    only for a process's ancestors). A refusal raises PermissionError with that advice."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise FileNotFoundError("py-spy is not installed: pip install py-spy (it is in ailab's dev extra)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.txt"
        proc = subprocess.run(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--output",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        if proc.returncode != 0 or not out.exists():
            message = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            if "ermission" in message[0] or "ptrace" in message[0].lower():
                raise PermissionError(
                    f"py-spy may not read process {pid}: {message[0]}. Run as root, or allow it "
                    "with `sudo sysctl kernel.yama.ptrace_scope=0`"
                )
            raise RuntimeError(f"py-spy failed: {message[0]}")
        lines = out.read_text().splitlines()
    by_role, frames = Counter(), {}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or ": " not in stack:
            continue
        thread, _, rest = stack.partition(": ")
        parts = rest.split(";")
        role = thread_role(parts[0])
        by_role[role] += int(count)
        frames.setdefault(role, Counter())[parts[-1]] += int(count)
    total = sum(by_role.values())
    if not total:
        raise RuntimeError(f"py-spy recorded no sample of process {pid} in {seconds} s")
    return {
        "samples": total,
        "by_role": {r: n / total for r, n in by_role.most_common()},
        "top_frames": {r: [(f, n / by_role[r]) for f, n in c.most_common(5)] for r, c in frames.items()},
    }
