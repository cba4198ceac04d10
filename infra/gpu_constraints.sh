#!/usr/bin/env bash
# Regenerate constraints-gpu.txt: the exact versions `make setup-gpu` installs on a CUDA machine (the [gpu] and [dev]
# extras: vLLM, DeepSpeed, the tests' tools), resolved by uv for Linux and macOS on Python 3.11 and 3.12. vLLM's own
# torch / transformers pins decide the resolution; constraints.txt (the CPU machine's pins) is not read. Needs the
# package index (PyPI); a minute or two. Check the result with infra/check_gpu_extra.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
test -x "$uv" || { echo "no $uv: run make setup first (it installs uv into the venv)"; exit 1; }
"$uv" pip compile pyproject.toml --extra gpu --extra dev --universal --python-version 3.11 --quiet \
  --custom-compile-command "infra/gpu_constraints.sh" -o constraints-gpu.txt
grep -E "^(torch|vllm|deepspeed|transformers|trl|accelerate)==" constraints-gpu.txt
