"""Prefect task for the agentic RL stage (abstract, §2.2; the paper's last RL stage, §2.4): the policy answers lookup
questions held out from its SFT data with the offline tools, rewarded per trajectory and per turn (§2.2.1 critic).

The questions and the environment are built in ``forge/search/`` (lookups.py, rollout.py), the update in
``forge/training/agentic.py``; this task loads the inputs, hands the environment to the trainer, logs and registers
the new ``forge-policy`` version (parent: the version it started from).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow

from forge.config import AgenticRLConfig, SFTConfig, TrainingRuntimeConfig
from forge.hashing import value_digest
from forge.stages import Checkpoint, DataMix
from forge.workspace import Workspace
from registry.tracking import (
    DATA_MD5_TAG,
    PARENT_VERSION_TAG,
    STAGE_TAG,
    StageContext,
    log_config,
    log_curve,
    metrics_logger,
)
from tasks._cache import cached_task

if TYPE_CHECKING:  # torch and transformers load inside the stage, not when a flow imports its tasks
    from forge.training.checkpoints import MetricsLogger
    from forge.training.grpo import GRPOResult

AGENTIC_MODULES = ("forge.training.agentic", "forge.search.rollout", "forge.search.lookups", "forge.training.sft",
                   "forge.data.mix")
CURVE_LABELS = {"trajectory_reward": "trajectory reward (answer correct)", "turn_reward": "turn reward (critic ±1)",
                "rejected_turn_share": "share of turns the critic rejected", "tool_calls": "tool calls per episode"}


@cached_task(name="agentic-rl", modules=AGENTIC_MODULES)
def agentic_rl_task(
    *,
    ctx: StageContext,
    cfg: AgenticRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    seed: int,
    policy: Checkpoint,
    data: DataMix,
) -> Checkpoint:
    """Agentic RL from ``policy`` on ``cfg.questions`` lookups whose heads and questions no row of ``data``'s mix
    shows (forge.search.lookups.sft_seen). Logs per step: tool calls per episode, trajectory and turn reward,
    rejected-turn share (curves too), their first/last-20% means, how many steps updated the policy; a few final
    episodes as ``episodes.json``. The version carries the SFT held-out loss, as the GRPO stages' versions do."""
    from forge.data.mix import read_heldout
    from forge.training.agentic import CURVES, updates
    from forge.training.launch import run_training
    from forge.training.sft import heldout_chat_loss
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    out = ws.models / f"agentic-rl-{value_digest(cfg, runtime, policy.model_dir, data.data_md5, seed)}"
    tags = ctx.lineage({STAGE_TAG: "agentic-rl", DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: policy.ref})
    with ctx.start_run("agentic-rl", tags) as run:
        log_config(cfg)
        stage = run_training(train_agentic_stage, runtime, out, log_metrics=metrics_logger(),
                             policy_dir=Path(policy.model_dir), cfg=cfg, mix_dir=data.mix_dir, seed=seed)
        result = stage.result
        mlflow.log_params({"questions": stage.questions, "sft_pages_excluded": stage.pages_excluded})
        for key in CURVES:
            steps, values = result.series(key)
            log_curve(f"agentic_rl_{key}", steps, values, CURVE_LABELS[key])
        mlflow.log_dict(stage.episodes, "episodes.json")
        heldout_loss = heldout_chat_loss(out, read_heldout(data.mix_dir), sft, runtime)
        # "updates": the steps that changed a weight (none when no group's rewards differ: forge/training/agentic.py)
        metrics = {"updates": float(updates(result.curve)), "steps": float(result.steps),
                   **result.window_metrics(CURVES), "sft_heldout_loss": heldout_loss,
                   "seconds": round(result.seconds, 1)}
        mlflow.log_metrics(metrics)
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags,
                                      metrics={"sft_heldout_loss": heldout_loss})
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics=metrics)


@dataclass
class AgenticStage:
    """What the agentic RL run hands back to its task (from rank 0 when launched)."""

    result: GRPOResult
    questions: int
    pages_excluded: int
    episodes: list[dict[str, Any]]  # a few of the last step's episodes, for episodes.json


def train_agentic_stage(
    *,
    policy_dir: Path,
    cfg: AgenticRLConfig,
    mix_dir: str,
    seed: int,
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    log_metrics: MetricsLogger | None = None,
) -> AgenticStage:
    """Build the offline environment and train in it: in the task's process, or on each rank of a launched stage
    (forge/training/launch.py), which builds its own search tools and the same questions from the same seed (the
    environment holds an index and a sandbox, not things to pickle)."""
    from forge.data.mix import read_mix
    from forge.search.lookups import build_lookup_qas, sft_seen
    from forge.search.rollout import SearchEnvironment
    from forge.search.tools import SearchTools
    from forge.training.agentic import train_agentic

    tools = SearchTools.load(Workspace.from_env())
    train_rows, heldout_rows = read_mix(mix_dir)
    seen = sft_seen(train_rows + heldout_rows)
    qas = build_lookup_qas(tools.graph, cfg.questions, min_hops=cfg.min_hops, max_hops=cfg.max_hops, seen=seen,
                           seed=seed)
    env = SearchEnvironment.from_config(tools, qas, cfg, seed=seed)
    result = train_agentic(policy_dir, env, cfg, runtime, out_dir, seed=seed, log_metrics=log_metrics)
    episodes = [{"question": r.trajectory.question, "gold": r.trajectory.gold_answer,
                 "final": r.trajectory.final_answer, "tool_calls": r.tool_calls, "ended": r.ended,
                 "messages": [m.model_dump(exclude_defaults=True) for m in r.trajectory.messages],
                 "verdicts": [v.model_dump() for v in r.trajectory.verdicts]} for r in env.last[:8]]
    return AgenticStage(result=result, questions=len(qas), pages_excluded=len(seen.pages), episodes=episodes)
