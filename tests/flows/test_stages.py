"""The stage contract under a real (temporary) Prefect server: a stage called through ``RecipeRun.stage`` gets the
run's ``ctx``, is cached on its typed inputs but not on their MLflow run ids, records itself in the run summary, and
a cached result whose files are gone, or were written since by another version of the stage, is computed again."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prefect import flow

from flows._stages import RecipeRun, RunSummary
from forge.config import PointwiseRLConfig
from forge.stages import Checkpoint, DataFile, DataMix
from registry.tracking import StageContext
from tasks._cache import cached_task, uncached_task
from tasks.rl import reward_model_inputs

CALLS: list[str] = []


@cached_task(name="write-file", modules=("forge.stages",))
def write_file_task(*, ctx: StageContext, data: DataMix, name: str) -> DataFile:
    """Writes ``<mix_dir>/<name>.txt``; counts its calls (a cache hit does not run this body)."""
    from pathlib import Path

    CALLS.append(name)
    path = Path(data.mix_dir) / f"{name}.txt"
    path.write_text(f"{data.data_md5} {ctx.tags['forge.profile']}")
    return DataFile(path=str(path), run_id=f"run-of-{name}", metrics={"bytes": float(path.stat().st_size)})


@flow(name="stages-probe")
def probe(run: RecipeRun, data: DataMix, name: str) -> DataFile:
    return run.stage(f"write-{name}", write_file_task, data=data, name=name)


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_a_stage_is_cached_on_its_inputs_recorded_and_recomputed_when_its_files_are_gone(harness, tmp_path):
    summary = RunSummary(tmp_path / "runs", "flow-1", "ci", None)
    run = RecipeRun(StageContext(tags={"forge.profile": "ci"}), summary)
    data = DataMix(mix_dir=str(tmp_path), data_md5="abc.dir", run_id="the data stage's run")
    name = f"probe-{tmp_path.name}"

    first = probe(run, data, name)
    assert CALLS == [name] and first.path.endswith(f"{name}.txt")
    assert (tmp_path / f"{name}.txt").read_text() == "abc.dir ci"  # the ctx reached the task
    record = json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"][f"write-{name}"]
    assert record["state"] == "completed" and record["run_id"] == f"run-of-{name}" and record["metrics"]["bytes"] > 0

    # Same inputs, but the input result logged another MLflow run: still a cache hit.
    again = probe(run, data.model_copy(update={"run_id": "a later run"}), name)
    assert CALLS == [name] and again == first
    assert json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"][f"write-{name}"]["state"] == "cached"

    # The cached result points at a file that is gone: computed again, not handed on.
    (tmp_path / f"{name}.txt").unlink()
    probe(run, data, name)
    assert CALLS == [name, name] and (tmp_path / f"{name}.txt").exists()

    # Another input value is another cache key.
    probe(run, data.model_copy(update={"data_md5": "def.dir"}), name)
    assert CALLS == [name, name, name]


def write_model(data: DataMix, version: str) -> Checkpoint:
    """A model folder named by the stage's inputs, as the training stages name theirs (tasks/training.py)."""
    folder = Path(data.mix_dir) / f"model-{data.data_md5}"
    folder.mkdir(exist_ok=True)
    (folder / "weights.txt").write_text(version)
    CALLS.append(version)
    return Checkpoint(model_dir=str(folder))


@cached_task(name="versioned-model", modules=("forge.stages",))
def model_v1_task(*, data: DataMix) -> Checkpoint:
    return write_model(data, "v1")


@cached_task(name="versioned-model", modules=("forge.stages",))
def model_v2_task(*, data: DataMix) -> Checkpoint:
    """The same stage after a change to its code: another cache key, the same folder."""
    return write_model(data, "v2")


@flow(name="model-v1")
def model_v1(run: RecipeRun, data: DataMix) -> Checkpoint:
    return run.stage("model", model_v1_task, data=data)


@flow(name="model-v2")
def model_v2(run: RecipeRun, data: DataMix) -> Checkpoint:
    return run.stage("model", model_v2_task, data=data)


def test_a_cached_result_whose_folder_another_version_rewrote_is_computed_again(harness, tmp_path):
    """The code changed and changed back: the first version's cache entry still names the folder, which now holds
    the second version's model. Handed on, every later stage would build on weights its key never saw."""
    run = RecipeRun(StageContext(tags={"forge.profile": "ci"}), RunSummary(tmp_path / "runs", "flow-1", "ci", None))
    data = DataMix(mix_dir=str(tmp_path), data_md5=f"{tmp_path.name}.dir")
    start = len(CALLS)
    first = model_v1(run, data)
    weights = Path(first.model_dir) / "weights.txt"
    assert weights.read_text() == "v1"
    assert model_v2(run, data).model_dir == first.model_dir and weights.read_text() == "v2"
    assert model_v1(run, data) == first and weights.read_text() == "v1"  # computed again, not handed on
    assert CALLS[start:] == ["v1", "v2", "v1"]
    stages = json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"]
    assert stages["model"]["state"] == "completed"
    model_v1(run, data)  # nothing rewrote it since: a cache hit
    assert CALLS[start:] == ["v1", "v2", "v1"]
    assert json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"]["model"]["state"] == "cached"


@cached_task(name="rm-probe", modules=("forge.stages",), key_view=reward_model_inputs)
def rm_probe_task(*, ctx: StageContext, cfg: PointwiseRLConfig, data: DataMix) -> DataFile:
    """Keyed as the reward model stages are (tasks/rl.py::reward_model_inputs); counts its calls."""
    CALLS.append(f"rm:{cfg.rm.learning_rate}:{cfg.grpo.max_prompt_length}:{cfg.grpo.learning_rate}")
    return DataFile(path=data.mix_dir)


@flow(name="rm-probe")
def rm_probe(run: RecipeRun, cfg: PointwiseRLConfig, data: DataMix) -> DataFile:
    return run.stage("rm-probe", rm_probe_task, cfg=cfg, data=data)


def test_tuning_a_grpo_stage_leaves_its_reward_model_cached(harness, tmp_path):
    """Changing point-wise GRPO's learning rate re-trained the point-wise reward model (51 s of `forge run` on the
    AMD 26/2), which reads only the GRPO prompt budget of that section."""
    run = RecipeRun(StageContext(tags={"forge.profile": "ci"}), RunSummary(tmp_path / "runs", "flow-1", "ci", None))
    data = DataMix(mix_dir=str(tmp_path), data_md5=f"{tmp_path.name}.dir")
    cfg = PointwiseRLConfig(grpo={"learning_rate": 1e-5, "max_prompt_length": 128}, rm={"learning_rate": 1e-4})
    start = len(CALLS)

    def grpo(**update):
        return cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update=update)})

    rm_probe(run, cfg, data)
    rm_probe(run, grpo(learning_rate=3e-5), data)  # GRPO's own settings: a cache hit
    rm_probe(run, cfg.model_copy(update={"overlong_penalty": 2.0}), data)  # the GRPO reward's, too
    assert CALLS[start:] == ["rm:0.0001:128:1e-05"]
    rm_probe(run, grpo(max_prompt_length=256), data)  # the prompts the RM draws: computed again
    rm_probe(run, cfg.model_copy(update={"rm": cfg.rm.model_copy(update={"learning_rate": 2e-4})}), data)
    assert CALLS[start:] == ["rm:0.0001:128:1e-05", "rm:0.0001:256:1e-05", "rm:0.0002:128:1e-05"]


def test_lengthening_a_later_sft_stage_leaves_the_earlier_ones_cached():
    """Each SFT stage took the whole curriculum as an input, so changing the 1,024-token stage re-ran the 256- and
    512-token ones (56 s of `forge run` on the AMD 26/2): the key (the task's own policy) now stops at the stage."""
    from forge.config import load_profile
    from tasks._cache import ViewedInputs
    from tasks.training import sft_stage_task

    sft = load_profile("tiny").sft
    viewed = next(p for p in sft_stage_task.cache_policy.policies if isinstance(p, ViewedInputs))

    def keys(cfg):
        return [viewed.compute_key(None, {"ctx": StageContext(), "stage": stage, "index": i, "sft": cfg}, {})
                for i, stage in enumerate(cfg.curriculum)]

    def with_stage(i, **update):
        curriculum = list(sft.curriculum)
        curriculum[i] = curriculum[i].model_copy(update=update)
        return sft.model_copy(update={"curriculum": curriculum})

    before = keys(sft)
    last = keys(with_stage(2, max_steps=sft.curriculum[2].max_steps + 5))
    assert last[:2] == before[:2] and last[2] != before[2]
    first = keys(with_stage(0, learning_rate=sft.curriculum[0].learning_rate / 2))
    assert all(a != b for a, b in zip(first, before, strict=True))  # the later stages' step offsets read it
    packed = keys(sft.model_copy(update={"packing": not sft.packing}))
    assert all(a != b for a, b in zip(packed, before, strict=True))  # the rest of sft still counts


@cached_task(name="fill-disk", modules=("forge.stages",))
def fill_disk_task(*, data: DataMix) -> DataFile:
    """Writes to /dev/full: a real ENOSPC, as a stage on a full disk meets it."""
    with open("/dev/full", "w") as f:
        f.write(data.data_md5 * 1000)
        f.flush()
    return DataFile(path="/dev/full")


@flow(name="disk-full-probe")
def disk_full_probe(run: RecipeRun, data: DataMix) -> DataFile:
    return run.stage("fill-disk", fill_disk_task, data=data)


def test_a_stage_on_a_full_disk_says_which_disk_and_is_recorded_failed(harness, tmp_path, monkeypatch):
    from forge.workspace import DiskFullError

    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    summary = RunSummary(tmp_path / "runs", "flow-2", "ci", None)
    run = RecipeRun(StageContext(tags={"forge.profile": "ci"}), summary)
    with pytest.raises(DiskFullError, match=rf"stage fill-disk: the disk is full \(home {tmp_path / 'home'}: \d+ MB "
                                            r"free of \d+ MB"):
        disk_full_probe(run, DataMix(mix_dir=str(tmp_path), data_md5=f"{tmp_path.name}.dir", run_id="r"))
    record = json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"]["fill-disk"]
    assert record["state"] == "failed" and "the disk is full" in record["error"]

    # `forge status` shows it: the stage failed, and why.
    (tmp_path / "home" / "runs").mkdir()
    (tmp_path / "runs" / "latest.json").replace(tmp_path / "home" / "runs" / "latest.json")
    shown = subprocess.run([str(Path(sys.executable).parent / "forge"), "status"], capture_output=True, text=True,
                           env={**os.environ, "FORGE_HOME": str(tmp_path / "home"), "COLUMNS": "200"},
                           check=False, timeout=120)
    assert "failed" in shown.stdout and f"fill-disk: the disk is full (home {tmp_path / 'home'}" in shown.stdout


@uncached_task(name="count-probe")
def count_probe_task(*, data: DataMix) -> DataFile:
    """An always-run stage, as promote and eval-report are; counts its calls."""
    CALLS.append(f"count:{data.data_md5}")
    return DataFile(path=data.mix_dir)


@flow(name="count-probe")
def count_probe(run: RecipeRun, data: DataMix, times: int) -> int:
    return sum(run.stage("count-probe", count_probe_task, data=data).path == data.mix_dir for _ in range(times))


def stored_files(storage: Path) -> set[Path]:
    """The files in Prefect's result storage."""
    return {f for f in storage.rglob("*") if f.is_file()} if storage.exists() else set()


def stored_results(storage: Path, *, skip: set[Path]) -> dict[Path, object]:
    """What Prefect's result storage holds beyond the files in ``skip``: each stored value, unpickled."""
    import base64

    import cloudpickle

    out = {}
    for f in stored_files(storage) - skip:
        raw = f.read_bytes()
        with contextlib.suppress(ValueError):  # a result record (a task's: metadata and the value), not a flow's value
            raw = json.loads(raw)["result"]
        out[f] = cloudpickle.loads(base64.b64decode(raw))
    return out


def test_an_uncached_stage_runs_every_time_and_persists_nothing(harness, tmp_path):
    """promote, eval-report, version-data and the digests read state that changes between runs; Prefect's default
    policy hashed their inputs into keys no later run could hit (a second call in the same run with the same inputs
    was a cache hit) and wrote every result to disk (issue 18)."""
    storage = Path(os.environ["PREFECT_LOCAL_STORAGE_PATH"])
    before = stored_files(storage)
    run = RecipeRun(StageContext(tags={"forge.profile": "ci"}), RunSummary(tmp_path / "runs", "flow-1", "ci", None))
    data = DataMix(mix_dir=str(tmp_path), data_md5=f"{tmp_path.name}.dir")
    start = len(CALLS)
    assert count_probe(run, data, 2) + count_probe(run, data, 1) == 3
    assert CALLS[start:] == [f"count:{data.data_md5}"] * 3
    new = stored_results(storage, skip=before)
    assert new and not [v for v in new.values() if isinstance(v, DataFile)]  # the flows' results only
    assert json.loads((tmp_path / "runs" / "latest.json").read_text())["stages"]["count-probe"]["state"] == "completed"
