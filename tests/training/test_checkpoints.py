"""Resume points: a checkpoint the Trainer was still writing when the run was killed is never resumed from."""

import json

import pytest

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


# A child process frees and allocates a 64 MiB tensor, as a training step does with its activations, and prints the
# minor page faults of the last 16 rounds; with ``apply_runtime`` first (every training stage calls it) or without.
FAULTS = """
import resource, sys, torch
if sys.argv[1] == "runtime":
    from forge.config import TrainingRuntimeConfig
    from forge.training.checkpoints import apply_runtime
    apply_runtime(TrainingRuntimeConfig(bf16=False))
def round_():
    torch.empty(16 << 20).fill_(1.0)  # 64 MiB, written (its pages faulted in), then freed
round_(); round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(16):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_training_runtime_reuses_freed_memory_instead_of_faulting_it_back():
    """glibc alone unmaps a freed 64 MiB block and faults fresh pages in for the next one; after apply_runtime the
    block is reused (forge/hardware.py keep_freed_memory; what it buys a training step: bench/malloc_cpu.py)."""
    import subprocess
    import sys

    from forge.hardware import keep_freed_memory

    if not keep_freed_memory():
        pytest.skip("not glibc: no mallopt to keep freed memory with")
    faults = {side: int(subprocess.run([sys.executable, "-c", FAULTS, side], check=True, capture_output=True,
                                       text=True).stdout) for side in ("default", "runtime")}
    assert faults["default"] >= 16 * 32  # at least one fault per 2 MiB page per round, even with huge pages
    assert faults["runtime"] * 4 < faults["default"], faults
