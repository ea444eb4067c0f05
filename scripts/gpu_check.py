#!/usr/bin/env python3
"""The course's GPU branches in one run: `bash scripts/gpu_check.sh` (see its header for the device command).

A thin wrapper over the suite `ailab bench gpu` (ailab/suites/gpu.py: the seven sections, the hardware inventory,
one summary line per section): it writes the suite's result to gpu_check.json and exits 0 (every section ran or
said why it was skipped), 1 (a section raised) or 2 (the check itself failed, e.g. no GPU under --require-gpu).
What a CUDA machine needs besides the project travels in `make gpu-bundle`'s folder (scripts/gpu_bundle.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ailab.suites import gpu  # noqa: E402 - after the repository is on the path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points and rounds (the unit test's CPU run)")
    p.add_argument("--require-gpu", action="store_true", help="fail (exit 2) when no CUDA device is visible")
    p.add_argument("--out", help="folder for gpu_check.json (default: $OUT, else build/)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads(N) first (the unit test uses 1 on a busy CPU)")
    p.add_argument("--only", help="comma-separated sections to run; the others are marked skipped")
    p.add_argument("--print-json", action="store_true", help="also print the JSON (without the timeline) to stdout")
    args = p.parse_args(argv)
    out_dir = Path(args.out or os.environ.get("OUT") or (REPO / "build"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gpu_check.json"
    result = gpu.check(
        args.quick,
        only=args.only,
        require_gpu=args.require_gpu,
        threads=args.threads,
        progress=lambda line: print(line, flush=True),
    )
    if "error" in result:
        print(f"gpu_check: {result['error']}", file=sys.stderr)
    path.write_text(json.dumps(result, indent=1, default=str))
    hw = result.get("hardware", {})
    print(
        f"gpu_check: {hw.get('device_name')} torch {hw.get('torch')} cuda {hw.get('torch_cuda')}; "
        f"{result['total_seconds']:.1f}s; wrote {path}",
        flush=True,
    )
    if args.print_json:  # the device run's output tail carries the figures even if the file is not fetched
        slim = json.loads(json.dumps(result, default=str))
        for sec in slim.get("sections", {}).values():
            for key in ("timeline", "traceback", "counters_available"):
                sec.pop(key, None)
        slim.get("hardware", {}).pop("ailab", None)
        slim.get("environment", {}).pop("installed", None)
        print(json.dumps(slim, separators=(",", ":"), default=str))
    return gpu.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
