"""`python scripts/crosscheck_hey.py`: hey (Go) against ailab.bench (its child-process mode) on a real `ailab serve`
(MiniLM, batch 32 / 10 ms), 32 clients, 8 s a round, 3 interleaved rounds. Needs Debian's hey (make services).
Prints both generators' req/s and p50 per round and their ratio; run it on a quiet machine."""

import json
import re
import subprocess
import tempfile
from ailab import bench, services

server = services.start_ailab_server(["--max-batch-size", "32", "--max-wait-ms", "10", "--quiet"])
url = server.url + "/v1/predict"
body = {"inputs": "a moving, beautifully acted film that stays with you long after the credits"}
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    json.dump(body, f)
    path = f.name
try:
    bench.in_subprocess("closed_loop", url, [body], clients=32, duration_s=3.0, warmup_s=1.0)  # warm
    for rnd in range(3):
        out = subprocess.run(
            ["hey", "-c", "32", "-z", "8s", "-m", "POST", "-T", "application/json", "-D", path, url],
            capture_output=True,
            text=True,
        ).stdout
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        p50 = re.search(r"50%+ in ([\d.]+) secs", out)
        res = bench.in_subprocess("closed_loop", url, [body], clients=32, duration_s=8.0, warmup_s=1.0)
        print(
            f"round {rnd}: hey {rps:.1f} req/s p50 {float(p50.group(1)) * 1e3 if p50 else float('nan'):.0f} ms | "
            f"ailab.bench {res.rps:.1f} req/s p50 {res.stats.p50_ms:.0f} ms | ratio bench/hey {res.rps / rps:.3f}"
        )
finally:
    server.stop()
