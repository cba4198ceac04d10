# Two commands on a fresh machine:  make run  (set up + whole recipe, tiny profile)  and  make test.
# Set-up is idempotent: the venv is built once and rebuilt only when pyproject.toml or constraints.txt change.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.forge-installed
PROFILE ?= tiny

# Offline and tidy (docs/stack.md): nothing reaches a hub, nothing phones home.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export DO_NOT_TRACK := true
export MLFLOW_DISABLE_TELEMETRY := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DVC_NO_ANALYTICS := 1
export STREAMLIT_BROWSER_GATHER_USAGE_STATS := false
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-gpu run test ui clean browser
setup: $(STAMP)

# A CUDA machine: the [gpu] extra (vLLM, DeepSpeed) and torch's CUDA build at constraints-gpu.txt's versions
# (docs/scale.md). Never on a CPU machine: it pulls several GB of CUDA wheels.
setup-gpu:
	FORGE_EXTRAS=gpu,dev FORGE_CONSTRAINTS=constraints-gpu.txt infra/install_venv.sh $(VENV)
	@touch $(STAMP)

# The dashboard's browser tests drive Debian's chromium through Playwright (never `playwright install`: no CDN here).
# Installed when missing and we may (root with apt); otherwise those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) || \
	    echo "could not install chromium: the browser tests will skip"; \
	  else echo "no chromium (and not root with apt): the browser tests will skip"; fi; }

$(STAMP): pyproject.toml constraints.txt infra/install_venv.sh
	@# torch first, from the CPU wheel on disk; any other torch request would pull a CUDA build. uv when it can be had.
	infra/install_venv.sh $(VENV)
	@touch $(STAMP)

run: setup
	$(VENV)/bin/forge run --profile $(PROFILE)

test: setup browser
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25  # two workers, a test file each, the costliest files first (tests/conftest.py); the slowest tests in every log: the 30-minute budget is watched there

ui: setup
	$(VENV)/bin/forge ui

clean:
	rm -rf .forge
