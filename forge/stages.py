"""The stage contract: the typed result each kind of recipe stage hands to the next.

Every Prefect task of the recipe returns one of these, frozen and whole; flows pass them on by keyword
(``sft_stage_task(init=base, data=mix, ...)``) instead of unpacking dicts by string keys. They are plain data
(pydantic, JSON-able), so Prefect persists them as task results and hashes them into the cache keys of the
stages that read them: a stage whose input result changed (another checkpoint, another data md5) recomputes.

    base = Base(model_dir=..., tokenizer_dir=..., model_name="forge-base", version="1")
    sft = Checkpoint(model_dir=..., model_name="forge-policy", version="2", metrics={"sft_heldout_loss": 4.7})
    sft.ref        # 'forge-policy/2': what a child version's ``forge.parent_version`` tag says

docs/architecture.md has the stage table: which stage returns which result and reads which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StageResult(BaseModel):
    """What every stage result carries: its MLflow run (when it logged one) and its headline metrics.

    ``run_id`` is bookkeeping, not part of the result's value: it is left out of ``model_dump`` and so of the cache
    keys of the stages that read the result (an uncached stage such as ``version-data`` logs a new MLflow run on
    every recipe run, and that must not make every later stage recompute)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str | None = Field(None, exclude=True, description="The stage's MLflow run; None when it logged none.")
    metrics: dict[str, float] = Field(default_factory=dict, description="Figures a person looks at first.")

    def paths(self) -> list[str]:
        """Files the result points at: a cached result whose files are gone must be recomputed."""
        return []

    def missing(self) -> list[str]:
        return [p for p in self.paths() if not Path(p).exists()]


class Tokenizer(StageResult):
    """Stage 0a: the tokenizer with Forge's chat template (forge/chat.py)."""

    tokenizer_dir: str

    def paths(self) -> list[str]:
        return [self.tokenizer_dir]


class Checkpoint(StageResult):
    """A model on disk (``save_pretrained`` folder with its tokenizer) and, once registered, its registry version."""

    model_dir: str
    model_name: str | None = Field(None, description="Registered model, e.g. 'forge-policy'; None: unregistered.")
    version: str | None = Field(
        None, description="Registry version ('hub' or 'local': a base checkpoint read where it is, not registered).")

    def paths(self) -> list[str]:
        return [self.model_dir] if self.version not in ("hub", "local") else []

    @property
    def ref(self) -> str:
        """``<model name>/<version>``, as lineage tags and the promotion task name a version."""
        if self.model_name is None or self.version is None:
            raise ValueError(f"{self.model_dir} is not a registered version")
        return f"{self.model_name}/{self.version}"


class Base(Checkpoint):
    """Stage 0: the base model, plus the tokenizer folder the data stage counts tokens with."""

    tokenizer_dir: str

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer alone: what the data stage keys its cache on, so re-training the base keeps the mix."""
        return Tokenizer(tokenizer_dir=self.tokenizer_dir)


class RewardModel(Checkpoint):
    """A frozen reward model (point-wise §2.1.2 or pair-wise §2.1.3) that a GRPO stage scores rollouts with."""


class Mix(StageResult):
    """The SFT mix as written (shards, held-out rows, manifest), before DVC versions it; or the draft that §2.1.1's
    refinement starts from."""

    mix_dir: str
    manifest: dict[str, Any] = Field(default_factory=dict, description="The mix's manifest.json.")

    def paths(self) -> list[str]:
        return [self.mix_dir]


class DataMix(StageResult):
    """The versioned SFT mix: its folder (shards, held-out rows, manifest) and the DVC md5 of ``data/``."""

    mix_dir: str
    data_md5: str
    manifest: dict[str, Any] = Field(default_factory=dict, description="The mix's manifest.json.")

    def paths(self) -> list[str]:
        return [self.mix_dir]


class Pools(StageResult):
    """Per-domain pools (and side sets) as JSONL files, with a digest of their contents."""

    files: dict[str, str]
    digest: str = Field(description="sha256 over the pool files' names and contents.")
    review: dict[str, Any] | None = Field(None, description="What reviewers' verdicts changed in these pools.")

    def paths(self) -> list[str]:
        return list(self.files.values())


class SearchShard(StageResult):
    """One head-entity shard of deep-search synthesis (§2.2.1): its QAs and agent trajectories."""

    shard: int
    qa_path: str
    traj_path: str
    qas: int
    trajectories: int
    qa_seconds: float = Field(description="Seconds spent on walks and questions (the rest went to the agents).")
    seconds: float

    def paths(self) -> list[str]:
        return [self.qa_path, self.traj_path]


class DataFile(StageResult):
    """A data file or versioned data folder a stage wrote (refined SFT rows, code data), with counts."""

    path: str
    counts: dict[str, int] = Field(default_factory=dict)
    data_md5: str | None = Field(None, description="DVC's md5 of data/ once this file was versioned in it.")

    def paths(self) -> list[str]:
        return [self.path]


class Refinement(StageResult):
    """§2.1.1 Solution Refinement's output: every item's traces (draft, critiques, revisions, final) and the
    refined-over-draft preference pairs."""

    traces_path: str
    pairs_path: str
    counts: dict[str, int] = Field(default_factory=dict)

    def paths(self) -> list[str]:
        return [self.traces_path, self.pairs_path]


class EvalReport(StageResult):
    """One eval suite's summary metrics for one registered version (per-item tables are MLflow artifacts)."""

    suite: str
    model: str = Field(description="The version evaluated, as '<model name>/<version>'.")


class Release(StageResult):
    """The promotion gate's decision on a candidate version."""

    model_name: str
    version: str
    promoted: bool
    outcome: str = Field(description="'promoted', 'refused' or 'already champion'.")
    reasons: list[str] = Field(default_factory=list)
