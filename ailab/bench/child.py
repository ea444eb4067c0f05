"""The load generator in a child Python process, so it does not share a GIL with a server in this one.

`in_subprocess("closed_loop" | "open_loop", url, payloads, **kwargs)` runs the loop in `python -m
ailab.bench` and returns its LoadResult here, with the child's own CPU time (`generator_cpu_s`): the
benchmark suites report how much of the machine the load generator itself took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Sequence

from ailab.bench.http import BenchTargetError
from ailab.bench.records import LoadResult


def in_subprocess(
    kind: str, url: str, payloads: Sequence | None, process_timeout_s: float = 900.0, **kwargs
) -> LoadResult:
    """Run closed_loop or open_loop in a child Python process and return its LoadResult here."""
    if kind not in ("closed_loop", "open_loop"):
        raise ValueError(f"kind must be 'closed_loop' or 'open_loop' (got {kind!r})")
    spec = json.dumps({"kind": kind, "url": url, "payloads": payloads, "kwargs": kwargs})
    proc = subprocess.run(
        [sys.executable, "-m", "ailab.bench"], input=spec, capture_output=True, text=True, timeout=process_timeout_s
    )
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        if "BenchTargetError" in proc.stderr:
            raise BenchTargetError(err.split(": ", 1)[-1])
        raise RuntimeError(f"the load generator process failed: {err}")
    d = json.loads(proc.stdout)
    return LoadResult(
        d["mode"],
        d["url"],
        d["clients"],
        d["rate_rps"],
        d["duration_s"],
        d["warmup_s"],
        [tuple(r) for r in d["records"]],
        d["elapsed_s"],
        d["window_s"],
        d["generator_cpu_s"],
    )


def child_main() -> None:
    from ailab.bench.loops import closed_loop, open_loop

    try:
        import uvloop  # the event loop uvicorn uses: cheaper per request than asyncio's default

        uvloop.install()
    except ImportError:
        pass
    spec = json.loads(sys.stdin.read())
    fn = {"closed_loop": closed_loop, "open_loop": open_loop}[spec["kind"]]
    cpu0 = time.process_time()
    r = fn(spec["url"], spec["payloads"], progress=False, **spec["kwargs"])
    print(
        json.dumps(
            {
                "mode": r.mode,
                "url": r.url,
                "clients": r.clients,
                "rate_rps": r.rate_rps,
                "duration_s": r.duration_s,
                "warmup_s": r.warmup_s,
                "records": r.records,
                "elapsed_s": r.elapsed_s,
                "window_s": r.window_s,
                "generator_cpu_s": time.process_time() - cpu0,
            },
            default=float,
        )
    )
