"""`ailab bench peers --json`: ailab's server against the fastest peers, on this machine, by two load generators.

  peers       ailab (as `ailab serve` runs it), mosec 0.9.8, LitServe 0.2.19 and Ray Serve, each in its own
              process(es) on 127.0.0.1, each serving the same predictor with the same batch settings (max batch
              32, 10 ms to fill); the peers come from the optional extra `ailab[peers]`
  load        closed loops at 1, 8 and 32 clients, one text per request, from ailab.bench (in a child process)
              and from `hey` (Go, Debian's package); rounds interleaved: every peer and both generators in turn,
              so load from elsewhere hits all of them alike
  figures     req/s, p50 and p99 per peer, generator and concurrency (medians over rounds), the resident memory
              of each peer's whole process tree (MiB), and ailab / mosec at 32 clients
  model side  each peer's model traced from inside (not Ray's): the share of the run it was busy, its mean
              batch and the median idle gap between batches; what the servers around the same model differ by

--quick runs the tiny random model, 8 clients, one short round and no Ray: it checks that every peer starts and
answers (what `make test` runs), not who is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ailab.services import HeldServer, ServiceError, free_port, hold_started

PEERS = ("ailab", "mosec", "litserve", "ray")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench peers")
    p.add_argument("--peers", default=",".join(PEERS), help=f"which, comma-separated (default {','.join(PEERS)})")
    p.add_argument("--clients", default="1,8,32", help="concurrency levels (default 1,8,32)")
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--model", choices=("minilm", "tiny"), default="minilm", help="what every peer serves")
    p.add_argument(
        "--text-chars",
        type=int,
        default=71,
        help="the one text every request sends: a review snippet cut to at most this many characters "
        "(default 71, a short review; longer ones make the forward pass the whole story)",
    )
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench --json peers` prints JSON")
    return p.parse_args(argv or [])


@dataclass
class PeerServer(HeldServer):
    """One of _peer_servers' peers in its own process session, held as every server we start is. `url` is where it
    takes predictions; its folder holds its log and its model's batch trace (_peer_model.TracedPredictor).
    stop() ends the session: the peer and every worker process it started."""

    name: str = field(kw_only=True)
    path: str = field(kw_only=True)  # where it takes predictions

    stop_timeout_s: ClassVar[float] = 10.0
    whole_session: ClassVar[bool] = True

    @property
    def url(self) -> str:
        return super().url + self.path

    @property
    def log(self) -> Path:
        return self.folder / "peer.log"

    @property
    def trace(self) -> Path:
        return self.folder / "peer.batches"


def start_peer(kind: str, env: dict) -> PeerServer:
    """One of _peer_servers' peers in its own process (not yet ready: see wait_until_answering)."""
    from ailab.suites._peer_servers import PATHS

    peer = PeerServer(free_port(), Path(tempfile.mkdtemp(prefix=f"ailab-peer-{kind}-")), name=kind, path=PATHS[kind])
    peer.trace.touch()
    with open(peer.log, "wb") as fh:
        peer.proc = subprocess.Popen(
            [sys.executable, "-m", "ailab.suites._peer_servers", kind, str(peer.port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, "AILAB_PEER_TRACE": str(peer.trace)},
            start_new_session=True,
        )
    return peer


def wait_until_answering(peer: PeerServer, timeout_s: float = 240.0) -> PeerServer:
    """Until the peer answers a prediction with 200 (its model loaded), then held until exit; stops it and says
    why otherwise."""
    import httpx

    def answers() -> bool:
        r = httpx.post(peer.url, json={"inputs": "warm-up"}, timeout=5)
        if r.status_code != 200:
            raise ServiceError(f"HTTP {r.status_code}: {r.text[:200]}")  # named as the last error on a timeout
        return True

    return hold_started(peer, answers, timeout_s, peer.name, peer.log)


def start_ray(batch: int, wait_ms: float):
    """Ray Serve as a peer (suites.scale.RayServe): Ray starts and holds its own processes; it has a url, stop()
    and rss_mib() (every Ray process on the machine) as every other peer has."""
    from ailab.suites.scale import RayServe

    return RayServe(max_batch_size=batch, batch_wait_s=wait_ms / 1000)


def run_hey(url: str, body: dict, clients: int, seconds: float) -> dict:
    """`hey` closed loop: req/s, p50/p99 (ms) and the count of answers that were not 200."""
    out = subprocess.run(
        [
            "hey",
            "-z",
            f"{seconds}s",
            "-c",
            str(clients),
            "-m",
            "POST",
            "-T",
            "application/json",
            "-d",
            json.dumps(body),
            url,
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    try:
        return parse_hey(out.stdout)
    except ValueError as e:
        raise RuntimeError(f"{e}; hey's stderr: {out.stderr[-500:]}") from None


def parse_hey(text: str) -> dict:
    """hey's summary: Requests/sec, the 50 % and 99 % latencies, the status codes and the error lines.
    hey prints its 99 % line only from 100 answers up (below, a "0% in 0.0000 secs" line stands in its place):
    p99_ms is then None, not a figure from too few samples."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if rps is None:
        raise ValueError(f"hey printed no throughput: {text[-500:]!r}")
    pct = {int(p): float(s) * 1e3 for p, s in re.findall(r"(\d+)% in ([\d.]+) secs", text)}
    codes = {int(c): int(n) for c, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", text)}
    failed = (
        sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s+\S", text.split("Error distribution:")[1], re.M))
        if "Error distribution:" in text
        else 0
    )
    return {
        "rps": float(rps.group(1)),
        "p50_ms": pct.get(50),
        "p99_ms": pct.get(99),
        "errors": sum(n for c, n in codes.items() if c != 200) + failed,
        "n": sum(codes.values()) + failed,
    }


def run_ailab_generator(url: str, body: dict, clients: int, seconds: float) -> dict:
    from ailab import bench

    r = bench.in_subprocess(
        "closed_loop", url, [body], clients=clients, duration_s=seconds, warmup_s=1.0, timeout_s=30.0
    )
    return {
        "rps": r.rps,
        "p50_ms": r.stats.p50_ms,
        "p99_ms": r.stats.p99_ms,
        "errors": r.n - r.n_ok,
        "n": r.n,
        "generator_cpu_share": r.generator_cpu_share,
    }


GENERATORS = {"ailab.bench": run_ailab_generator, "hey": run_hey}
MEDIANS = ("rps", "p50_ms", "p99_ms", "model_busy", "batch_mean", "gap_ms_p50")


def one_text(max_chars: int) -> str:
    """A review snippet cut at a word boundary to at most `max_chars` characters."""
    from ailab.data import bench_texts

    if max_chars < 8:
        raise SystemExit(f"ailab bench peers: --text-chars must be at least 8 (got {max_chars})")
    text = bench_texts(1)[0]
    return text if len(text) <= max_chars else text[:max_chars].rsplit(" ", 1)[0]


def model_side(peer, since: float, until: float) -> dict:
    """How the peer's model spent a run (see _peer_model.read_trace): where two servers run the same model on
    the same batches, the one whose model sits idle longer between batches serves less. Ray's is not traced."""
    from ailab.suites._peer_model import NO_TRACE, read_trace

    if not isinstance(peer, PeerServer):
        return dict(NO_TRACE)
    return read_trace(peer.trace, since, until)


def summarise(rows: list[dict]) -> dict:
    """{peer: {generator: {clients: medians over rounds}}}."""
    out: dict = {}
    for r in rows:
        out.setdefault(r["peer"], {}).setdefault(r["generator"], {}).setdefault(str(r["clients"]), []).append(r)
    for peer in out.values():
        for gen in peer.values():
            for c, rs in gen.items():
                gen[c] = {
                    k: float(np.median([x[k] for x in rs if x[k] is not None]))
                    if any(x[k] is not None for x in rs)
                    else None
                    for k in MEDIANS
                }
                gen[c]["errors"] = sum(x["errors"] for x in rs)
    return out


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    from ailab.device import describe_hardware

    args = parse_args(argv)
    if quick:
        args.model, args.seconds, args.rounds = "tiny", 1.0, 1
        args.clients = "8"
        args.peers = ",".join(p for p in args.peers.split(",") if p != "ray")  # Ray needs ~30 s and ~2 GB to start
    peers_wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers_wanted) - set(PEERS)
    if unknown:
        raise SystemExit(f"ailab bench peers: unknown peer(s) {sorted(unknown)}; choose from {list(PEERS)}")
    if shutil.which("hey") is None:
        raise SystemExit("ailab bench peers: `hey` is not installed (make services, or apt-get install hey)")
    clients = [int(c) for c in args.clients.split(",")]
    body = {"inputs": one_text(args.text_chars)}
    env = {"AILAB_PEER_MODEL": args.model, "AILAB_PEER_BATCH": "32", "AILAB_PEER_WAIT_MS": "10"}
    out: dict = {
        "hardware": describe_hardware().one_line(),
        "model": args.model,
        "clients": clients,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "body_chars": len(body["inputs"]),
        "batch": {"max_batch_size": 32, "max_wait_ms": 10},
        "start_s": {},
        "rows": [],
    }
    from ailab.suites.scale import stdout_to_stderr

    with stdout_to_stderr(), ExitStack() as stack:  # Ray's processes print to fd 1, even as they stop
        peers, t0 = {}, time.perf_counter()
        for kind in peers_wanted:  # the processes load their models at the same time
            if kind != "ray":
                peers[kind] = start_peer(kind, env)
                stack.callback(peers[kind].stop)
        for kind, peer in peers.items():
            wait_until_answering(peer)
            out["start_s"][kind] = round(time.perf_counter() - t0, 1)
        if "ray" in peers_wanted and args.model == "minilm":  # the Ray deployment serves MiniLM only
            t0 = time.perf_counter()
            peers["ray"] = start_ray(32, 10)
            stack.callback(peers["ray"].stop)
            out["start_s"]["ray"] = round(time.perf_counter() - t0, 1)
        for peer in peers.values():  # warm every path once under load before anything counts
            run_hey(peer.url, body, 8, 1.0)
        for c in clients:
            for rnd in range(args.rounds):
                for name, peer in peers.items():
                    for gen, fn in GENERATORS.items():
                        since = time.monotonic()
                        row = fn(peer.url, body, c, args.seconds)
                        row.update(model_side(peer, since, time.monotonic()))
                        out["rows"].append(
                            {
                                "peer": name,
                                "generator": gen,
                                "clients": c,
                                "round": rnd,
                                **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()},
                            }
                        )
        out["rss_mib"] = {name: round(peer.rss_mib(), 1) for name, peer in peers.items()}
    out["summary"] = summarise(out["rows"])
    top = str(max(clients))
    s = out["summary"]
    if "ailab" in s and "mosec" in s:
        out["ailab_over_mosec"] = {
            gen: {
                "rps": s["ailab"][gen][top]["rps"] / s["mosec"][gen][top]["rps"],
                "p99_ailab_ms": s["ailab"][gen][top]["p99_ms"],
                "p99_mosec_ms": s["mosec"][gen][top]["p99_ms"],
                "model_busy_ailab": s["ailab"][gen][top]["model_busy"],
                "model_busy_mosec": s["mosec"][gen][top]["model_busy"],
                "gap_ms_ailab": s["ailab"][gen][top]["gap_ms_p50"],
                "gap_ms_mosec": s["mosec"][gen][top]["gap_ms_p50"],
            }
            for gen in GENERATORS
        }
    return out
