"""Prefect tasks for code data (§2.3.2): SFT samples judged correct and time-optimal, RL problems filtered by
k of n rollouts. Each writes a versioned folder under data/code/ (rows + manifest, named by content digest) and
logs pass-rate histograms to MLflow as plots.

No flow calls these yet: the two code RL stages (§2.3.2–2.3.3) will, with the on-policy filter fixed to sample
distinct rollouts (docs/architecture.md, "Built, not yet in the recipe"). Until then tests/code/test_code_data.py
runs them."""

from __future__ import annotations

import json

import mlflow

from forge.config import CodeDataConfig, CodeRLConfig
from forge.stages import DataFile
from registry.tracking import STAGE_TAG, StageContext, log_table
from tasks._cache import cached_task

CODE_MODULES = ("forge.code.data", "forge.code.judge", "forge.code.complexity", "forge.code.candidates")


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


def _problems(cfg: CodeDataConfig):
    from forge.code.problems import load_problems

    return load_problems(cfg.sources, limit=cfg.limit)


def _backend(cfg: CodeDataConfig, problems, model_dir: str | None, n: int):
    if cfg.backend == "policy":
        if not model_dir:
            raise ValueError("code_data.backend = 'policy' needs a model_dir (the checkpoint to sample from)")
        from forge.generation import get_backend

        return get_backend("transformers", model=model_dir)
    from forge.code.candidates import CandidatePoolBackend, known_candidates

    good, slow, broken = cfg.known_good, cfg.known_slow, cfg.known_broken
    if good + slow + broken == 0:
        raise ValueError("code_data: the 'known' backend needs at least one candidate per problem")
    return CandidatePoolBackend({p.prompt(): known_candidates(p, good, slow, broken) for p in problems})


def _complexity_judge(cfg: CodeDataConfig):
    """The judge model's backend when an endpoint is configured (the paper's instruct judge), else None."""
    if not cfg.complexity_judge_url:
        return None
    from forge.generation import get_backend

    return get_backend("openai", base_url=cfg.complexity_judge_url, model=cfg.complexity_judge_model)


def _write_version(name: str, rows: list[dict], manifest: dict) -> str:
    from forge.atomic import atomic_open
    from forge.data.jsonl import write_jsonl
    from forge.hashing import value_digest
    from forge.workspace import Workspace

    digest = value_digest(rows, length=12)
    out = Workspace.from_env().data / "code" / name / f"v-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "rows.jsonl", rows)
    with atomic_open(out / "manifest.json") as f:
        json.dump(manifest | {"digest": digest, "rows": len(rows)}, f, indent=2, sort_keys=True)
    return str(out)


@cached_task(name="code-sft-data", modules=CODE_MODULES)
def code_sft_task(*, ctx: StageContext, cfg: CodeDataConfig, model_dir: str | None = None) -> DataFile:
    """Sample N candidates per problem, keep the correct and time-optimal ones as SFT chat samples."""
    from forge.code.data import sample_sft

    problems = _problems(cfg)
    backend = _backend(cfg, problems, model_dir, cfg.n_candidates)
    with ctx.start_run("code-sft-data", {STAGE_TAG: "data/code-sft"}) as run:
        result = sample_sft(
            backend,
            problems,
            cfg.n_candidates,
            cfg.temperature,
            cfg.max_new_tokens,
            judge_backend=_complexity_judge(cfg),
        )
        rates = result.pass_rates()
        log_histogram("code_sft_candidate_pass_rate", rates, "pass rate of a candidate")
        kept_per_problem = {p.id: 0 for p in problems}
        for s in result.samples:
            kept_per_problem[s.source.split(":", 1)[1]] += 1
        metrics = {
            "code_sft_problems": float(len(problems)),
            "code_sft_candidates": float(len(rates)),
            "code_sft_kept": float(len(result.samples)),
            "code_sft_problems_covered": float(sum(1 for v in kept_per_problem.values() if v)),
        }
        mlflow.log_metrics(metrics)
        rows = [s.model_dump(mode="json") for s in result.samples]
        path = _write_version("sft", rows, {"config": cfg.model_dump(mode="json"), "metrics": metrics})
        log_table([{"problem_id": k, "kept": v} for k, v in kept_per_problem.items()], "code_sft_kept.json")
    return DataFile(path=path, run_id=run.info.run_id, metrics=metrics, counts={"rows": len(rows)})


@cached_task(name="code-rl-filter", modules=CODE_MODULES)
def code_rl_filter_task(
    *, ctx: StageContext, cfg: CodeDataConfig, rl: CodeRLConfig, stage: int = 1, model_dir: str | None = None
) -> DataFile:
    """n rollouts per problem; keep problems whose k (solved, or meeting the bound in stage 2) is in range."""
    from forge.code.data import filter_rl

    problems = _problems(cfg)
    backend = _backend(cfg, problems, model_dir, rl.num_rollouts)
    with ctx.start_run(f"code-rl-filter-stage{stage}", {STAGE_TAG: f"data/code-rl-stage{stage}"}) as run:
        rows = filter_rl(
            backend,
            problems,
            stage,
            rl.num_rollouts,
            (rl.keep_k_min, rl.keep_k_max),
            max_new_tokens=cfg.max_new_tokens,
        )
        log_histogram(f"code_rl_stage{stage}_problem_pass_rate", [r.k / r.n for r in rows], "k / n per problem")
        log_histogram(
            f"code_rl_stage{stage}_rollout_pass_rate",
            [x for r in rows for x in r.pass_rates],
            "pass rate of a rollout",
        )
        kept = [r for r in rows if r.kept]
        metrics = {f"code_rl_stage{stage}_problems": float(len(rows)), f"code_rl_stage{stage}_kept": float(len(kept))}
        mlflow.log_metrics(metrics)
        path = _write_version(
            f"rl-stage{stage}",
            [r.as_dict() for r in kept],
            {"config": cfg.model_dump(mode="json"), "metrics": metrics},
        )
        log_table(
            [{k: v for k, v in r.as_dict().items() if k != "prompt"} for r in rows], f"code_rl_stage{stage}.json"
        )
    return DataFile(path=path, run_id=run.info.run_id, metrics=metrics, counts={"rows": len(kept)})
