"""`forge plan`: what a profile would run, stage by stage, read from the settings and functions the stages use; the
GPU profile makes no choice that only makes sense without GPUs, the tiny one makes several."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from forge.config import load_profile
from forge.plan import recipe_plan

FORGE = str(Path(sys.executable).parent / "forge")


def _by_stage(profile: str, overrides: dict | None = None) -> dict:
    return {row.stage: row for row in recipe_plan(load_profile(profile, overrides))}


def test_the_gpu_profile_makes_no_cpu_only_choice():
    plan = _by_stage("nanbeige-4.1-3b")
    assert not [(s, r.cpu_only) for s, r in plan.items() if r.cpu_only]
    assert plan["sft-3-ctx-256k"].launcher == "accelerate launch ×8 (fsdp)"
    assert "bf16" in plan["sft-3-ctx-256k"].compute and plan["base"].data.startswith("Nanbeige/Nanbeige4-3B-Base")
    for stage in ("grpo-pointwise", "grpo-pairwise", "code-rl-stage1", "code-rl-stage2"):
        assert plan[stage].backend.startswith("TRL + vLLM"), stage
    assert plan["eval-math"].backend.startswith("vllm")
    # Every training stage is launched; the agentic loop's ranks hold whole replicas, and the plan says so.
    assert plan["grpo-pointwise"].launcher == plan["code-rl-stage2"].launcher == "accelerate launch ×8 (fsdp)"
    assert plan["agentic-rl"].launcher == "accelerate launch ×8 (whole replicas: the agentic loop does not shard)"


def test_the_tiny_profile_is_planned_as_the_cpu_rehearsal_it_is():
    cfg = load_profile("tiny")
    plan = _by_stage("tiny")
    flags = {f for r in plan.values() for f in r.cpu_only}
    assert any("HF generate" in f for f in flags)
    # runtime.bf16 `auto`: fp32 (a CPU-only choice) unless this CPU has bf16 instructions (AMX, AVX-512-BF16), and the plan says which it got.
    assert any("fp32" in f for f in flags) is not cfg.runtime.bf16
    assert ("bf16" if cfg.runtime.bf16 else "fp32") in plan["sft-1-ctx-256"].compute
    assert "pretrain" in plan and "base" not in plan and plan["sft-1-ctx-256"].launcher == "task process"
    assert list(plan)[-2:] == ["eval-report", "promote"] and "eval-humaneval" in plan


def test_the_plan_follows_the_profile_and_its_overrides():
    plan = _by_stage("tiny", {"code_rl.enabled": False, "runtime.num_processes": 2, "generation.backend": "vllm"})
    assert not any(s.startswith("code-rl") for s in plan)
    assert plan["sft-1-ctx-256"].launcher == "accelerate launch ×2" and plan["rm-pointwise"].launcher.startswith("acc")
    assert plan["eval-math"].backend.startswith("vllm") and "HF generate" not in " ".join(plan["eval-math"].cpu_only)


def test_forge_plan_prints_it_without_running_anything(tmp_path):
    out = subprocess.run([FORGE, "plan", "--profile", "nanbeige-4.1-3b", "--json"], capture_output=True, text=True,
                         timeout=120, check=True, cwd=tmp_path)
    rows = json.loads(out.stdout)
    assert [r["stage"] for r in rows][:2] == ["base", "pools"] and all(r["launcher"] for r in rows)
    bad = subprocess.run([FORGE, "plan", "--profile", "tiny", "--set", "runtime.num_processes=0"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "runtime.num_processes" in bad.stdout + bad.stderr
