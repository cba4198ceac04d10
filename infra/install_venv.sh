#!/usr/bin/env bash
# Install Forge and its pins into the venv: `make setup` runs this (infra/install_venv.sh VENV).
#
# With uv when it can be had (pip installs it into the venv), else with pip alone. Both take torch's CPU wheel
# (pinned below; any other torch request pulls a CUDA build; pip installs it first, uv resolves it with the rest)
# and the exact versions in constraints.txt. uv does not read pip's configuration, so pip's find-links, indexes
# and certificate are handed to it; where uv fails for any reason, pip does the install. Measured on 2 cores
# (README, "What it costs"): a fresh clone's venv in 47 s with uv's cache warm, 109 s with it empty, against
# ~150 s (quiet) to 311 s (loaded) for pip; the same 294 packages.
#
# `make setup-gpu` (a CUDA machine) runs it with FORGE_EXTRAS=gpu,dev FORGE_CONSTRAINTS=constraints-gpu.txt: the same
# torch release, which PyPI serves as its CUDA build there, and vLLM / DeepSpeed at the versions vLLM's pins resolve to
# (infra/gpu_constraints.sh writes the file; infra/check_gpu_extra.sh dry-runs it).
set -euo pipefail
venv=${1:-.venv}
py=$venv/bin/python
extras=${FORGE_EXTRAS:-dev}
constraints=${FORGE_CONSTRAINTS:-constraints.txt}
# Some machines' pip.conf names local index folders that do not exist; pip warns once per package about them.
quiet() { grep -v "^WARNING: Location '.*' is ignored" || true; }

pip_setting() {  # pip's effective value of a global option: its environment variable, else its config files
  local env_name="PIP_$(echo "$1" | tr 'a-z-' 'A-Z_')"
  if [ -n "${!env_name:-}" ]; then echo "${!env_name}"; else "$py" -m pip config get "global.$1" 2>/dev/null || true; fi
}

with_uv() {
  "$py" -m pip install -q uv==0.13.9 2>&1 | quiet
  local args=(--python "$py" --compile-bytecode --index-strategy unsafe-best-match -c "$constraints")
  local value
  for value in $(pip_setting find-links); do args+=(--find-links "$value"); done
  for value in $(pip_setting extra-index-url); do args+=(--extra-index-url "$value"); done
  value=$(pip_setting index-url); [ -z "$value" ] || args+=(--index-url "$value")
  value=$(pip_setting cert); [ -z "$value" ] || export SSL_CERT_FILE="$value"
  # --compile-bytecode: PYTHONDONTWRITEBYTECODE=1 is common here, and every import is then ~2x slower (docs/stack.md).
  "$venv/bin/uv" pip install -q "${args[@]}" torch==2.13.0 -e ".[$extras]"
}

with_pip() {
  "$py" -m pip install -q torch==2.13.0 2>&1 | quiet
  "$py" -m pip install -q -c "$constraints" -e ".[$extras]" 2>&1 | quiet
}

test -x "$py" || python3 -m venv "$venv"
if [ "${FORGE_INSTALLER:-uv}" = uv ] && with_uv; then
  echo "installed with uv"
else
  [ "${FORGE_INSTALLER:-uv}" = pip ] || echo "uv could not install the venv; installing with pip"
  with_pip
fi
