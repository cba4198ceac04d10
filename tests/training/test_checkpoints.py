"""Resume points: a checkpoint the Trainer was still writing when the run was killed is never resumed from."""

import json

from forge.training.checkpoints import find_resume_checkpoint


def test_incomplete_newest_checkpoint_is_skipped_and_removed(tmp_path):
    done = tmp_path / "checkpoint-2"
    done.mkdir()
    (done / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    half = tmp_path / "checkpoint-4"  # killed mid-save: weights written, trainer_state.json not yet
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\0" * 16)
    torn = tmp_path / "checkpoint-6"  # killed while writing the state file itself
    torn.mkdir()
    (torn / "trainer_state.json").write_text('{"global_st')

    assert find_resume_checkpoint(tmp_path) == str(done)
    assert not half.exists() and not torn.exists()


def test_nothing_to_resume(tmp_path):
    assert find_resume_checkpoint(tmp_path / "missing") is None
    assert find_resume_checkpoint(tmp_path) is None
