"""Profiles validate into the typed config; mistakes are refused with the file and the field named."""

import pytest

from forge.config import ConfigError, DomainShares, RecipeConfig, load_profile


def test_tiny_profile_validates():
    cfg = load_profile("tiny")
    assert cfg.base.source == "build"
    assert [s.max_length for s in cfg.sft.curriculum] == [256, 512, 1024]  # tiny stand-in for 32k → 64k → 256k
    assert cfg.runtime.bf16 is False


def test_gpu_profile_validates_with_paper_figures():
    cfg = load_profile("nanbeige-4.1-3b")
    assert cfg.base.hub_id == "Nanbeige/Nanbeige4-3B-Base"
    assert [s.max_length for s in cfg.sft.curriculum] == [32_768, 65_536, 262_144]  # §2.1.1
    assert cfg.pointwise_rl.num_generations == 8  # §2.1.2
    assert (cfg.code_rl.num_rollouts, cfg.code_rl.keep_k_min, cfg.code_rl.keep_k_max) == (8, 1, 5)  # §2.3.2
    assert cfg.generation.backend == "vllm" and cfg.runtime.bf16
    assert cfg.agentic_rl.max_tool_calls == 600


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
        ("code_rl: {keep_k_min: 6, keep_k_max: 5}", "code_rl"),  # empty k range
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
