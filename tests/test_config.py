"""Profiles validate into the typed config; mistakes are refused with the file and the field named."""

from pathlib import Path

import pytest

from forge.config import ConfigError, DomainShares, RecipeConfig, TrainingRuntimeConfig, load_profile
from forge.hardware import bf16_pays_off


def test_tiny_profile_validates():
    cfg = load_profile("tiny")
    assert cfg.base.source == "build"
    assert [s.max_length for s in cfg.sft.curriculum] == [256, 512, 1024]  # tiny stand-in for 32k → 64k → 256k
    assert cfg.runtime.bf16 is bf16_pays_off()  # `auto`: bf16 where it trains faster than fp32


def test_bf16_auto_is_resolved_when_the_profile_loads():
    """`auto` becomes what trains faster on this hardware: bf16 with AMX tiles or on an AMD CPU with AVX-512-BF16, fp32
    on an Intel CPU with AVX-512-BF16 alone (1.7x slower in bf16: forge/hardware.py) and without bf16 instructions; a
    profile's explicit choice is kept; anything else is refused with the field named."""
    import torch

    # What the kernel says this CPU is, read apart from torch's probes.
    flags, vendor = set(), None
    if Path("/proc/cpuinfo").exists():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = {f for line in lines if line.startswith("flags") for f in line.split(":", 1)[1].split()}
        vendor = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), None)
    faster = "amx_bf16" in flags or ("avx512_bf16" in flags and vendor == "AuthenticAMD")
    if torch.cuda.is_available():
        faster = torch.cuda.is_bf16_supported()
    assert TrainingRuntimeConfig(bf16="auto").bf16 is faster
    assert TrainingRuntimeConfig(bf16=True).bf16 is True and TrainingRuntimeConfig(bf16=False).bf16 is False
    assert load_profile("tiny", {"runtime.bf16": False}).runtime.bf16 is False
    with pytest.raises(ConfigError, match="runtime.bf16"):
        load_profile("tiny", {"runtime.bf16": "sometimes"})


def test_gpu_profile_validates_with_paper_figures():
    cfg = load_profile("nanbeige-4.1-3b")
    assert cfg.base.hub_id == "Nanbeige/Nanbeige4-3B-Base"
    assert [s.max_length for s in cfg.sft.curriculum] == [32_768, 65_536, 262_144]  # §2.1.1
    assert cfg.pointwise_rl.grpo.num_generations == cfg.pairwise_rl.grpo.num_generations == 8  # §2.1.2
    assert cfg.generation.backend == "vllm" and cfg.runtime.bf16
    assert cfg.agentic_rl.max_tool_calls == 600 and cfg.agentic_rl.context_tokens == 262_144  # abstract, §2.1.1


def test_refinement_builds_sft_data_in_every_profile():
    """§2.1.1: on in both profiles; the tiny one refines a few dozen answers in one round (seconds on CPU)."""
    tiny, gpu = load_profile("tiny"), load_profile("nanbeige-4.1-3b")
    assert tiny.refinement.enabled and gpu.refinement.enabled and RecipeConfig().refinement.enabled
    assert tiny.sft.solution_refinement_iterations == 1 and tiny.refinement.items <= 64
    assert tiny.refinement.max_new_tokens <= 64 and tiny.generation.openai_base_url is None  # the base model
    assert gpu.sft.solution_refinement_iterations == 3


def test_paper_shares_are_normalised():
    shares = DomainShares().normalized()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["code"] == pytest.approx(27 / 99)


@pytest.mark.parametrize(
    "yaml_text, field",
    [
        ("mix: {shares: {code: 27, deep_search: 26, stem: 23, tool_use: 13, general: 10}}", "mix.shares"),  # percent
        ("base: {hidden_sise: 64}", "base.hidden_sise"),  # typo: unknown keys are errors
        (
            (
                "sft: {curriculum: [{name: a, max_length: 512, max_steps: 1, learning_rate: 0.1},"
                " {name: b, max_length: 256, max_steps: 1, learning_rate: 0.1}]}"
            ),
            "sft.curriculum",
        ),  # shrinking context
        ("pointwise_rl: {grpo: {num_generations: 3}}", "pointwise_rl.grpo"),  # groups do not fit the batch
        ("refinement: {domains: [general, maths]}", "refinement.domains"),  # not a mix domain
        ("refinement: {domains: []}", "refinement.domains"),  # nothing to refine
    ],
)
def test_bad_profile_names_file_and_field(tmp_path, yaml_text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_curriculum_must_fit_model_context():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        RecipeConfig.model_validate({"base": {"source": "build", "max_position_embeddings": 512}})


def test_defaults_are_the_paper_recipe():
    cfg = RecipeConfig()
    assert cfg.base.source == "hub" and cfg.sft.curriculum[-1].max_length == 262_144


def test_overrides_merge_over_the_profile_and_are_validated():
    cfg = load_profile("tiny", {"pointwise_rl.grpo.beta": 0.1, "sft": {"packing": False}})
    assert cfg.pointwise_rl.grpo.beta == 0.1 and cfg.sft.packing is False
    assert cfg.pointwise_rl.grpo.max_steps == load_profile("tiny").pointwise_rl.grpo.max_steps  # the rest kept
    with pytest.raises(ConfigError) as err:
        load_profile("tiny", {"pointwise_rl.grpo.bta": 0.1})
    assert "pointwise_rl.grpo.bta (from overrides)" in str(err.value)
    with pytest.raises(ConfigError, match=r"pointwise_rl\.grpo\.beta \(from overrides\)"):
        load_profile("tiny", {"pointwise_rl": {"grpo": {"beta": "a lot"}}})


def test_every_config_field_is_read_somewhere():
    """Connected or gone: each field of every config model is read by a stage, a task or the library (outside
    forge/config.py). A field nobody reads misleads whoever sets it."""
    import inspect
    import re

    import forge.config as C
    from forge.workspace import REPO_ROOT

    sources = "\n".join(p.read_text() for folder in ("forge", "tasks", "flows", "registry", "dashboards")
                        for p in (REPO_ROOT / folder).rglob("*.py") if p.name != "config.py")
    unread = []
    for cls in vars(C).values():
        if inspect.isclass(cls) and issubclass(cls, C.Strict) and cls.__module__ == C.__name__:
            for field in cls.model_fields:
                if not re.search(rf"\.{field}\b|[\"']{field}[\"']", sources):
                    unread.append(f"{cls.__name__}.{field}")
    assert not unread, unread


@pytest.mark.parametrize("yaml_text, expected", [
    ("sft: {packng: true}", "sft.packng: unknown key: did you mean 'packing'?"),  # a typo: the closest key
    ("pointwise_rl: {grpo: {bta: 0.1}}", "pointwise_rl.grpo.bta: unknown key: did you mean 'beta'?"),
    ("pointwise_rl: {grpo: {max_steps: many}}", "pointwise_rl.grpo.max_steps: Input should be a valid integer"),
    ("promotion: {metrics: {x: {direction: up}}}", "'higher' or 'lower' (got 'up')"),  # the value given is named
])
def test_a_bad_key_or_value_is_explained(tmp_path, yaml_text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert f"{path}:1: " in str(err.value) and expected in str(err.value)  # file:line: field: reason
