"""Where the base checkpoint comes from (forge/training/base_model.py::resolve_base): a local directory is read as it
is; a hub id comes from the local HF cache and is fetched only where the profile allows; a missing checkpoint fails
with the model id and the two ways to provide it. No test here reaches a hub."""

from __future__ import annotations

import pytest

from forge.config import BaseModelConfig, ConfigError, load_profile
from forge.training.base_model import BaseCheckpointMissing, resolve_base


def test_a_local_checkpoint_directory_is_the_base(tiny_policy):
    cfg = BaseModelConfig(source="local", local_path=str(tiny_policy))
    assert resolve_base(cfg) == tiny_policy


def test_a_local_path_without_a_checkpoint_says_what_is_missing_and_how_to_fix_it(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BaseCheckpointMissing) as err:
        resolve_base(BaseModelConfig(source="local", local_path=str(tmp_path)))
    message = str(err.value)
    assert str(tmp_path) in message and "tokenizer_config.json" in message and "config.json," not in message
    assert "base.allow_hub_download: true" in message and "base.local_path" in message


def test_an_uncached_hub_model_is_not_fetched_without_the_profiles_leave(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing of the model is here
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(BaseCheckpointMissing) as err:
        resolve_base(BaseModelConfig(source="hub", hub_id="Nanbeige/Nanbeige4-3B-Base"))
    message = str(err.value)
    assert "Nanbeige/Nanbeige4-3B-Base" in message and "does not allow downloads" in message
    assert "hf download Nanbeige/Nanbeige4-3B-Base" in message and "base.source: local" in message


def test_profiles_state_their_hub_policy():
    assert load_profile("nanbeige-4.1-3b").base.allow_hub_download  # the GPU profile may fetch its base, and says so
    for name in ("tiny", "ci"):
        cfg = load_profile(name)
        assert cfg.base.source == "build" and not cfg.base.allow_hub_download
    with pytest.raises(ConfigError, match="local_path"):
        load_profile("tiny", {"base.source": "local"})
