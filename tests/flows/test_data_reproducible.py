"""The committed ``data.dvc`` is what a fresh checkout builds: ``forge data build --profile tiny`` in a scratch
checkout and home (its own tokenizer, base model, pools, synthesis, mix and §2.1.1 refinement by that base model)
gives the md5 that data.dvc names in the last commit. The same code and corpora give the same bytes; a change that
alters the data fails here until data.dvc is committed anew (`forge data build` says so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forge.data.versioning import built_on, committed_dvc_text, committed_md5, cpu_kind, read_data_md5, same_bits
from forge.workspace import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
from scratch import forge_env, scratch_checkout  # bench/ is not a package: on sys.path above

pytestmark = pytest.mark.cost(900)


@pytest.mark.slow
def test_a_fresh_checkout_builds_the_committed_tiny_data(tmp_path):
    committed = committed_md5(REPO_ROOT)
    assert committed, "no data.dvc in the last commit"
    other = built_on(committed_dvc_text(REPO_ROOT) or "")
    if other and not same_bits(cpu_kind(), other):
        pytest.skip(f"data.dvc was built on a {other} CPU and this one is {cpu_kind()}: the model-written rows differ "
                    "in their last bits between CPU kinds (README), so the md5s cannot match here")
    root = scratch_checkout(root=tmp_path / "checkout")
    # The scratch checkout commits this one's data.dvc, so `forge data build` compares with it as a user's would.
    (root / "data.dvc").write_text(subprocess.run(["git", "show", "HEAD:data.dvc"], cwd=REPO_ROOT, check=True,
                                                  capture_output=True, text=True).stdout)
    subprocess.run(["git", "add", "data.dvc"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data"], cwd=root, check=True)
    forge = str(Path(sys.executable).parent / "forge")
    env = {**forge_env(root), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([forge, "data", "build", "--profile", "tiny"], env=env, cwd=root, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_data_md5(root) == committed, f"built on a {cpu_kind()} CPU:\n" + proc.stdout[-1500:]
    assert built_on((root / "data.dvc").read_text()) == cpu_kind()  # the version records where it was built
    # Its task results went to the scratch home, not to ~/.prefect (shared by every checkout): a run elsewhere
    # cannot serve this one's stages from its cache, pointing at its own MLflow runs.
    assert any((root / ".forge" / "prefect" / "results").iterdir())
    assert "the same version as the committed data.dvc" in proc.stdout
