#!/usr/bin/env bash
# gpu_check.sh: the course's GPU branches in one command (under 8 minutes on a CUDA machine), one JSON out.
#
# On the device machine (Python 3.12 with its own CUDA torch, no package registry), after `make gpu-wheels`
# here, run from the repository root with
#     command: bash scripts/gpu_check.sh --require-gpu --print-json
#     carry:   ["build/gpu-wheels"]
#     timeout_s: 540
# It uses the machine's torch (never installs torch), installs the carried wheels (pinned as in pyproject.toml,
# ~36 MiB) into build/gpu-site with `pip install --no-index --no-deps --target` (or unzips them where there is
# no pip), keeps the machine's own numpy / typing-extensions / filelock / fsspec where present, puts
# build/gpu-site and the repository on PYTHONPATH and runs scripts/gpu_check.py. Results:
# $OUT/gpu_check.json (build/gpu_check.json when OUT is unset); --print-json also prints them.
#
# Here (CPU, the course's .venv): `make gpu-check`, or `bash scripts/gpu_check.sh --quick`; the CUDA-only
# sections are then reported as {"skipped": "<why>"} and the estimator and batching ceiling run on the CPU.
# Environment: PY (the Python with torch; default: .venv/bin/python, else python3, else python),
# AILAB_GPU_WHEELS (default build/gpu-wheels), AILAB_GPU_SITE (default build/gpu-site).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
WHEELS=${AILAB_GPU_WHEELS:-build/gpu-wheels}
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
if [ -f "$WHEELS/PYTHON_VERSION" ] && [ "$(cat "$WHEELS/PYTHON_VERSION")" = "$pyver" ]; then
  "$PY" "$REPO/scripts/gpu_check.py" --install-wheels "$WHEELS" --site "$SITE"
  export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
  export AILAB_GPU_ENV="$SITE/ailab-gpu-env.json"
else
  [ -d "$WHEELS" ] && echo "gpu_check: $WHEELS holds wheels for Python $(cat "$WHEELS/PYTHON_VERSION" 2>/dev/null || echo '?'), this is $pyver: using this Python's own packages"
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
  unset AILAB_GPU_ENV
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec "$PY" "$REPO/scripts/gpu_check.py" "$@"
