#!/usr/bin/env bash
# gpu_check.sh: the course's GPU branches in one command (under 8 minutes on a CUDA machine), one JSON out.
#
# On the device machine (Python 3.12 with its own CUDA torch, no package registry), after `make gpu-bundle`
# here, run from the repository root with
#     command: bash scripts/gpu_check.sh --require-gpu --print-json
#     carry:   ["build/gpu-bundle"]
#     timeout_s: 540
# It uses the machine's torch and its other packages (never installs torch), installs the carried bundle into
# build/gpu-site with `scripts/gpu_bundle.py install` (`pip install --no-index --no-deps --target`, the same step
# scripts/gpu_suite.sh takes; the bundle's own ailab-gpu-env.json is recorded as the run's environment), puts
# build/gpu-site and the repository on PYTHONPATH and runs scripts/gpu_check.py, the suite `ailab bench gpu`
# (ailab/suites/gpu.py) written to a file. Results: $OUT/gpu_check.json (build/gpu_check.json when OUT is unset);
# --print-json also prints them.
#
# Here (CPU, the course's .venv): `make gpu-check`, or `bash scripts/gpu_check.sh --quick`; a bundle for another
# Python is left alone and this Python's own packages are used; the CUDA-only sections are then reported as
# {"skipped": "<why>"} and the estimator, batching ceiling and generation sections run on the CPU.
# Options: those of scripts/gpu_check.py (--quick, --require-gpu, --out, --threads, --only, --print-json).
# Environment: PY (the Python with torch; default: .venv/bin/python, else python3, else python),
# AILAB_GPU_BUNDLE (default build/gpu-bundle), AILAB_GPU_SITE (default build/gpu-site).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
BUNDLE=${AILAB_GPU_BUNDLE:-$REPO/build/gpu-bundle}
SITE=${AILAB_GPU_SITE:-$REPO/build/gpu-site}

if [ -z "${PY:-}" ]; then
  for c in "$REPO/.venv/bin/python" python3 python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null; then
      PY=$c; break
    fi
  done
fi
if [ -z "${PY:-}" ]; then
  echo "gpu_check: no Python that can import torch (set PY=/path/to/python)" >&2; exit 2
fi
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
bundle_py=""
if [ -f "$BUNDLE/MANIFEST.json" ]; then
  bundle_py=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["python"])' "$BUNDLE/MANIFEST.json")
fi
if [ "$bundle_py" = "$pyver" ]; then
  "$PY" "$REPO/scripts/gpu_bundle.py" install --bundle "$BUNDLE" --site "$SITE"
  export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  export AILAB_GPU_ENV="$SITE/ailab-gpu-env.json"
else
  [ -n "$bundle_py" ] && echo "gpu_check: $BUNDLE is for Python $bundle_py, this is $pyver: using this Python's own packages"
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
  unset AILAB_GPU_ENV
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "$PY" "$REPO/scripts/gpu_check.py" "$@"
