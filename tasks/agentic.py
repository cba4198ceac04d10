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


# What picks the warm-up's questions and trains it: a change to the other (RL) settings does not redo the warm-up.
WARMUP_FIELDS = ("task", "link_relations", "warmup", "warmup_questions", "warmup_mix", "questions", "min_hops",
                 "max_hops")
WARMUP_HELDOUT = 20  # every 20th scripted solution is the warm-up's held-out set


def warmup_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """The warm-up's cache key: its inputs with the agentic section narrowed to :data:`WARMUP_FIELDS`."""
    return {**inputs, "cfg": inputs["cfg"].model_dump(mode="json", include=set(WARMUP_FIELDS))}


@cached_task(name="agentic-warmup", modules=AGENTIC_MODULES, key_view=warmup_inputs)
def agentic_warmup_task(
    *,
    ctx: StageContext,
    cfg: AgenticRLConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    seed: int,
    policy: Checkpoint,
    data: DataMix,
) -> Checkpoint:
    """SFT on :class:`forge.search.lookups.LinkAgent`'s solutions of ``cfg.warmup_questions`` link questions before
    agentic RL, tiny scale only: the policy SFT and code RL leave writes no tool call, so RL would have no reward
    to follow (README, "Agentic RL"). Their heads are none of RL's questions' (forge.search.lookups.warmup_questions).
    Registers a ``forge-policy`` version (parent: ``policy``) with the mix's held-out loss."""
    from forge.data.mix import read_heldout, read_mix
    from forge.search.lookups import LinkAgent, sft_seen, task_questions, warmup_questions
    from forge.search.tools import SearchTools
    from forge.training.launch import run_training
    from forge.training.sft import heldout_chat_loss, run_sft_stage
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    tools = SearchTools.load(ws)
    train_rows, heldout_rows = read_mix(data.mix_dir)
    rl_qas = task_questions(tools.graph, cfg, sft_seen(train_rows + heldout_rows), seed)
    qas = warmup_questions(tools.graph, cfg, rl_qas, seed)
    rows = [LinkAgent().run(qa, tools).to_chat_sample() for qa in qas]
    train = [r for i, r in enumerate(rows) if i % WARMUP_HELDOUT]
    held_out = rows[::WARMUP_HELDOUT]
    digest = value_digest(warmup_inputs({"cfg": cfg}), sft, runtime, seed, policy.model_dir, data.data_md5)
    out = ws.models / f"agentic-warmup-{digest}"
    tags = ctx.lineage({STAGE_TAG: "agentic-warmup", DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: policy.ref})
    with ctx.start_run("agentic-warmup", tags) as run:
        log_config(cfg.warmup)
        mlflow.log_params({"rows": len(train), "task": cfg.task, "link_relations": cfg.link_relations})
        result = run_training(run_sft_stage, runtime, out, log_metrics=metrics_logger(),
                              model_dir=Path(policy.model_dir), train_rows=train, eval_rows=held_out,
                              stage=cfg.warmup, sft=sft)
        log_curve("agentic_warmup_train_loss", [p[0] for p in result.train_curve],
                  [p[1] for p in result.train_curve], "train loss")
        metrics = {"links_loss_before": result.eval_loss_before, "links_loss_after": result.eval_loss_after,
                   "sft_heldout_loss": heldout_chat_loss(out, read_heldout(data.mix_dir), sft, runtime)}
        mlflow.log_metrics(metrics)
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags,
                                      metrics={"sft_heldout_loss": metrics["sft_heldout_loss"]})
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics=metrics)


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
    """Agentic RL from ``policy`` on ``cfg.questions`` questions (``cfg.task``) whose heads and questions no row of
    ``data``'s mix shows (forge.search.lookups.sft_seen). Logs per step: tool calls per episode, trajectory and turn
    reward, rejected-turn share (curves too), their first/last-20% means, how many steps updated the policy; with
    ``cfg.check_questions``, the share of held-out questions the start and the trained policy answer (one sampled
    episode each, ``check_success_before`` / ``_after`` / ``_change`` ± ``_se``, the relations answered at all, and
    per relation as ``check_by_relation.json`` and its plot); a few final episodes as ``episodes.json``. The version
    carries the SFT held-out loss, as the GRPO stages' versions do."""
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
        if stage.check_by_relation:
            mlflow.log_dict(stage.check_by_relation, "check_by_relation.json")
            mlflow.log_figure(plot_check_by_relation(stage.check_by_relation), CHECK_PLOT)
        heldout_loss = heldout_chat_loss(out, read_heldout(data.mix_dir), sft, runtime)
        # "updates": the steps that changed a weight (none when no group's rewards differ: forge/training/agentic.py)
        metrics = {"updates": float(updates(result.curve)), "steps": float(result.steps),
                   **result.window_metrics(CURVES), **stage.check, "sft_heldout_loss": heldout_loss,
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
    check: dict[str, float]  # the held-out check (success before / after and its change), when there is one
    check_by_relation: dict[str, dict[str, int]]  # the check per relation asked: asked, answered before / after


def success_change(table: dict[str, dict[str, int]]) -> dict[str, float]:
    """The held-out check as metrics, from its table per relation (:func:`success_by_relation`): each checkpoint's
    share answered and the change, with the standard error of a difference of two independent shares
    (forge.code.data.share_se); and how many of the relations asked each answers at least once
    (``check_relations_answered_*``): a policy that follows one link whatever the question names can rise in share
    while it falls here (docs/architecture.md, "Agentic RL")."""
    from forge.code.data import share_se

    n = sum(row["asked"] for row in table.values())
    b, a = (sum(row[key] for row in table.values()) / n for key in ("before", "after"))
    return {"check_success_before": b, "check_success_after": a, "check_success_change": a - b,
            "check_success_change_se": (share_se(b, n) ** 2 + share_se(a, n) ** 2) ** 0.5,
            "check_questions": float(n), "check_relations": float(len(table)),
            "check_relations_answered_before": float(sum(row["before"] > 0 for row in table.values())),
            "check_relations_answered_after": float(sum(row["after"] > 0 for row in table.values()))}


CHECK_PLOT = "plots/check_by_relation.png"


def plot_check_by_relation(table: dict[str, dict[str, int]]) -> Any:
    """The held-out check per relation as a picture: the share of each relation's questions the start and the trained
    policy answered, side by side, most asked relation on top (a collapse onto one link reads at a glance)."""
    from matplotlib.figure import Figure  # no pyplot: safe from worker threads

    names = list(table)[::-1]
    fig = Figure(figsize=(9, 0.45 * len(names) + 1.4), dpi=100)
    ax = fig.add_subplot()
    ys = range(len(names))
    for offset, key, label in ((0.2, "before", "start"), (-0.2, "after", "after RL")):
        ax.barh([y + offset for y in ys], [table[n][key] / table[n]["asked"] for n in names], height=0.38,
                label=label)
    ax.set_yticks(list(ys), [f"{n} ({table[n]['asked']})" for n in names], fontsize=8)
    ax.set_xlim(0, 1.3)  # room right of the bars (shares end at 1) for the legend
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1])
    ax.set_xlabel("share of the relation's held-out questions answered")
    ax.set_title("agentic RL: held-out check per relation (questions asked)")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def success_by_relation(relations: list[str], before: list[bool], after: list[bool]) -> dict[str, dict[str, int]]:
    """Per relation asked: questions, and how many the start and the trained policy answered (the check's table)."""
    table: dict[str, dict[str, int]] = {}
    for r, b, a in zip(relations, before, after, strict=True):
        row = table.setdefault(r, {"asked": 0, "before": 0, "after": 0})
        row["asked"], row["before"], row["after"] = row["asked"] + 1, row["before"] + b, row["after"] + a
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["asked"]))


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
    from forge.search.lookups import check_questions, sft_seen, task_questions
    from forge.search.rollout import SearchEnvironment
    from forge.search.tools import SearchTools
    from forge.training.agentic import success_check, train_agentic
    from forge.training.launch import is_main_process

    tools = SearchTools.load(Workspace.from_env())
    train_rows, heldout_rows = read_mix(mix_dir)
    seen = sft_seen(train_rows + heldout_rows)
    qas = task_questions(tools.graph, cfg, seen, seed)
    env = SearchEnvironment.from_config(tools, qas, cfg, seed=seed)
    result = train_agentic(policy_dir, env, cfg, runtime, out_dir, seed=seed, log_metrics=log_metrics)
    check: dict[str, float] = {}
    by_relation: dict[str, dict[str, int]] = {}
    if cfg.check_questions and is_main_process():
        held_out = check_questions(tools.graph, cfg, qas, seed)
        relations = [qa.walk["hops"][0]["label"] for qa in held_out]
        before, after = (success_check(d, env, held_out, cfg, runtime, seed) for d in (policy_dir, out_dir))
        by_relation = success_by_relation(relations, before, after)
        check = success_change(by_relation)
    episodes = [{"question": r.trajectory.question, "gold": r.trajectory.gold_answer,
                 "final": r.trajectory.final_answer, "tool_calls": r.tool_calls, "ended": r.ended,
                 "messages": [m.model_dump(exclude_defaults=True) for m in r.trajectory.messages],
                 "verdicts": [v.model_dump() for v in r.trajectory.verdicts]} for r in env.last[:8]]
    return AgenticStage(result=result, questions=len(qas), pages_excluded=len(seen.pages), episodes=episodes,
                        check=check, check_by_relation=by_relation)
