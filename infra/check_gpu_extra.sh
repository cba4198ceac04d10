#!/usr/bin/env bash
# Does `pip install -c constraints-gpu.txt -e '.[gpu]'` resolve? A dry run in a throwaway venv with pip alone (this
# machine's pip configuration set aside: its local wheel folders and caps are not what a GPU machine has), on this
# interpreter and platform. Downloads metadata only, nothing is installed. Needs PyPI; not run by CI (minutes).
#   infra/check_gpu_extra.sh [python]      # e.g. python3.12; default python3
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
for var in $(env | grep -o '^PIP_[A-Z_]*' || true); do unset "$var"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install --dry-run --quiet --report "$tmp/report.json" -c constraints-gpu.txt -e '.[gpu]'
"$tmp/venv/bin/python" - "$tmp/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
names = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
print(f"resolved {len(names)} packages with {sys.version.split()[0]}:",
      ", ".join(f"{n}=={names[n]}" for n in ("torch", "vllm", "deepspeed", "transformers", "trl", "accelerate")))
PY
