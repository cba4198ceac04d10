"""Prefect tasks for code (§2.3.2–2.3.3): SFT rows judged correct and time-optimal into the code pool (when
``code_sft.enabled``), the drills' SFT rows into the code pool, the tiny profile's code warm-up (SFT on those rows
before RL; docs/architecture.md says why), the on-policy RL filter (k of n rollouts per problem) and the two GRPO
stages of code RL.

The filter writes a folder under rl-data/code/ (rows + manifest, named by content digest), versions rl-data/ with
DVC (``rl-data.dvc``; apart from data/, whose md5 must not move with every policy; its md5 goes on the stage's
checkpoint) and logs pass-rate histograms. Each GRPO stage registers a ``forge-policy`` version whose
parent is the policy it started from; stage 2 draws the paper's Figure 4 (R_correctness and R_time across both
stages, a line at the boundary) and compares the two checkpoints on held-out problems."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import mlflow

from forge.config import (
    CodeJudgeConfig,
    CodeRLConfig,
    CodeRLShared,
    CodeRLStage,
    CodeSFTConfig,
    DrillsConfig,
    GenerationConfig,
    GRPOSettings,
    SFTConfig,
    SFTStageConfig,
    TrainingRuntimeConfig,
)
from forge.hashing import value_digest
from forge.stages import Base, Checkpoint, DataFile, DataMix, Pools
from forge.workspace import Workspace
from registry.tracking import (
    DATA_MD5_TAG,
    PARENT_VERSION_TAG,
    RL_DATA_MD5_TAG,
    STAGE_TAG,
    StageContext,
    log_config,
    log_curve,
    log_table,
    metrics_logger,
)
from tasks._cache import cached_task

if TYPE_CHECKING:
    from forge.data.schemas import ChatSample

logger = logging.getLogger(__name__)
CODE_MODULES = ("forge.code.data", "forge.code.judge", "forge.code.complexity",
                "forge.code.problems.drills")
CODE_RL_MODULES = (*CODE_MODULES, "forge.code.rewards", "forge.training.grpo", "forge.training.sft")
CURVES = {"reward": "mean reward", "rewards/r_correctness/mean": "R_correctness (pass rate)",
          "rewards/r_time/mean": "R_time (gated)", "rewards/r_format/mean": "R_format"}


def log_histogram(name: str, values: list[float], xlabel: str, bins: int = 10) -> str:
    """Histogram of ``values`` logged as ``plots/<name>.png``; returns the artifact path."""
    from matplotlib.figure import Figure  # no pyplot: safe from worker threads

    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot()
    ax.hist(values, bins=bins, range=(0.0, 1.0) if all(0 <= v <= 1 for v in values) else None, edgecolor="black")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title(f"{name} (n={len(values)})")
    fig.tight_layout()
    artifact = f"plots/{name}.png"
    mlflow.log_figure(fig, artifact)
    return artifact


@dataclass(frozen=True)
class JudgeEndpoint:
    """Connects to the complexity judge model (the paper's instruct judge) where it is called: picklable, so each
    rank of a launched code RL stage connects its own client (forge/code/rewards.py)."""

    url: str
    model: str

    def __call__(self):
        from forge.generation import endpoint_backend

        return endpoint_backend(self.url, self.model)


def _judge_endpoint(judge: CodeJudgeConfig) -> JudgeEndpoint | None:
    return JudgeEndpoint(judge.complexity_model_url, judge.complexity_model) if judge.complexity_model_url else None


def _complexity_judge(judge: CodeJudgeConfig):
    """The judge model's backend when the profile names an endpoint, else None (the empirical judge)."""
    endpoint = _judge_endpoint(judge)
    return endpoint() if endpoint else None


def grpo_prompts(rows_file: Path, settings: GRPOSettings, tokenizer) -> list[dict]:
    """What a code RL stage's GRPO trains on: the filter's kept rows in ``rows_file`` (the ``settings.max_prompts``
    most informative, forge.code.data.most_informative) as one-turn chats, those longer than
    ``settings.max_prompt_length`` tokens left out (TRL cannot cut a prompt)."""
    from forge.code.data import RLRow, most_informative
    from forge.data.jsonl import read_jsonl

    kept = most_informative(read_jsonl(rows_file, RLRow).rows, settings.max_prompts)
    chats = [([{"role": "user", "content": r.prompt}], r.problem_id) for r in kept]
    return [{"prompt": chat, "problem_id": pid} for chat, pid in chats
            if len(tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True))
            <= settings.max_prompt_length]


def _write_version(name: str, rows: list[dict], manifest: dict, under: Path | None = None) -> str:
    from forge.atomic import atomic_open
    from forge.data.jsonl import write_jsonl

    digest = value_digest(rows, length=12)
    out = (under or Workspace.from_env().data) / "code" / name / f"v-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "rows.jsonl", rows)
    with atomic_open(out / "manifest.json") as f:
        json.dump(manifest | {"digest": digest, "rows": len(rows)}, f, indent=2, sort_keys=True)
    return str(out)


@cached_task(name="code-sft-data", modules=(*CODE_MODULES, "forge.data.jsonl"))
def code_sft_task(
    *, ctx: StageContext, cfg: CodeSFTConfig, judge: CodeJudgeConfig, generation: GenerationConfig, seed: int,
    base: Base, pools: Pools,
) -> Pools:
    """§2.3.2 SFT data: ``cfg.n_candidates`` answers per problem from the teacher endpoint (else the base model),
    judged in the sandbox; those that pass every test and are time-optimal join the code pool (data/pools/, which the
    mix's DVC version holds), each with its problem in ``source`` (``code-sft:<problem id>``)."""
    from forge.code.data import sample_sft
    from forge.code.problems import load_problems
    from forge.generation import teacher_or_local

    problems = load_problems(cfg.sources, limit=cfg.limit)
    with ctx.start_run("code-sft-data", {STAGE_TAG: "data/code-sft"}) as run:
        with teacher_or_local(generation, base.model_dir) as backend:
            result = sample_sft(backend, problems, cfg.n_candidates, cfg.temperature, cfg.max_new_tokens,
                                judge_backend=_complexity_judge(judge), seed=seed)
        rates = result.pass_rates()
        log_histogram("code_sft_candidate_pass_rate", rates, "pass rate of a candidate")
        kept_per_problem = {p.id: 0 for p in problems}
        for s in result.samples:
            kept_per_problem[s.source.split(":", 1)[1]] += 1
        metrics = {
            "code_sft_problems": float(len(problems)),
            "code_sft_candidates": float(len(rates)),
            "code_sft_candidates_passing": float(sum(r == 1.0 for r in rates)),
            "code_sft_kept": float(len(result.samples)),
            "code_sft_problems_covered": float(sum(1 for v in kept_per_problem.values() if v)),
        }
        mlflow.log_metrics(metrics)
        log_table([{"problem_id": k, "kept": v} for k, v in kept_per_problem.items()], "code_sft_kept.json")
    logger.info("code SFT data: %d of %d candidates pass every test, %d kept (time-optimal, deduplicated) for %d of "
                "%d problems", metrics["code_sft_candidates_passing"], len(rates), len(result.samples),
                metrics["code_sft_problems_covered"], len(problems))
    return _with_code_rows(pools, result.samples, "code+judged", metrics, run_id=run.info.run_id)


@cached_task(name="code-drills", modules=("forge.code.problems.drills", "forge.data.jsonl"))
def code_drills_task(*, cfg: DrillsConfig, seed: int, pools: Pools) -> Pools:
    """The drills' SFT rows (a weak teacher's answers: linear, quadratic or wrong) added to the code pool. Their
    counts are the result's metrics (``forge status``; the mix's manifest counts the rows by source): no MLflow
    run of its own, which cost this 1.5 s step 3% of its wall (bench/recipe_profile.py)."""
    from forge.code.problems.drills import drill_sft_rows

    rows, kinds = drill_sft_rows(cfg.sft_per_op, (cfg.teacher_fast, cfg.teacher_slow, cfg.teacher_broken), seed)
    metrics = {"drill_rows": float(len(rows)), **{f"drill_rows_{k}": float(v) for k, v in sorted(kinds.items())}}
    return _with_code_rows(pools, rows, "code+drills", metrics)


def _with_code_rows(pools: Pools, rows: list[ChatSample], name: str, metrics: dict[str, float],
                    run_id: str | None = None) -> Pools:
    """``pools`` with ``rows`` after the code pool's own, written to ``<pools>/<name>.jsonl`` (the input pool file is
    left as it was: a cached earlier stage still points at it)."""
    from forge.data.jsonl import read_jsonl, write_jsonl
    from forge.data.schemas import ChatSample
    from forge.hashing import files_digest

    code = read_jsonl(pools.files["code"], ChatSample).rows
    out = Workspace.from_env().pools / f"{name}.jsonl"
    write_jsonl(out, [r.model_dump(mode="json") for r in code + rows])
    files = {**pools.files, "code": str(out)}
    return Pools(files=files, digest=files_digest(files), review=pools.review, metrics=metrics, run_id=run_id)


WARMUP_HELDOUT = 20  # every 20th drill row is the warm-up's held-out set


@cached_task(name="code-warmup", modules=CODE_RL_MODULES)
def code_warmup_task(
    *,
    ctx: StageContext,
    stage: SFTStageConfig,
    drills: DrillsConfig,
    replay: float,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    seed: int,
    policy: Checkpoint,
    data: DataMix,
) -> Checkpoint:
    """SFT on the drills' weak-teacher rows (the ones already in the code pool) before code RL, tiny scale only: a
    small policy that saw each drill once in the mix writes no program, so stage 1's filter would keep nothing
    (docs/architecture.md). A ``replay`` share of its rows are the SFT mix's own training rows, so the extra epochs
    on the drills do not overwrite the rest of SFT. Registers a ``forge-policy`` version (parent: ``policy``) with
    the mix's held-out loss, so the gate sees what the warm-up cost the general SFT. It takes only the warm-up's own
    settings: a change to the RL stages' settings does not redo it."""
    from forge.code.problems.drills import drill_sft_rows
    from forge.data.mix import read_mix
    from forge.training.launch import run_training
    from forge.training.sft import heldout_chat_loss, run_sft_stage
    from registry.models import register_checkpoint

    rows, kinds = drill_sft_rows(drills.sft_per_op, (drills.teacher_fast, drills.teacher_slow, drills.teacher_broken),
                                 seed)
    train = [r for i, r in enumerate(rows) if i % WARMUP_HELDOUT]
    held_out = rows[::WARMUP_HELDOUT]
    mix_train, mix_heldout = read_mix(data.mix_dir)
    replayed = replay_rows(mix_train, len(train), replay, seed)
    train = train + replayed  # the trainer shuffles (and packs) them together
    ws = Workspace.from_env()
    digest = value_digest(stage, drills, replay, sft, runtime, seed, policy.model_dir, data.data_md5)
    out = ws.models / f"code-warmup-{digest}"
    tags = ctx.lineage({STAGE_TAG: "code-warmup", DATA_MD5_TAG: data.data_md5, PARENT_VERSION_TAG: policy.ref})
    with ctx.start_run("code-warmup", tags) as run:
        log_config(stage)
        mlflow.log_params({"rows": len(train), "rows_replayed": len(replayed),
                           **{f"rows_{k}": v for k, v in sorted(kinds.items())}})
        result = run_training(run_sft_stage, runtime, out, log_metrics=metrics_logger(),
                              model_dir=Path(policy.model_dir), train_rows=train, eval_rows=held_out, stage=stage, sft=sft)
        log_curve("code_warmup_train_loss", [p[0] for p in result.train_curve], [p[1] for p in result.train_curve],
                  "train loss")
        metrics = {"drills_loss_before": result.eval_loss_before, "drills_loss_after": result.eval_loss_after,
                   "sft_heldout_loss": heldout_chat_loss(out, mix_heldout, sft, runtime)}
        mlflow.log_metrics(metrics)
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags,
                                      metrics={"sft_heldout_loss": metrics["sft_heldout_loss"]})
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics=metrics)


def replay_rows(mix_train: list[ChatSample], drill_rows: int, share: float, seed: int) -> list[ChatSample]:
    """SFT-mix rows to train beside ``drill_rows`` drill rows so that they are ``share`` of the warm-up's rows: a
    seeded sample without repeats (all of the mix's rows when it holds fewer)."""
    wanted = round(drill_rows * share / (1 - share)) if share else 0
    return random.Random(f"{seed}:code-warmup-replay").sample(mix_train, min(wanted, len(mix_train)))


def shared_config(cfg: CodeRLConfig) -> CodeRLShared:
    """What both code RL stages read of ``cfg`` (the filters take this: no GRPO setting changes what they keep)."""
    return CodeRLShared(**cfg.model_dump(include=set(CodeRLShared.model_fields)))


def stage_config(cfg: CodeRLConfig, stage: int) -> CodeRLStage:
    """What code RL stage ``stage``'s training reads of ``cfg``: the shared settings and that stage's."""
    return CodeRLStage(**shared_config(cfg).model_dump(), stage=stage, settings=cfg.stage1 if stage == 1 else cfg.stage2)


def rl_problems(cfg: CodeRLShared, split: str = "rl"):
    """The problems code RL draws from (``split`` "eval": the drills held out for the stage-1/stage-2 check)."""
    from forge.code.problems import load_problems
    from forge.code.problems.drills import drill_problems

    out = []
    for source in cfg.sources:
        if source == "drills":
            per_op = cfg.drills.rl_per_op if split == "rl" else cfg.drills.eval_per_op
            items = drill_problems(split, per_op)
        elif split == "rl":
            items = load_problems([source])
        else:
            continue  # held-out checks run on the drills only: the other sources' problems are the eval suites
        out += items[: cfg.limit] if cfg.limit else items
    return out


@cached_task(name="code-rl-filter", modules=CODE_MODULES)
def code_rl_filter_task(
    *, ctx: StageContext, cfg: CodeRLShared, judge: CodeJudgeConfig, generation: GenerationConfig, seed: int,
    stage: int, policy: Checkpoint,
) -> DataFile:
    """n rollouts per problem from ``policy``; keep problems whose k (solved, or solved inside the bound in stage
    2) is in range (§2.3.2). The kept rows are versioned under rl-data/code/rl-stage<N>/."""
    from forge.code.data import filter_rl
    from forge.data.versioning import ensure_dvc, version_data
    from forge.generation import local_backend

    problems = rl_problems(cfg)
    ws = Workspace.from_env()
    with ctx.start_run(f"code-rl-filter-stage{stage}", {STAGE_TAG: f"data/code-rl-stage{stage}"}) as run:
        with local_backend(generation, policy.model_dir) as backend:
            rows = filter_rl(backend, problems, stage, cfg.num_rollouts, (cfg.keep_k_min, cfg.keep_k_max),
                             temperature=cfg.filter_temperature, max_new_tokens=cfg.max_new_tokens, seed=seed,
                             judge_backend=_complexity_judge(judge))
        log_histogram(f"code_rl_stage{stage}_problem_pass_rate", [r.k / r.n for r in rows], "k / n per problem")
        log_histogram(f"code_rl_stage{stage}_rollout_pass_rate", [x for r in rows for x in r.pass_rates],
                      "pass rate of a rollout")
        kept = [r for r in rows if r.kept]
        metrics = {f"code_rl_stage{stage}_problems": float(len(rows)), f"code_rl_stage{stage}_kept": float(len(kept)),
                   f"code_rl_stage{stage}_mean_k": sum(r.k for r in rows) / max(1, len(rows))}
        mlflow.log_metrics(metrics)
        path = _write_version(f"rl-stage{stage}", [r.as_dict() for r in kept],
                              {"config": cfg.model_dump(mode="json"), "policy": policy.ref, "metrics": metrics},
                              under=ws.rl_data)
        log_table([{k: v for k, v in r.as_dict().items() if k != "prompt"} for r in rows],
                  f"code_rl_stage{stage}.json")
        ensure_dvc(ws.root, ws.dvc_remote_url)  # the kept problems are versioned in rl-data/ (rl-data.dvc)
        md5 = version_data(ws.root, ws.rl_data.name)
        mlflow.set_tag(RL_DATA_MD5_TAG, md5)
    return DataFile(path=path, run_id=run.info.run_id, metrics=metrics, counts={"rows": len(kept)}, data_md5=md5)


def _figure4(curves: list[list[dict]], artifact: str) -> None:
    """R_correctness and R_time per step across the code RL stages, a dashed line at each boundary (Figure 4)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    ax = fig.add_subplot()
    offset, xs, series = 0, [], {"R_correctness": [], "R_time": []}
    for i, curve in enumerate(curves):
        if i:
            ax.axvline(offset + 0.5, color="grey", linestyle="--")
            ax.text(offset + 1, 0.02, f"stage {i + 1}", transform=ax.get_xaxis_transform(), color="grey")
        for record in curve:
            xs.append(offset + record["step"])
            series["R_correctness"].append(record.get("rewards/r_correctness/mean", float("nan")))
            series["R_time"].append(record.get("rewards/r_time/mean", float("nan")))
        offset += max((r["step"] for r in curve), default=0)
    for name, values in series.items():
        ax.plot(xs, values, label=name)
    ax.set_xlabel("code RL step")
    ax.set_ylabel("mean reward part")
    ax.set_title("Code RL: correctness, then the gated time reward (paper Figure 4)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    mlflow.log_figure(fig, artifact)


CURVE_FILE = "code_rl_curve.json"


def _short(key: str) -> str:
    """TRL's per-function log key without its decoration: ``rewards/r_time/mean_last20`` → ``r_time_last20``."""
    return key.replace("rewards/", "").replace("/mean", "")


@cached_task(name="code-grpo", modules=CODE_RL_MODULES)
def code_grpo_task(
    *,
    ctx: StageContext,
    cfg: CodeRLStage,
    judge: CodeJudgeConfig,
    sft: SFTConfig,
    runtime: TrainingRuntimeConfig,
    generation: GenerationConfig,
    seed: int,
    policy: Checkpoint,
    problems: DataFile,
    data: DataMix,
) -> Checkpoint:
    """Code RL stage ``cfg.stage`` (§2.3.3) on the filter's kept problems: GRPO with R_format + pass rate, plus the gated
    R_time in stage 2, judged in the sandbox (the class by ``judge``'s model when it names one). Registers a ``forge-policy`` version (parent: ``policy``). Stage 2
    also draws Figure 4 from both stages' curves and checks both checkpoints on held-out problems."""
    from transformers import AutoTokenizer

    from forge.code.data import PolicyCheck, compare_checks, judged_answers
    from forge.code.rewards import CodeRewards
    from forge.data.mix import read_heldout
    from forge.generation import local_backend
    from forge.training.grpo import train_grpo
    from forge.training.sft import heldout_chat_loss
    from registry.models import register_checkpoint

    ws = Workspace.from_env()
    stage, settings = cfg.stage, cfg.settings
    tokenizer = AutoTokenizer.from_pretrained(policy.model_dir)
    table = {p.id: p for p in rl_problems(cfg)}
    prompts = grpo_prompts(Path(problems.path) / "rows.jsonl", settings, tokenizer)
    if not prompts:  # nothing in range: training would see only zero advantages
        logger.warning("code RL stage %d: the on-policy filter kept no problem (%s): the policy goes on unchanged; "
                       "widen code_rl.keep_k_min/keep_k_max or add problems (code_rl.sources)", stage, problems.path)
        return policy.model_copy(update={"metrics": {f"code_rl_stage{stage}_trained": 0.0}})  # not its parent's
    digest = value_digest(cfg, judge, runtime, generation, policy.model_dir, problems.path, data.data_md5, seed)
    out = ws.models / f"code-rl-stage{stage}-{digest}"
    name = f"code-rl-stage{stage}"
    # Lineage: the SFT data's version, and the rl-data version holding this stage's problems.
    tags = ctx.lineage({STAGE_TAG: name, DATA_MD5_TAG: data.data_md5, RL_DATA_MD5_TAG: problems.data_md5 or "",
                        PARENT_VERSION_TAG: policy.ref})
    with ctx.start_run(name, tags) as run:
        log_config(cfg)
        mlflow.log_params({"prompts": len(prompts), "problems": len({p["problem_id"] for p in prompts})})
        rewards = CodeRewards(table, cfg.format_weight, cfg.time_weight, judge_connect=_judge_endpoint(judge))
        result = train_grpo(runtime, out, log_metrics=metrics_logger(), policy_dir=Path(policy.model_dir),
                            prompts=prompts, reward_funcs=rewards.funcs(), settings=settings, seed=seed, stage=name,
                            generation=generation, reward_weights=CodeRewards.weights(stage))
        (out / CURVE_FILE).write_text(json.dumps(result.curve))
        for key, label in CURVES.items():
            steps, values = result.series(key)
            if values:
                log_curve(f"{name}_{_short(key)}", steps, values, label)
        metrics = {_short(k): v for k, v in result.window_metrics(CURVES).items()}
        if stage == 2:
            before = Path(policy.model_dir) / CURVE_FILE  # absent when stage 1 kept no problem
            curves = [json.loads(before.read_text()) if before.exists() else [], result.curve]
            _figure4(curves, "plots/figure4_code_rl.png")
            held_out = rl_problems(cfg, "eval")
            if held_out:
                verdicts, complexity_judge = {}, _complexity_judge(judge)
                for label, model_dir in {"before": policy.model_dir, "after": str(out)}.items():
                    with local_backend(generation, model_dir) as backend:
                        verdicts[label] = PolicyCheck.of(judged_answers(
                            backend, held_out, cfg.check_samples, generation.temperature, cfg.max_new_tokens, seed,
                            complexity_judge))
                    metrics |= verdicts[label].metrics(f"check_{label}")
                metrics = compare_checks(verdicts["before"], verdicts["after"]) | metrics  # first: `forge run` shows a stage's first metrics
                logger.info("code RL stage 2 check (%d held-out problems x %d): optimal share %.2f -> %.2f "
                            "(%+.2f +- %.2f), solved %.2f -> %.2f (%+.2f +- %.2f), optimal answers %.2f -> %.2f of "
                            "the samples", len(held_out), cfg.check_samples,
                            verdicts["before"].optimal_share, verdicts["after"].optimal_share,
                            metrics["check_optimal_rise"], metrics["check_optimal_rise_se"],
                            verdicts["before"].solved, verdicts["after"].solved,
                            metrics["check_solved_change"], metrics["check_solved_change_se"],
                            verdicts["before"].optimal_answers, verdicts["after"].optimal_answers)
        metrics["sft_heldout_loss"] = heldout_chat_loss(out, read_heldout(data.mix_dir), sft, runtime)
        mlflow.log_metrics(metrics)
        version = register_checkpoint(out, "forge-policy", run_id=run.info.run_id, tags=tags,
                                      metrics={"sft_heldout_loss": metrics["sft_heldout_loss"]})
    return Checkpoint(model_dir=str(out), model_name="forge-policy", version=version, run_id=run.info.run_id,
                      metrics=metrics)
