"""Why the server gives each model one thread for everything torch does, and keeps the garbage collector off
the model's objects: the two probes that measure it (notebook 3/04, topic S4).

PyTorch on CPU runs each operator's parallel loop on an OpenMP team that belongs to the calling thread. A
second thread that runs the model gets a team of its own, and the teams stay. Once they hold more threads than
the CPU has cores, libgomp (the OpenMP runtime of PyTorch's Linux wheels) stops spinning between parallel
regions: its threads sleep and are woken again for each of the hundreds of operators of a forward pass. On an
idle machine that is slower; beside another busy process, where spinning threads burn the cores it wants,
sleeping ones do better (a 2-core box measured 87 -> 100 ms idle, 300-415 -> 177-186 ms beside a busy loop).

    python -m ailab.server.model_thread     # the first probe in a fresh process, as JSON
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def _median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def second_thread_probe(n_texts: int = 32, rounds: int = 9) -> dict:
    """The MiniLM classifier loaded and timed on one thread, then timed again on it while a second thread that
    has run one batch is alive (a thread's OpenMP team goes when the thread ends)."""
    import torch

    from ailab.data import bench_texts
    from ailab.server.predictors import sentiment_predictor

    texts = bench_texts(n_texts, min_words=8, max_words=16)
    model_thread = ThreadPoolExecutor(max_workers=1)
    predictor = model_thread.submit(sentiment_predictor).result()
    on_model_thread = lambda: model_thread.submit(predictor, texts).result()  # noqa: E731
    on_model_thread()  # warm-up, excluded
    alone = _median_ms(on_model_thread, rounds)
    with ThreadPoolExecutor(max_workers=1) as other:  # a thread that lives on, idle, like
        other.submit(predictor, texts).result()  # asyncio.to_thread's: it runs one batch,
        after = _median_ms(on_model_thread, rounds)  # and its OpenMP team stays while it lives
    model_thread.shutdown()
    threads = torch.get_num_threads()
    return {
        "batch": n_texts,
        "torch_threads": threads,
        "one_thread_ms": round(alone, 1),
        "after_a_second_thread_ms": round(after, 1),
        # where the effect is expected: libgomp (Linux wheels), a CPU model, and two teams over the core count
        "oversubscribed": sys.platform == "linux"
        and predictor.clf.device == "cpu"
        and 2 * threads > (os.cpu_count() or 1),
    }


def second_thread_probe_in_child(n_texts: int = 32, rounds: int = 9, timeout_s: float = 300.0) -> dict:
    """second_thread_probe() in a fresh Python process: one whose threads have never run torch."""
    code = (
        f"import json; from ailab.server.model_thread import second_thread_probe; "
        f"print(json.dumps(second_thread_probe({int(n_texts)}, {int(rounds)})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"the probe's process failed (exit {out.returncode}): {out.stderr[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def full_collection_ms(rounds: int = 3) -> dict:
    """What one full pass of the garbage collector costs in this process now, with what is alive in it, and
    the same pass once those objects are frozen (gc.freeze, as the server does after loading a model).
    Leaves them frozen."""
    gc.unfreeze()
    gc.collect()
    tracked = len(gc.get_objects())
    unfrozen = _median_ms(gc.collect, rounds)
    gc.freeze()
    frozen = _median_ms(gc.collect, rounds)
    return {"tracked_objects": tracked, "full_pass_ms": round(unfrozen, 1), "frozen_pass_ms": round(frozen, 2)}


if __name__ == "__main__":
    print(json.dumps(second_thread_probe()))
