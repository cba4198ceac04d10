"""The whole Nanbeige4.1 recipe as one Prefect flow whose stages are subflows.

    forge run --profile tiny          # from the command line (what `make run` does)
    python -m flows.recipe            # the same, without the CLI

Stages (DESIGN.md): 0 base model → data mix (DVC) → SFT curriculum → point-wise RL → pair-wise RL → evaluation →
promotion. Later issues add deep-search and code data, the code and agentic RL stages and more eval suites as
further subflows between these.
"""

from __future__ import annotations

import time

from prefect import flow
from prefect.runtime import flow_run

from flows._progress import RunSummary, run_stage, set_summary
from flows.base import base_flow
from flows.data import data_flow
from flows.evaluate import evaluate_flow
from flows.rl import rl_flow
from flows.sft import sft_flow
from forge.config import RecipeConfig, load_profile
from forge.workspace import Workspace
from registry.tracking import (
    FLOW_RUN_ID_TAG,
    GIT_COMMIT_TAG,
    PROFILE_TAG,
    git_commit,
    init_mlflow,
    log_config,
    start_stage_run,
)
from tasks.promotion import promote_task


@flow(name="recipe")
def recipe(profile: str = "tiny", config: RecipeConfig | None = None) -> dict:
    """Run every stage of the recipe for ``profile`` (or an explicit ``config``, e.g. from the Prefect UI form)."""
    cfg = config or load_profile(profile)
    ws = Workspace.from_env()
    init_mlflow(ws)
    flow_run_id = str(flow_run.id)
    lineage = {GIT_COMMIT_TAG: git_commit(ws.root), FLOW_RUN_ID_TAG: flow_run_id, PROFILE_TAG: cfg.profile}
    started = time.time()
    with start_stage_run("recipe", tags=lineage) as run:
        summary = RunSummary(flow_run_id, cfg.profile, run.info.run_id)
        set_summary(summary)
        try:
            log_config(cfg)
            parent = run.info.run_id
            base = base_flow(cfg, parent_run_id=parent, lineage=lineage)
            data = data_flow(cfg, base["tokenizer_dir"], parent_run_id=parent, lineage=lineage)
            sft = sft_flow(cfg, base, data, parent_run_id=parent, lineage=lineage)
            # §2.1.2–2.1.3: point-wise then pair-wise RL; the final RL policy is the release candidate.
            policy = rl_flow(cfg, base, sft, data, parent_run_id=parent, lineage=lineage)
            metrics = evaluate_flow(
                cfg, policy["model_dir"], "forge-policy", policy["version"], parent_run_id=parent, lineage=lineage
            )
            release = run_stage("promote", promote_task, "forge-policy", policy["version"], cfg.promotion)
            summary.finish("completed")
        except BaseException:
            summary.finish("failed")
            raise
        finally:
            set_summary(None)
    return {
        "flow_run_id": flow_run_id,
        "mlflow_run_id": run.info.run_id,
        "policy_version": policy["version"],
        "sft_version": sft["version"],
        "data_md5": data["data_md5"],
        "metrics": {**sft["metrics"], **policy["metrics"], **metrics},
        "release": release,
        "seconds": round(time.time() - started, 1),
        "stages": summary.data["stages"],
    }


if __name__ == "__main__":
    print(recipe())
