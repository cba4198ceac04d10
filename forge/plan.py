"""What a profile will run, stage by stage, without running anything: ``forge plan --profile nanbeige-4.1-3b``.

One row per recipe stage, in the recipe's order (flows/recipe.py): how its training runs (in the task's process or
under ``accelerate launch``), on what and in which precision, what generates its samples, what it reads. Each entry
comes from the settings and the functions the stages themselves use (``forge.training.launch.is_launched``,
``forge.generation.backend_choice``), and the rows follow the flows' own conditions (code RL, deep search and
refinement on or off), and each row is named as the run names its stage: tests/flows/test_recipe.py checks that
the plan of the CI profile lists exactly the stages its run records. ``cpu_only`` lists the choices in a row that
only make sense on a machine without GPUs (fp32 training, HF ``generate`` rollouts, a base built from ``corpora/``):
the GPU profile must have none (tests/test_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forge.config import RecipeConfig
from forge.generation import backend_choice
from forge.training.launch import is_launched

# The stages that go through forge.training.launch.run_training (tasks/training.py, tasks/rl.py, tasks/code.py,
# tasks/agentic.py): all but the tiny profile's pre-training.
LAUNCHABLE = {"sft", "rm-pointwise", "rm-pairwise", "code-warmup", "grpo", "agentic-warmup", "agentic"}
# The stages whose trainers read runtime.fused_lm_head (forge/training/sft.py, forge/training/grpo.py).
_FUSED_HEAD = {"sft", "grpo", "code-warmup", "agentic-warmup"}
FUSED_HEAD_FLAG = "logits loss instead of TRL's fused LM head (runtime.fused_lm_head false: a CPU speed-up)"


@dataclass(frozen=True)
class StagePlan:
    stage: str
    launcher: str
    compute: str
    backend: str
    data: str
    cpu_only: list[str] = field(default_factory=list)


def _launcher(cfg: RecipeConfig, kind: str) -> str:
    rt = cfg.runtime
    if kind not in LAUNCHABLE:
        return "task process" + (" (pre-training is never launched: docs/scale.md)" if is_launched(rt) else "")
    if not is_launched(rt):
        return "task process"
    launcher = f"accelerate launch ×{rt.num_processes}"
    if rt.accelerate_config and kind == "agentic":  # its own loop: data parallel over whole replicas
        return f"{launcher} (whole replicas: the agentic loop does not shard)"
    return launcher + (f" ({rt.accelerate_config})" if rt.accelerate_config else "")


def _training(cfg: RecipeConfig) -> tuple[str, list[str]]:
    """Where a training stage computes and in which precision, with the CPU-only choices among them."""
    rt = cfg.runtime
    flags = []
    if not rt.bf16:
        flags.append("fp32 training (runtime.bf16 off)")
    if not rt.fused_lm_head:  # read by the TRL trainers only (SFT, GRPO), see _FUSED_HEAD
        flags.append(FUSED_HEAD_FLAG)
    if rt.threads:
        flags.append(f"runtime.threads {rt.threads} (CPU threads)")
    precision = "bf16" if rt.bf16 else "fp32"
    extra = ", grad. checkpointing" if rt.gradient_checkpointing else ""
    return f"GPU if any, {precision}{extra}", flags


def _backend(cfg: RecipeConfig, use: str = "local") -> tuple[str, list[str]]:
    name, settings = backend_choice(cfg.generation, use)
    flags = ["HF generate for sampling (generation.backend transformers)"] if name == "transformers" else []
    return f"{name} {settings}".strip(), flags


def recipe_plan(cfg: RecipeConfig) -> list[StagePlan]:
    """Every stage a run of ``cfg`` would start, in order (the cached ones included)."""
    compute, train_flags = _training(cfg)
    local, local_flags = _backend(cfg)
    teacher, teacher_flags = _backend(cfg, "teacher")
    rows: list[StagePlan] = []

    def add(stage: str, kind: str | None, backend: str = "—", data: str = "—", flags: list[str] | None = None,
            where: str | None = None) -> None:
        launcher = _launcher(cfg, kind) if kind else "task process"
        trained = [f for f in train_flags if f != FUSED_HEAD_FLAG or kind in _FUSED_HEAD] if kind else []
        rows.append(StagePlan(stage, launcher, where or (compute if kind else "CPU"), backend, data,
                              list(flags or []) + trained))

    b = cfg.base
    if b.source == "build":
        add("tokenizer", None, data=f"corpora/ ({b.tokenizer.max_training_chars:,} chars)")
        add("pretrain", "pretrain", data=f"corpora/ ({b.max_corpus_chars:,} chars)",
            flags=[f"a {b.num_layers}-layer base built from corpora/ (base.source build)"])
    else:
        fetch = "download allowed" if b.allow_hub_download else "no download"
        add("base", None, data=b.local_path if b.source == "local" else f"{b.hub_id} (HF cache, {fetch})", where="—")
    add("pools", None, data=f"corpora/ (≤ {cfg.pools.max_rows_per_source:,} rows per source)")
    if cfg.deep_search.enabled:
        ds = cfg.deep_search
        for i in range(ds.num_shards):
            add(f"search-shard-{i + 1}-of-{ds.num_shards}", None,
                data=f"a shard of {ds.num_questions} graph-walk questions, agents {', '.join(ds.agents)}")
        add("search-merge", None, data="the shards' trajectories into deep_search / tool_use")
    if cfg.code_sft.enabled:
        c = cfg.code_sft
        add("code-sft-data", None, backend=teacher, flags=teacher_flags, where="generation",
            data=f"{', '.join(c.sources)}: {c.n_candidates} candidates a problem, judged (correct, time-optimal)")
    if cfg.code_rl.enabled and cfg.code_rl.drills.sft_per_op:
        add("code-drills", None, data="generated drills (forge/code/problems/drills.py)")
    add("mix", None, data=f"{cfg.mix.name}: {cfg.mix.total_tokens:,} tokens")
    if cfg.refinement.enabled:
        add("solution-refinement", None, backend=teacher, flags=teacher_flags, where="generation",
            data=f"{cfg.refinement.items} mix answers, ≤ {cfg.sft.solution_refinement_iterations} rounds")
        add("cot-reconstruction", None, backend=teacher, flags=teacher_flags, where="generation",
            data="then the mix with the refined rows in place")
    add("dvc", None, data="data/ (md5 in data.dvc)")
    for i, stage in enumerate(cfg.sft.curriculum):
        last = i == len(cfg.sft.curriculum) - 1
        add(f"sft-{i + 1}-{stage.name}", "sft",
            data=f"mix, {stage.max_length:,}-token rows" + ("; registers forge-policy" if last else ""))
    add("rm-pointwise", "rm-pointwise", backend=local, flags=local_flags, data="HH-RLHF + forge pairs")
    add("grpo-pointwise", "grpo", *_grpo_row(cfg, cfg.pointwise_rl.grpo))
    add("rm-pairwise", "rm-pairwise", backend=f"strong: {teacher}; weak: {local}",
        flags=sorted(set(teacher_flags + local_flags)), data=f"{cfg.pairwise_rl.pair_prompts} mix prompts")
    add("grpo-pairwise", "grpo", *_grpo_row(cfg, cfg.pairwise_rl.grpo))
    if cfg.code_rl.enabled:
        if cfg.code_rl.warmup:
            add("code-warmup", "code-warmup", data="drills' SFT rows")
        for n in (1, 2):
            add(f"code-rl-filter-{n}", None, backend=local, flags=local_flags, where="generation + sandbox",
                data=f"{cfg.code_rl.num_rollouts} rollouts per problem")
            add(f"code-rl-stage{n}", "grpo", *_grpo_row(cfg, getattr(cfg.code_rl, f"stage{n}")))
    a = cfg.agentic_rl
    if a.warmup:
        add("agentic-warmup", "agentic-warmup", data=f"{a.warmup_questions} scripted link solutions, other heads")
    add("agentic-rl", "agentic", backend="the policy itself (forge/training/agentic.py)",
        data=f"{a.questions} held-out {a.task} questions, ≤ {a.max_tool_calls} tool calls")
    for suite in (name for name in type(cfg.eval).model_fields if name != "heldout_rows"):  # flows/evaluate.py
        add(f"eval-{suite}", None, backend=local, flags=local_flags, where="generation" + (
            " + sandbox" if suite in ("humaneval", "code") else ""), data=f"eval.{suite}")
    add("eval-report", None, data="the suites' runs")
    add("promote", None, data="the MLflow registry")
    return rows


def _grpo_row(cfg: RecipeConfig, settings) -> tuple[str, str, list[str]]:
    """A GRPO stage's backend, data and CPU-only choices."""
    data = f"≤ {settings.max_prompts} prompts × {settings.num_generations} rollouts"
    if settings.use_vllm:
        v = cfg.generation.vllm
        where = f"server on GPU {','.join(map(str, v.server_gpus))}" if v.trl_mode == "server" else v.trl_mode
        backend = f"TRL + vLLM ({where}, tp {v.tensor_parallel_size}, {v.gpu_memory_utilization:.0%} memory)"
        return backend, data, []
    return "TRL, HF generate", data, ["GRPO rollouts by HF generate (grpo.use_vllm false)"]
