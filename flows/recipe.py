"""The whole Nanbeige4.1 recipe as one Prefect flow whose phases are subflows, in the paper's order.

    forge run --profile tiny          # from the command line (what `make run` does)
    python -m flows.recipe            # the same, without the CLI

Each phase hands the next its typed result (forge/stages.py) by keyword; docs/architecture.md has the stage table
(what each stage reads and returns, and the tiny profile's sizes next to the paper's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import flow
from prefect.runtime import flow_run
from pydantic import BaseModel, ConfigDict

from flows._stages import RecipeRun
from flows.base import base_flow
from flows.data import data_flow
from flows.evaluate import evaluate_flow
from flows.links import name_recipe_run
from flows.rl import rl_flow
from flows.sft import sft_flow
from forge.config import ProfileName, RecipeConfig, load_profile
from forge.fanout import on_cluster
from forge.stages import Checkpoint, DataMix, Release
from forge.workspace import Workspace, run_lock
from registry.tracking import init_mlflow, log_config
from tasks.promotion import promote_task


class RecipeResult(BaseModel):
    """What a recipe run produced: the released policy, its data, the gate's decision, and every stage's record."""

    model_config = ConfigDict(frozen=True)

    flow_run_id: str
    mlflow_run_id: str | None
    profile: str
    policy: Checkpoint
    data: DataMix
    release: Release
    seconds: float
    stages: dict[str, dict[str, Any]]


@flow(name="recipe", flow_run_name=name_recipe_run)
def recipe(profile: ProfileName = "tiny", overrides: dict[str, Any] | None = None) -> RecipeResult:
    """Run every stage of the recipe for ``profile`` (``configs/<profile>.yaml`` or a YAML path), with
    ``overrides`` (e.g. ``{"pointwise_rl.grpo.beta": 0.1}``) validated against it."""
    started = time.time()
    with _started(profile, overrides) as (cfg, run):
        base = base_flow(cfg, run)                                            # stage 0: base model
        data = data_flow(cfg, run, base=base)                                 # deep-search data, SFT mix, §2.1.1
        run.record_data(data)
        sft = sft_flow(cfg, run, base=base, data=data)                        # §2.1.1 SFT curriculum
        policy, judge = on_cluster(rl_flow, cfg.cluster)(cfg, run, base=base, sft=sft, data=data)  # §2.1.2–2.4 RL
        evaluate = on_cluster(evaluate_flow, cfg.cluster)                    # suites side by side on Ray
        evaluate(cfg, run, model=policy, judge=judge)                         # §3 evaluation matrix
        release = run.stage("promote", promote_task, candidate=policy, policy=cfg.promotion)
        run.record_release(release)
    return RecipeResult(flow_run_id=str(flow_run.id), mlflow_run_id=run.ctx.parent_run_id, profile=cfg.profile,
                        policy=policy, data=data, release=release, seconds=round(time.time() - started, 1),
                        stages=run.summary.data["stages"])


@flow(name="data-build", flow_run_name=name_recipe_run)
def data_build(profile: ProfileName = "tiny", overrides: dict[str, Any] | None = None) -> DataMix:
    """The recipe's first two phases only (base model, then data: pools, synthesis, mix, §2.1.1 refinement, DVC):
    the versioned SFT mix. Its stages are the recipe's, cached alike, so a later recipe run starts from them."""
    with _started(profile, overrides) as (cfg, run):
        data = data_flow(cfg, run, base=base_flow(cfg, run))
        run.record_data(data)
    return data


@contextmanager
def _started(profile: str, overrides: dict[str, Any] | None) -> Iterator[tuple[RecipeConfig, RecipeRun]]:
    """The profile, MLflow, the checkout's run lock and the run's MLflow parent run and summary."""
    cfg = load_profile(profile, overrides)
    ws = Workspace.from_env()
    init_mlflow(ws)
    with run_lock(ws, cfg.profile), RecipeRun.start(profile=cfg.profile, flow_run_id=str(flow_run.id),
                                                    workspace=ws) as run:
        log_config(cfg)
        yield cfg, run


if __name__ == "__main__":
    print(recipe())
