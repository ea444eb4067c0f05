#!/usr/bin/env python3
"""The GPU half of the course in one call: every notebook and solution whose dependencies can travel, under
nbval with AILAB_REQUIRE_GPU=1, most valuable first, each with its own time limit; one JSON and one log.

Run by scripts/gpu_suite.sh (which installs the bundle and runs gpu_check first); see its header for the device
command. The plan is PLAN (in order) and LEFT_OUT (with the reason for each); together they name every notebook
and solution on disk (tests/test_gpu_suite.py keeps it so).

    run      run the plan (or --only some of it) within --budget seconds, --jobs notebooks at a time, at most
             one GPU-timed notebook at a time (its speed claims would otherwise time the others too); write
             --out/gpu_suite.json and --out/gpu_suite.log
    prepare  what several notebooks would otherwise each compute at the same moment: the sentiment classifier
             (the travelling MiniLM's embeddings of the training snippets), its ONNX export and INT8 twin
    plan     print the plan and what is left out, as JSON

Each notebook runs as `pytest --nbval-lax` in its own process with a cell timeout equal to its limit, and the
whole process gets SIGINT at the limit (pytest then prints where it was and the cells that failed so far) and
SIGKILL 20 s later: a failure shows its cell and traceback even when time runs out. scripts/nbval_outputs.py
puts what every cell printed into the log too: the figures of a GPU run come back with it. A notebook that cannot start
before the budget ends is reported as not run, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG_TAIL = 200_000  # characters of one notebook's output kept in the combined log (its printed figures included)


@dataclass(frozen=True)
class Item:
    path: str
    limit_s: int  # the notebook's own time limit (nbval cell timeout, then SIGINT)
    gpu_timed: bool  # asserts speed on the GPU or loads it hard: never beside another such notebook
    claim: str  # what it shows on a GPU (the summary says what was at stake)


# Most valuable first: the claims that only a GPU can check, then what needs MiniLM (which could not travel
# before), then the rest. Limits are several times what each took on a 2-core CPU.
PLAN = (
    Item(
        "notebooks/1_hardware/01_where_the_bytes_go.ipynb",
        180,
        False,
        "VRAM counters, weights in their blocks, fragmentation with and without expandable segments",
    ),
    Item(
        "notebooks/5_generation/01_the_decode_loop.ipynb",
        300,
        True,
        "the KV cache's VRAM: bytes asked for = formula, blocks = formula rounded by the allocator; a decode step "
        "by batch, eager and compiled (reduce-overhead: CUDA graphs over batch buckets)",
    ),
    Item(
        "notebooks/2_engine/03_precision.ipynb",
        240,
        True,
        "fp16/bf16 not faster at batch 1, faster at 32, over 1.5x at 256",
    ),
    Item("notebooks/3_serving/01_why_batch.ipynb", 240, False, "the batching ceiling over 10x at batch 128"),
    Item("notebooks/1_hardware/02_safe_batch.ipynb", 180, False, "estimator within 15 %, find_max_batch within 10 %"),
    Item("notebooks/5_generation/03_streaming.ipynb", 180, False, "ailab serve --generate on the GPU, streamed"),
    Item("solutions/5_generation/ex_sse_reader.ipynb", 120, False, "an SSE reader against the generation server"),
    Item(
        "notebooks/5_generation/02_paged_and_continuous.ipynb",
        240,
        True,
        "continuous over static batching, the scheduler on the GPU",
    ),
    Item("notebooks/1_hardware/04_leak_hunting.ipynb", 150, False, "a leak's slope in memory_allocated"),
    Item("notebooks/1_hardware/03_kv_cache.ipynb", 120, False, "the KV cache formula against the decoder's cache"),
    Item("notebooks/1_hardware/05_roofline.ipynb", 180, True, "the GPU's bandwidth, matmul peak and roofline"),
    Item("solutions/1_hardware/lab_find_the_leak.ipynb", 150, False, "the leak lab on the GPU"),
    Item("solutions/1_hardware/lab_estimate_memory.ipynb", 150, False, "the estimator lab on the GPU"),
    Item("notebooks/2_engine/01_eager_vs_onnx.ipynb", 240, False, "export parity, fused graphs, the auto choice"),
    Item("notebooks/2_engine/02_where_the_time_goes.ipynb", 180, False, "stage shares"),
    Item("notebooks/2_engine/04_calibration.ipynb", 240, False, "static INT8 calibration"),
    Item("notebooks/2_engine/05_trust.ipynb", 180, False, "safe loading of the travelling copy, determinism, drift"),
    Item("notebooks/3_serving/02_dynamic_batcher.ipynb", 240, False, "the batcher's gain with the model on the GPU"),
    Item("notebooks/3_serving/03_length_bucketing.ipynb", 180, False, "bucketing on the GPU"),
    Item("notebooks/3_serving/05_overload_and_bad_input.ipynb", 180, False, "overload and bad input, MiniLM served"),
    Item("notebooks/3_serving/06_hot_swap.ipynb", 180, False, "hot swap with the model on the GPU"),
    Item("notebooks/4_application/01_performance_testing.ipynb", 300, False, "closed/open loop against ailab serve"),
    Item("notebooks/4_application/02_sentiment_service.ipynb", 240, False, "the end-to-end service"),
    Item("solutions/0_orientation/lab00_latency.ipynb", 150, False, "latency measured with a GPU sync"),
    Item("solutions/2_engine/lab_accuracy_gate.ipynb", 180, False, "the accuracy gate"),
    Item("solutions/2_engine/lab_export_verify.ipynb", 180, False, "export and verify"),
    Item("solutions/3_serving/lab_batch_loop.ipynb", 180, False, "the batch loop lab"),
    Item("solutions/3_serving/lab_admission_control.ipynb", 150, False, "admission control"),
    Item("solutions/4_application/lab_capstone_slo.ipynb", 300, False, "the capstone's SLO choice"),
    Item("solutions/5_generation/lab_scheduler_step.ipynb", 150, False, "the scheduler step lab"),
    Item("solutions/5_generation/ex_decode_loop.ipynb", 120, False, "the decode loop exercise"),
    Item("solutions/1_hardware/ex_kv_budget.ipynb", 90, False, "KV budget"),
    Item("solutions/1_hardware/ex_bytes_by_module.ipynb", 90, False, "bytes by module"),
    Item("solutions/1_hardware/ex_roofline.ipynb", 90, False, "roofline exercise"),
    Item("solutions/2_engine/ex_compare_outputs.ipynb", 120, False, "comparing outputs"),
    Item("solutions/2_engine/ex_stage_shares.ipynb", 120, False, "stage shares exercise"),
    Item("solutions/2_engine/ex_verify_then_load.ipynb", 90, False, "verify then load"),
    Item("solutions/3_serving/ex_batching_ceiling.ipynb", 120, False, "batching ceiling exercise"),
    Item("solutions/3_serving/ex_bucket_batches.ipynb", 90, False, "bucket batches"),
    Item("solutions/3_serving/ex_histogram_quantile.ipynb", 90, False, "histogram quantile against /metrics"),
    Item("solutions/3_serving/ex_swap_plan.ipynb", 90, False, "swap plan"),
    Item("solutions/4_application/ex_alert_states.ipynb", 90, False, "alert states"),
    Item("solutions/4_application/ex_replicas.ipynb", 120, False, "replicas"),
    Item("solutions/4_application/ex_service_report.ipynb", 120, False, "service report"),
    Item("solutions/0_orientation/ex_pin_drift.ipynb", 90, False, "pin drift, read against this machine's versions"),
    # part 5's later chapters, last: they have not met a GPU yet, and the budget cuts the end of the plan first
    Item("notebooks/5_generation/04_prefix_caching.ipynb", 180, False, "prefix caching's hits and tokens on the GPU"),
    Item(
        "notebooks/5_generation/05_chunked_prefill.ipynb", 180, False, "chunked prefill's plans and tokens on the GPU"
    ),
    Item("notebooks/5_generation/06_goodput.ipynb", 180, True, "goodput against the defaults, the engine on the GPU"),
    Item("solutions/5_generation/lab_prefix_cache.ipynb", 150, False, "the prefix-cache lab, its pool on the GPU"),
    Item("solutions/5_generation/ex_chunked_prefill.ipynb", 120, False, "the chunked-prefill exercise"),
    Item("solutions/5_generation/lab_capstone_llm.ipynb", 300, True, "the LLM capstone's settings run live"),
    Item(
        "notebooks/5_generation/07_weights_in_fewer_bits.ipynb",
        240,
        True,
        "INT8/INT4 weights on the GPU through the plain dequantize: bytes, the bits-per-byte gate, speeds printed",
    ),
    Item("solutions/5_generation/ex_weight_quant.ipynb", 120, False, "the weight-quantization exercise"),
    Item(
        "notebooks/5_generation/08_speculative_decoding.ipynb",
        180,
        True,
        "speculative decoding's forward cost by tokens, acceptance and speed-up by k on the GPU",
    ),
    Item("solutions/5_generation/ex_verify_accept.ipynb", 120, False, "the verify-and-accept exercise"),
)

# What cannot travel in one call (project + bundle <= 60 MiB, no package registry, no Debian packages), and why.
LEFT_OUT = {
    "notebooks/0_orientation/00_tour.ipynb": "its first cell asserts `ailab doctor` is all green: every pinned version; the machine runs "
    "Python 3.12 with its own torch 2.11 and transformers 5.17, and JupyterLab does not travel",
    "notebooks/0_orientation/01_reproducible_env.ipynb": "asserts that no installed version differs from its pin; the machine's torch, transformers, numpy differ",
    "notebooks/3_serving/04_the_server.ipynb": "needs hey (a Debian package), py-spy and mosec (the peers extra); with them the bundle would pass 60 MiB",
    "notebooks/4_application/03_monitoring.ipynb": "needs Prometheus with promtool and PostgreSQL (Debian binaries)",
    "notebooks/4_application/04_queue_workers.ipynb": "needs redis-server (a Debian binary)",
    "notebooks/4_application/05_outgrowing_one_machine.ipynb": "needs Ray Serve: the ray wheel alone is ~70 MB",
    "notebooks/4_application/06_retrieval.ipynb": "needs faiss-cpu, whose wheel (~30 MB) does not fit beside MiniLM",
    "solutions/4_application/ex_recall_at_k.ipynb": "needs faiss-cpu (~30 MB), as notebook 4/06",
    "solutions/4_application/ex_reliable_queue.ipynb": "needs redis-server (a Debian binary)",
}


def all_notebooks() -> list[str]:
    return sorted(
        str(p.relative_to(REPO))
        for d in ("notebooks", "solutions")
        for p in (REPO / d).rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts
    )


# ----------------------------------------------------------------------------- one notebook
def _junit(path: Path) -> dict:
    """Cells run, passed, failed, skipped, and the first failure's cell and message, from pytest's junit XML."""
    out = {"cells": 0, "passed": 0, "failed": 0, "skipped": 0, "first_failure": None}
    if not path.is_file():
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        out["cells"] += 1
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            out["failed"] += 1
            if out["first_failure"] is None:
                out["first_failure"] = {"cell": case.get("name"), "message": (bad.get("message") or "")[:500]}
        elif case.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def run_one(item: Item, limit_s: float, env: dict, tmp: Path) -> dict:
    """One notebook under nbval in its own process group, stopped by SIGINT at `limit_s` and SIGKILL after 20 s."""
    name = item.path.replace("/", "__")
    junit = tmp / f"{name}.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "--tb=short",
        "-p",
        "no:cacheprovider",
        "-p",
        "nbval.plugin",
        "-p",
        "nbval_outputs",
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={int(limit_s)}",
        f"--junitxml={junit}",
        item.path,
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    timer = threading.Timer(limit_s, lambda: _stop(proc, signal.SIGINT))
    killer = threading.Timer(limit_s + 20, lambda: _stop(proc, signal.SIGKILL))
    timer.start()
    killer.start()
    output, _ = proc.communicate()
    timer.cancel()
    killer.cancel()
    seconds = time.perf_counter() - t0
    timed_out = seconds >= limit_s
    res = {
        "path": item.path,
        "seconds": round(seconds, 1),
        "limit_s": round(limit_s),
        "rc": proc.returncode,
        **_junit(junit),
    }
    res["status"] = "timeout" if timed_out else "passed" if proc.returncode == 0 and res["failed"] == 0 else "failed"
    res["log"] = output
    return res


def _stop(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------------------- the run
def notebook_env(rehearse: bool, threads: int) -> dict:
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        MPLBACKEND="agg",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    # scripts/ for the nbval_outputs plugin, by its own name: a package called `scripts` may exist elsewhere
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO / "scripts")) if p)
    if rehearse:
        env.pop("AILAB_REQUIRE_GPU", None)
    else:
        env["AILAB_REQUIRE_GPU"] = "1"
    return env


def run(args) -> int:
    t_start = time.perf_counter()
    deadline = t_start + args.budget
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = [i for i in PLAN if not args.only or i.path in args.only or Path(i.path).stem in args.only]
    unknown = [o for o in (args.only or []) if not any(o in (i.path, Path(i.path).stem) for i in PLAN)]
    if unknown:
        print(
            f"gpu_suite: not in the plan: {unknown} (left out: {[p for p in LEFT_OUT if Path(p).stem in unknown]})",
            file=sys.stderr,
        )
        return 2
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // args.jobs)
    env = notebook_env(args.rehearse, threads)
    log_path = out / "gpu_suite.log"
    results: dict[str, dict] = {}
    tmp = Path(tempfile.mkdtemp(prefix="ailab-gpu-suite-"))
    cond = threading.Condition()
    state = {"running": 0, "gpu_busy": False}

    def task(item: Item) -> None:
        try:
            left = deadline - time.perf_counter()
            if left < args.min_start_s:
                res = {
                    "path": item.path,
                    "status": "not run",
                    "seconds": 0,
                    "limit_s": item.limit_s,
                    "why": f"{left:.0f} s of the budget left when its turn came "
                    f"(needs {args.min_start_s:.0f} s to start)",
                }
            else:
                res = run_one(item, min(item.limit_s, left), env, tmp)
            log = res.pop("log", "")
            with cond:
                results[item.path] = res
                with open(log_path, "a") as f:
                    f.write(
                        f"\n{'=' * 100}\n{item.path}: {res['status']} in {res['seconds']} s "
                        f"(limit {res['limit_s']} s)\n"
                    )
                    f.write(log[-LOG_TAIL:])
                fail = res.get("first_failure") or {}
                print(
                    f"[{time.perf_counter() - t_start:5.0f} s] {res['status']:>8}  {res['seconds']:6.1f} s  "
                    f"{item.path}"
                    + (
                        f"  ({res.get('passed', 0)}/{res.get('cells', 0)} cells; {fail.get('cell')}: "
                        f"{(fail.get('message') or '')[:160]})"
                        if fail
                        else ""
                    )
                    + (f"  ({res['why']})" if "why" in res else ""),
                    flush=True,
                )
        finally:
            with cond:
                state["running"] -= 1
                state["gpu_busy"] = state["gpu_busy"] and not item.gpu_timed
                cond.notify_all()

    print(
        f"gpu_suite: {len(plan)} notebooks, {args.jobs} at a time ({threads} threads each), at most one "
        f"GPU-timed at a time, budget {args.budget:.0f} s, "
        f"{'CPU rehearsal' if args.rehearse else 'AILAB_REQUIRE_GPU=1'}",
        flush=True,
    )
    pending, threads_started = list(plan), []
    with cond:
        while pending:
            # the first item in plan order that may start now: a GPU-timed one only while no other runs
            ready = next((i for i in pending if not (i.gpu_timed and state["gpu_busy"])), None)
            if state["running"] >= args.jobs or ready is None:
                cond.wait()
                continue
            pending.remove(ready)
            state["running"] += 1
            state["gpu_busy"] = state["gpu_busy"] or ready.gpu_timed
            t = threading.Thread(target=task, args=(ready,), daemon=True)
            t.start()
            threads_started.append(t)
    for t in threads_started:
        t.join()
    shutil.rmtree(tmp, ignore_errors=True)  # each notebook's junit XML, already read into its result
    rows = [results[i.path] for i in plan]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "timeout", "not run")}
    summary = {
        "suite": "ailab gpu_suite",
        "rehearsal": args.rehearse,
        "jobs": args.jobs,
        "threads_each": threads,
        "budget_s": args.budget,
        "seconds": round(time.perf_counter() - t_start, 1),
        "counts": counts,
        "covered": len(plan),
        "of_all": len(all_notebooks()),
        "results": rows,
        "claims": {i.path: i.claim for i in plan},
        "left_out": {p: why for p, why in LEFT_OUT.items()},
        "not_selected": [i.path for i in PLAN if i not in plan],
    }
    prior = out / "gpu_suite.json"
    if prior.is_file():  # the shell wrote the install and gpu_check parts first: keep them
        summary = {**json.loads(prior.read_text()), **summary}
    prior.write_text(json.dumps(summary, indent=1))
    print(
        f"gpu_suite: {counts} in {summary['seconds']:.0f} s; {len(LEFT_OUT)} left out; wrote {prior} and {log_path}",
        flush=True,
    )
    return 0 if counts["passed"] == len(plan) else 1


PREPARE = """
import time
t0 = time.perf_counter()
from ailab import engine, quantize
from ailab.device import pick_device
from ailab.models import load_encoder, sentiment_classifier
# The embeddings on the GPU (seconds, not a minute on the CPU); the cache does not depend on where they were made
sentiment_classifier(load_encoder(device=pick_device()))
trained = sentiment_classifier()     # the classifier as the notebooks build it: on the CPU, from the cache
t1 = time.perf_counter()
int8 = quantize.quantize_dynamic_int8(engine.sentiment_onnx(trained.model))
print(f"prepare: sentiment classifier {t1 - t0:.1f} s (accuracy {trained.test_accuracy:.3f}, {trained.encoder.name}), "
      f"ONNX export and INT8 {time.perf_counter() - t1:.1f} s ({int8.name})")
"""


def prepare(args) -> int:
    env = notebook_env(args.rehearse, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 4)
    try:
        return subprocess.run([sys.executable, "-c", PREPARE], cwd=REPO, env=env, timeout=args.timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"prepare: over {args.timeout} s; the notebooks will compute what is missing themselves")
        return 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "gpu-suite"))
    r.add_argument("--budget", type=float, default=420, help="seconds for all the notebooks together")
    r.add_argument("--jobs", type=int, default=6)
    r.add_argument("--min-start-s", type=float, default=45, help="do not start a notebook with less time left")
    r.add_argument("--only", nargs="*", help="paths or stems from the plan")
    r.add_argument("--rehearse", action="store_true", help="CPU dry run: no AILAB_REQUIRE_GPU")
    q = sub.add_parser("prepare")
    q.add_argument("--timeout", type=float, default=120)
    q.add_argument("--rehearse", action="store_true")
    sub.add_parser("plan")
    args = p.parse_args(argv)
    if args.cmd == "run":
        return run(args)
    if args.cmd == "prepare":
        return prepare(args)
    print(json.dumps({"plan": [asdict(i) for i in PLAN], "left_out": LEFT_OUT}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
