"""Typed recipe configuration: one pydantic model per stage, loaded from ``configs/<profile>.yaml``.

Every figure taken from the Nanbeige4.1-3B paper (arXiv:2602.13367; docs/architecture.md maps its stages) is a
named default here, with the section it comes from. Profiles override sizes and endpoints, never the shape of the
recipe; a run may override single fields on top of its profile (the recipe flow's ``overrides`` parameter).

    from forge.config import load_profile
    cfg = load_profile("tiny")                                       # or a path to a YAML file
    cfg = load_profile("tiny", {"pointwise_rl.grpo.beta": 0.1})      # a profile plus overrides
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator

from forge.errors import InputError

DOMAINS = ("code", "deep_search", "stem", "tool_use", "general")
CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"


class Strict(BaseModel):
    """Base: unknown keys are an error (a typo in a profile must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _needs_model(url: str | None, model: str | None, field: str) -> None:
    """An endpoint without the name of the model it serves is refused at load, not at the first request."""
    if url and not model:
        raise ValueError(f"{field} is required with an endpoint URL ({url}): the model name it serves")


class TokenizerConfig(Strict):
    vocab_size: int = Field(4096, ge=512, description="Byte-level BPE vocabulary size, special tokens included.")
    min_frequency: int = Field(2, ge=1, description="Minimum pair frequency for a BPE merge.")
    max_training_chars: int = Field(
        6_000_000, ge=10_000, description="Characters of corpus text read to train the tokenizer."
    )
    split_digits: bool = Field(
        False, description="Every digit its own token (as Llama's and Qwen's tokenizers do): a number is then "
        "spelled the same, one token a digit, wherever it stands, instead of by whichever digit pairs BPE merged.")


class BaseModelConfig(Strict):
    """Stage 0. The paper starts from Nanbeige4-3B-Base (§2.1.1); the tiny profile trains its own Llama."""

    source: Literal["build", "hub", "local"] = Field(
        "hub", description="'build': train a tokenizer and a small Llama on corpora/; 'hub': hub_id, from the local "
        "Hugging Face cache (or fetched when allow_hub_download); 'local': the checkpoint directory at local_path."
    )
    hub_id: str = Field("Nanbeige/Nanbeige4-3B-Base", description="Base checkpoint when source='hub' (§2.1.1).")
    allow_hub_download: bool = Field(
        False, description="source='hub' may fetch hub_id from huggingface.co when the cache lacks it. Off by "
        "default: Forge reaches no hub unless a profile says so (the tiny and CI profiles never do).")
    local_path: str | None = Field(
        None, description="source='local': a save_pretrained directory (config.json, weights, tokenizer files).")
    tokenizer: TokenizerConfig = TokenizerConfig()
    hidden_size: int = Field(256, ge=8)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(4, ge=1)
    intermediate_size: int = Field(688, ge=8)
    max_position_embeddings: int = Field(1024, ge=64, description="Must cover the longest SFT curriculum stage.")
    seq_len: int = Field(256, ge=16, description="Pre-training sequence length.")
    batch_size: int = Field(16, ge=1)
    max_steps: int = Field(400, ge=1, description="Pre-training optimiser steps.")
    learning_rate: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    eval_every: int = Field(50, ge=1, description="Steps between held-out loss evaluations.")
    eval_fraction: float = Field(0.02, gt=0, lt=0.5, description="Share of corpus text held out.")
    max_corpus_chars: int = Field(8_000_000, ge=10_000, description="Corpus characters used for pre-training.")
    seed: int = 0

    @model_validator(mode="after")
    def _local_has_path(self) -> BaseModelConfig:
        if self.source == "local" and not self.local_path:
            raise ValueError("source 'local' needs local_path: the base checkpoint's directory")
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> BaseModelConfig:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must be divisible by num_heads, and num_heads by num_kv_heads")
        return self


class DomainShares(Strict):
    """Target token shares of the final SFT mix (§2.1.1: code 27%, deep-search 26%, STEM 23%,
    tool-use 13%, general 10%).

    The paper's five figures add up to 99%, so they are read as weights and normalised
    (:meth:`normalized`); a sum far from 1 (a typo such as 27 for 0.27) is refused."""

    code: float = Field(0.27, ge=0, le=1)
    deep_search: float = Field(0.26, ge=0, le=1)
    stem: float = Field(0.23, ge=0, le=1)
    tool_use: float = Field(0.13, ge=0, le=1)
    general: float = Field(0.10, ge=0, le=1)

    @model_validator(mode="after")
    def _sum_to_one(self) -> DomainShares:
        total = sum(self.as_dict().values())
        if not 0.95 <= total <= 1.05:
            raise ValueError(f"domain shares must add up to about 1.0 (they are fractions), got {total:.4f}")
        return self

    def as_dict(self) -> dict[str, float]:
        return {d: getattr(self, d) for d in DOMAINS}

    def normalized(self) -> dict[str, float]:
        """Shares scaled to sum to exactly 1 (the paper's 27/26/23/13/10 sum to 99)."""
        raw = self.as_dict()
        total = sum(raw.values())
        return {d: v / total for d, v in raw.items()}


class SourceConfig(Strict):
    """An external dataset feeding one domain's pool: your own SFT data (forge/data/sources.py)."""

    path: str = Field(min_length=1, description="A file or a folder of them, local or an fsspec URL (s3://, gs://).")
    format: Literal["auto", "jsonl", "parquet", "hf_disk"] = Field(
        "auto", description="jsonl (.gz too), parquet, or hf_disk (a datasets save_to_disk folder); auto: by suffix.")
    fields: dict[str, str] = Field(
        description="Forge's chat fields → the source's columns: messages (a list of turns), or prompt and "
        "response; system optional.")
    licence: str = Field(
        min_length=1, description="The data's licence, recorded with the pools (data/pools/sources.json).")
    name: str | None = Field(None, description="The rows' source label (default: the path).")
    max_rows: int | None = Field(None, ge=1, description="First N records only (None = all).")

    @model_validator(mode="after")
    def _mapping(self) -> SourceConfig:
        unknown = set(self.fields) - {"messages", "prompt", "response", "system"}
        if unknown:
            raise ValueError(f"fields: unknown chat field(s) {', '.join(sorted(unknown))} (messages, prompt, "
                             "response, system)")
        if "messages" not in self.fields and not {"prompt", "response"} <= set(self.fields):
            raise ValueError("fields: map either messages, or prompt and response, to the source's columns")
        return self


DomainName = Literal["code", "deep_search", "stem", "tool_use", "general"]


class PoolsConfig(Strict):
    """How many rows each per-domain pool draws from corpora/ (the mix then samples by tokens), and the external
    sources that join them."""

    max_rows_per_source: int = Field(2000, ge=10, description="Cap on rows taken from any one corpus file.")
    sources: dict[DomainName, list[SourceConfig]] = Field(
        default_factory=dict, description="Your own data, by domain: rows added to corpora/'s in that pool.")
    allow_hub_download: bool = Field(
        False, description="Sources may be hf:// paths, read from huggingface.co (hf://datasets/ORG/NAME/FILES). Off "
        "by default, as base.allow_hub_download: Forge reaches no hub unless a profile says so.")
    seed: int = 0

    @model_validator(mode="after")
    def _hub_allowed(self) -> PoolsConfig:
        for domain, sources in self.sources.items():
            for i, src in enumerate(sources):
                if src.path.startswith("hf://") and not self.allow_hub_download:
                    raise ValueError(
                        f"sources.{domain}[{i}].path: {src.path} is read from the Hugging Face Hub, and this profile "
                        "does not allow downloads: set pools.allow_hub_download: true, or download the files and "
                        "name the local copy")
        return self


class MixConfig(Strict):
    name: str = Field("sft-v1", pattern=r"^[A-Za-z0-9._-]+$", description="Written to data/mixes/<name>/.")
    shares: DomainShares = DomainShares()
    total_tokens: int = Field(1_500_000, ge=1000, description="Token budget of the whole mix.")
    num_shards: int = Field(4, ge=1, description="JSONL shards per mix (a few, not thousands: DVC cost).")
    tolerance: float = Field(0.015, gt=0, description="Largest allowed |actual − target| share.")
    max_bad_ratio: float = Field(0.01, ge=0, le=1, description="Fail when more pool rows than this are bad.")
    seed: int = 0


class SFTStageConfig(Strict):
    name: str
    max_length: int = Field(ge=16, description="Context length of this curriculum stage, in tokens.")
    max_steps: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    per_device_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)


def _paper_curriculum() -> list[SFTStageConfig]:
    # §2.1.1: the 32k → 64k curriculum of Nanbeige4-3B-2511 gains a third 256k stage.
    return [
        SFTStageConfig(name="ctx-32k", max_length=32_768, max_steps=2000, learning_rate=1e-5),
        SFTStageConfig(name="ctx-64k", max_length=65_536, max_steps=1000, learning_rate=1e-5),
        SFTStageConfig(name="ctx-256k", max_length=262_144, max_steps=500, learning_rate=5e-6),
    ]


class SFTConfig(Strict):
    curriculum: list[SFTStageConfig] = Field(default_factory=_paper_curriculum, min_length=1)
    assistant_only_loss: bool = Field(True, description="Loss only on assistant turns whose mask is 1.")
    packing: bool = Field(False, description="Pack samples into full-length rows (bench/sft_packing.py measures it).")
    save_steps: int = Field(25, ge=1, description="Trainer checkpoint interval: a killed stage resumes here.")
    solution_refinement_iterations: int = Field(
        3, ge=0, description="Most critique → revision loops per answer (§2.1.1 scales this number up)."
    )
    seed: int = 0

    @field_validator("curriculum")
    @classmethod
    def _growing_context(cls, stages: list[SFTStageConfig]) -> list[SFTStageConfig]:
        lengths = [s.max_length for s in stages]
        if lengths != sorted(lengths):
            raise ValueError(f"curriculum context lengths must not shrink, got {lengths}")
        return stages


class GRPOSettings(Strict):
    """The GRPO knobs every GRPO stage shares (§2.1.2 point-wise, §2.1.3 pair-wise): one shape, read by
    :func:`forge.training.grpo.build_grpo_config`, which turns it into TRL's ``GRPOConfig``. TRL's own defaults
    (lr 1e-6, ``loss_type='dapo'``, ``beta=0``, 8 generations, 512 tokens) are repeated here on purpose: every one of
    them is a profile decision (docs/stack.md)."""

    num_generations: int = Field(8, ge=2, description="Rollouts per prompt (§2.1.2: 8).")
    max_completion_length: int = Field(
        512, ge=8, description="Completion budget in tokens; a rollout cut here counts as overlong (§2.1.2).")
    learning_rate: float = Field(1e-6, gt=0, description="Policy learning rate (constant schedule).")
    beta: float = Field(0.0, ge=0, description="KL coefficient to the starting policy (0: no reference model).")
    loss_type: str = Field("dapo", description="TRL GRPO loss type.")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Advantages divided by the reward's std in each prompt's group (TRL's default), across "
        "the batch, or not at all (Dr. GRPO).")
    max_steps: int = Field(200, ge=1, description="Optimiser steps.")
    per_device_batch_size: int = Field(8, ge=1, description="Completions per device per step.")
    steps_per_generation: int = Field(1, ge=1, description="Optimiser steps per generation batch (TRL).")
    temperature: float = Field(1.0, gt=0, description="Rollout sampling temperature.")
    max_prompts: int = Field(4096, ge=1, description="RL prompts: from the SFT mix (general RL), or the filter's kept "
                             "problems whose k of n is nearest n/2 (code RL, forge.code.data.most_informative).")
    max_prompt_length: int = Field(
        4096, ge=16, description="Prompt tokens, whole history; longer prompts are skipped (TRL cannot cut them).")
    save_steps: int = Field(50, ge=1, description="Trainer checkpoint interval: a killed stage resumes here.")
    use_vllm: bool = Field(False, description="Rollouts through vLLM inside TRL (generation.vllm.trl_mode).")

    @model_validator(mode="after")
    def _groups_fit(self) -> GRPOSettings:
        if (self.per_device_batch_size * self.steps_per_generation) % self.num_generations:
            raise ValueError(
                f"per_device_batch_size × steps_per_generation ({self.per_device_batch_size} × "
                f"{self.steps_per_generation}) must be divisible by num_generations ({self.num_generations}): "
                "TRL scores the rollouts of one prompt as one group")
        return self


class RewardModelSettings(Strict):
    """Training a reward model (point-wise Bradley–Terry §2.1.2, pair-wise §2.1.3) on the policy's backbone."""

    max_steps: int = Field(500, ge=1, description="Optimiser steps.")
    learning_rate: float = Field(1e-5, gt=0)
    batch_size: int = Field(8, ge=1, description="Preference pairs per step.")
    max_length: int = Field(4096, ge=16, description="Tokens the RM reads per input (cut from the left).")
    eval_pairs: int = Field(200, ge=8, description="Held-out pairs for the RM's accuracy (at most a third).")
    save_steps: int = Field(50, ge=1, description="Trainer checkpoint interval: a killed stage resumes here.")


class PointwiseRLConfig(Strict):
    """§2.1.2: a Bradley–Terry reward model, then GRPO with 8 rollouts per prompt scored by it. The paper tracks
    overlong truncation falling from 5.27% to 0.38%; ``overlong_penalty`` is how the tiny profile gets there."""

    rm: RewardModelSettings = RewardModelSettings()
    grpo: GRPOSettings = GRPOSettings()
    overlong_penalty: float = Field(
        1.0, ge=0, description="Subtracted from the RM score of a rollout cut at the length limit (§2.1.2 drives "
        "truncation down; without it a small policy learns to fill the budget).")
    forge_pairs: int = Field(
        2000, ge=0, description="SFT-mix prompts answered by the weak (base) checkpoint: the reference answer over "
        "that answer, checklist-filtered, joins the RM's pairs (0: none).")
    forge_pair_max_new_tokens: int = Field(512, ge=8, description="Weak answers' budget; references are cut to it.")
    forge_eval_pairs: int = Field(200, ge=0, description="Held-out reference-over-weak pairs (at most a third).")


class PairwiseRLConfig(Strict):
    """§2.1.3: pairwise RM with swap-consistency MSE(d(a,b), −d(b,a)); reward 1 if the rollout beats the
    reference answer, else 0; multi-turn dialogues feed the whole history."""

    rm: RewardModelSettings = RewardModelSettings(max_length=8192)
    swap_consistency_weight: float = Field(1.0, ge=0, description="λ of the swap-consistency term.")
    grpo: GRPOSettings = GRPOSettings(max_completion_length=32_768)
    win_reward: float = Field(1.0, description="Reward when the rollout beats the reference answer.")
    loss_reward: float = Field(0.0, description="Reward otherwise.")
    pair_prompts: int = Field(2000, ge=8, description="Prompts answered by the strong and the weak checkpoint.")
    pair_max_new_tokens: int = Field(
        1024, ge=8, description="Budget of the strong/weak answers; reference answers are cut to it too.")
    min_pairs: int = Field(8, ge=2, description="Fewest checklist-kept pairs the RM may be trained on.")


class DrillsConfig(Strict):
    """The drills (forge/code/problems/drills.py): one-line-of-integers problems the tiny policy can learn, so code RL
    has a signal at tiny scale. Their SFT rows join the code pool, answered by a weak teacher in these proportions."""

    sft_per_op: int = Field(0, ge=0, description="SFT problems per operation added to the code pool (0: none).")
    rl_per_op: int = Field(4, ge=1, description="RL problems per operation (the 'drills' source of code_rl).")
    eval_per_op: int = Field(2, ge=1, description="Held-out problems per operation for the stage-1/stage-2 check.")
    teacher_fast: float = Field(0.4, ge=0, description="Share of SFT answers that are the linear reference.")
    teacher_slow: float = Field(0.35, ge=0, description="Share that are a correct quadratic solution.")
    teacher_broken: float = Field(0.25, ge=0, description="Share that are a plausible mistake.")


class CodeRLShared(Strict):
    """What both code RL stages read: where problems come from, the on-policy filter (§2.3.2: n = 8 rollouts, keep
    k in [1, 5]), the reward weights and the stage-2 check."""

    sources: list[Literal["forge", "humaneval", "mbpp", "mbpp-train", "drills"]] = Field(
        default_factory=lambda: ["forge"], description="Where RL problems come from (drills: the tiny family; none "
        "the eval suites score).")
    limit: int | None = Field(None, ge=1, description="First N problems per source (None = all).")
    num_rollouts: int = Field(8, ge=1, description="n rollouts per problem in the on-policy filter (§2.3.2).")
    keep_k_min: int = Field(1, ge=0, description="Smallest k of n kept (§2.3.2: 1).")
    keep_k_max: int = Field(5, ge=0, description="Largest k of n kept (§2.3.2: 5).")
    filter_temperature: float = Field(1.0, gt=0, description="Sampling temperature of the filter's rollouts.")
    max_new_tokens: int = Field(1024, ge=8, description="Answer budget of the filter's and the check's samples.")
    format_weight: float = Field(0.2, ge=0, description="R_format: a fenced block that parses.")
    time_weight: float = Field(1.0, ge=0, description="Scale of R_time (stage 2, only at pass rate 1).")
    check_samples: int = Field(4, ge=1, description="Samples per held-out problem when stage 2 is compared with "
                               "stage 1 (pass rate, share of passing answers in the optimal class).")
    drills: DrillsConfig = DrillsConfig()

    @model_validator(mode="after")
    def _k_range(self) -> CodeRLShared:
        if not self.keep_k_min <= self.keep_k_max <= self.num_rollouts:
            raise ValueError("need keep_k_min <= keep_k_max <= num_rollouts")
        return self


class CodeRLConfig(CodeRLShared):
    """§2.3.2–2.3.3: two stages of code RL from the general-RL checkpoint. Each stage filters its problems on-policy
    (n = 8 rollouts, keep k in [1, 5]; stage 1 counts solves, stage 2 solves inside the optimal class), then runs
    GRPO with R = R_format + pass rate (stage 1) and + R_time only at pass rate 1 (stage 2, Figure 3)."""

    enabled: bool = Field(True, description="Run the two code RL stages after pair-wise RL.")
    stage1: GRPOSettings = GRPOSettings()
    stage2: GRPOSettings = GRPOSettings()
    warmup: SFTStageConfig | None = Field(
        None, description="Tiny-scale only (docs/architecture.md): SFT on the drills' rows before stage 1's filter, "
        "so a policy that saw each drill once in the mix writes programs. None in the paper (its SFT carries code).")
    warmup_replay: float = Field(
        0.0, ge=0, lt=1, description="Share of the warm-up's rows drawn from the SFT mix's training rows (the rest "
        "are drill rows): replay, so the warm-up does not overwrite what SFT taught (docs/architecture.md).")

    @model_validator(mode="after")
    def _warmup_rows(self) -> CodeRLConfig:
        if self.warmup and not self.drills.sft_per_op:
            raise ValueError("code_rl.warmup trains on the drills' SFT rows: set code_rl.drills.sft_per_op > 0")
        return self


class CodeRLStage(CodeRLShared):
    """One code RL stage's share of ``code_rl`` (tasks/code.py::stage_config): the shared settings and this stage's
    GRPO settings. Its filter and its training take this, not the whole section, so a change to the other stage or
    to the warm-up leaves this stage's cache key alone (the warm-up and stage 1 reach it through its policy)."""

    stage: Literal[1, 2]
    settings: GRPOSettings


class DeepSearchConfig(Strict):
    """§2.2.1: head entities updated within six months, conditional random walks of a fixed length."""

    recency_window_days: int = Field(183, ge=1, description="'updated within the past six months' (§2.2.1).")
    walk_length_min: int = Field(2, ge=1)
    walk_length_max: int = Field(5, ge=1)
    enabled: bool = Field(True, description="Synthesize deep-search / tool-use data from the graph (forge.search).")
    reference_year: int | None = Field(None, description="'Now' for recency; None = the graph's latest date.")
    min_head_degree: int = Field(5, ge=1, description="Heads need this many neighbours (facts to walk).")
    max_hub_degree: int = Field(200, ge=2, description="Entities with more neighbours are hubs: never on a walk.")
    num_questions: int = Field(2000, ge=1, description="QA pairs to synthesize (one walk per head entity).")
    num_shards: int = Field(8, ge=1, description="Head-entity shards: one cached Prefect task each.")
    obfuscate_head_prob: float = Field(0.5, ge=0, le=1, description="Name the head by description + year range.")
    agents: list[Literal["planner", "greedy", "noisy"]] = Field(
        default_factory=lambda: ["planner", "greedy", "noisy"], description="Scripted agents run on every QA.")
    policy_agent: bool = Field(
        False, description="A ReAct agent over a model joins the scripted agents on every QA (§2.2.1: 'multiple "
        "agent frameworks'): the teacher endpoint when teacher_base_url is set, else the recipe's base model. Its "
        "trajectories pass the same critic. Off in tiny (cost: docs/architecture.md).")
    policy_agent_max_tool_calls: int = Field(6, ge=1, description="Tool calls a policy-agent episode may run.")
    policy_agent_max_new_tokens: int = Field(128, ge=8, description="Tokens per policy-agent turn.")
    use_embeddings: bool = Field(False, description="Add the MiniLM prototype test to the semantic entity filter.")
    dense_rerank: bool = Field(False, description="Re-rank BM25 hits with the bundled all-MiniLM-L6-v2.")
    review_db_url: str | None = Field(None, description="Review store URL; None = SQLite under the home.")
    teacher_base_url: str | None = Field(
        None, description="OpenAI-compatible teacher: LLM entity filter, question rewrite and turn critic when set.")
    teacher_model: str | None = Field(None, description="The model name teacher_base_url serves.")
    seed: int = 0

    @model_validator(mode="after")
    def _walk_lengths(self) -> DeepSearchConfig:
        _needs_model(self.teacher_base_url, self.teacher_model, "teacher_model")
        if not self.walk_length_min <= self.walk_length_max:
            raise ValueError("need walk_length_min <= walk_length_max")
        return self


class AgenticRLConfig(Strict):
    """The abstract and §2.2's agentic RL ("a lightweight agentic RL stage" after code RL, §2.4): the policy answers
    questions with the offline tools in multi-turn episodes (up to 600 tool calls in the paper), rewarded per
    trajectory (the final answer is the gold one) and per turn (§2.2.1: a turn the critic fails gets no loss or a
    negative reward). The update is a group-relative policy gradient, forge/training/agentic.py."""

    task: Literal["lookups", "links"] = Field(
        "lookups", description="The questions and tools: 'lookups' (forge/search/lookups.py) with search, visit and "
        "python; 'links', the same lookups asked from the head's page and answered by following its links (follow) "
        "and citing the page reached: no name to copy, which a tiny policy does not learn (README, 'Agentic RL').")
    link_relations: int = Field(12, ge=1, description="task 'links': the relations its questions take (the most "
                                "common ones lookups take).")
    warmup: SFTStageConfig | None = Field(
        None, description="Tiny scale only: SFT on the scripted solutions of other heads' questions before RL (task "
        "'links': forge.search.lookups.LinkAgent), so the policy writes the calls at all. None in the paper.")
    warmup_questions: int = Field(2000, ge=1, description="Questions whose solutions the warm-up trains on (their "
                                  "heads none of RL's).")
    warmup_mix: Literal["natural", "balanced", "contrast"] = Field(
        "natural", description="The warm-up's relations: 'natural', as lookups draw them (the graph's proportions: "
        "a common relation asked ten times as often as a rare one); 'balanced', each relation sequence in turn while "
        "the graph has questions of it (forge.search.lookups.balanced_by_relations); 'contrast', each head asked "
        "about every link relation its page has, so only the question's words tell the link (1 hop: "
        "forge.search.lookups.contrast_link_qas). RL and its check stay natural.")
    questions: int = Field(2000, ge=1, description="1–2-hop lookup questions whose heads no SFT row visited.")
    question_order: Literal["shuffled", "by_relation"] = Field(
        "shuffled", description="The order RL's steps take the questions in: 'shuffled' (seeded), so each relation "
        "as often as the graph asks it; 'by_relation', shuffled and then the relation sequences taking turns "
        "(forge.search.rollout.SearchEnvironment), so a common relation is not trained ten times as often as a rare "
        "one.")
    check_questions: int = Field(
        0, ge=0, description="Held-out questions (heads RL and the warm-up never saw) each answered once, sampled as "
        "the rollouts are, by the start and the trained policy: the stage's check. 0: none.")
    min_hops: int = Field(1, ge=1, description="Fewest hops of a lookup question.")
    max_hops: int = Field(2, ge=1, description="Most hops of a lookup question (one visit per hop).")
    num_generations: int = Field(8, ge=2, description="Episodes per question: the group advantages compare within.")
    questions_per_step: int = Field(8, ge=1, description="Questions per optimiser step.")
    max_steps: int = Field(100, ge=1, description="Optimiser steps (one batch of fresh episodes each).")
    learning_rate: float = Field(1e-6, gt=0, description="Policy learning rate (AdamW, constant).")
    beta: float = Field(0.0, ge=0, description="KL coefficient to the starting policy (0: no reference model).")
    temperature: float = Field(1.0, gt=0, description="Rollout sampling temperature.")
    max_tool_calls: int = Field(600, ge=1, description="Tool calls an episode may run (abstract: up to 600).")
    max_new_tokens: int = Field(4096, ge=8, description="Tokens per assistant turn.")
    context_tokens: int = Field(
        262_144, ge=64, description="Model context (§2.1.1: 256k); the history shown is cut to leave one turn's "
        "max_new_tokens free.")
    context_strategy: Literal["truncate", "elide"] = Field(
        "truncate", description="How old tool responses are cut when the history does not fit: to their first "
        "truncated_tool_chars characters, or to a stub; then the oldest steps are folded into a note.")
    keep_recent_tool_responses: int = Field(2, ge=0, description="Newest tool responses never cut.")
    truncated_tool_chars: int = Field(400, ge=0, description="Characters an old tool response keeps (truncate).")
    trajectory_weight: float = Field(1.0, ge=0, description="Weight of the group-normalized trajectory reward.")
    turn_weight: float = Field(
        0.5, ge=0, description="A rejected turn's advantage is -turn_weight (rejected_turns='negative_reward').")
    rejected_turns: Literal["no_loss", "negative_reward", "no_credit"] = Field(
        "no_loss", description="A turn the critic fails (§2.2.1) trains on nothing ('no_loss'), on the negative reward "
        "-turn_weight ('negative_reward'), or on its trajectory's group advantage where that is negative and on "
        "nothing where it is not ('no_credit': blamed with its failed episode, never credited).")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per forward/backward pass (gradients add up).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping.")
    save_steps: int = Field(25, ge=1, description="Checkpoint interval: a killed stage resumes here.")
    stop_after_idle_steps: int = Field(
        0, ge=0, description="Stop once this many steps in a row changed no weight (no trained token carried an "
        "advantage), saying so: the unchanged policy goes on drawing from the same distribution. 0: every step runs.")

    @model_validator(mode="after")
    def _fits(self) -> AgenticRLConfig:
        if not self.min_hops <= self.max_hops:
            raise ValueError("need min_hops <= max_hops")
        if self.warmup and self.task != "links":
            raise ValueError("agentic_rl.warmup trains on the links task's scripted solutions: set task: links")
        if self.warmup_mix == "contrast" and self.max_hops != 1:
            raise ValueError("agentic_rl.warmup_mix 'contrast' asks 1-hop questions: set max_hops: 1")
        if self.max_new_tokens >= self.context_tokens:
            raise ValueError(f"max_new_tokens ({self.max_new_tokens}) must leave room in context_tokens "
                             f"({self.context_tokens}) for the question")
        return self


class VLLMConfig(Strict):
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    max_model_len: int = Field(262_144, ge=1024)
    dtype: Literal["bfloat16", "float16", "auto"] = "bfloat16"
    trl_mode: Literal["colocate", "server"] = Field(
        "colocate", description="How TRL's GRPO reaches vLLM: an engine inside each training rank, or a server the "
        "stage starts on server_gpus (forge/training/vllm_server.py).")
    server_gpus: list[int] = Field(
        default_factory=list, description="CUDA device indexes the server mode's vLLM runs on, one per tensor-"
        "parallel rank; the training ranks take devices 0..num_processes-1, so name others.")
    server_host: str = Field("127.0.0.1", description="Where the stage's vLLM server listens (server mode).")
    server_port: int = Field(8000, ge=1, le=65535, description="Its HTTP port (server mode).")
    server_start_timeout_s: float = Field(
        900.0, gt=0, description="How long the stage waits for its server to answer /health (loading a 3B model "
        "and capturing CUDA graphs take minutes).")

    @model_validator(mode="after")
    def _server_gpus(self) -> VLLMConfig:
        if self.trl_mode == "server" and len(self.server_gpus) != self.tensor_parallel_size:
            raise ValueError(f"trl_mode server needs server_gpus: one CUDA device per tensor-parallel rank "
                             f"({self.tensor_parallel_size}), got {self.server_gpus}")
        return self


class GenerationConfig(Strict):
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    openai_base_url: str | None = Field(None, description="OpenAI-compatible endpoint (teacher models).")
    openai_model: str | None = Field(None, description="The model name openai_base_url serves (vLLM refuses others).")
    vllm: VLLMConfig = VLLMConfig()
    temperature: float = Field(0.6, ge=0)
    top_p: float = Field(0.95, gt=0, le=1)
    batch_size: int = Field(
        48, ge=1, description="Prompts per `generate` call of the local transformers backend, for the stages that "
        "sample through it (the reward models' pairs, refinement, code RL's filters and check; the evaluations set "
        "their own). vLLM and an endpoint schedule their own batches. A small model's sampling on a CPU is bound by "
        "the work of each decode step, which grows little with the rows: on 2 cores 240 prompts x 48 tokens took "
        "1.22x less time at 48 than at 16 (bench/backend_batch.py, a Zen 4).")

    @model_validator(mode="after")
    def _endpoint_model(self) -> GenerationConfig:
        _needs_model(self.openai_base_url, self.openai_model, "openai_model")
        return self


class TrainingRuntimeConfig(Strict):
    bf16: bool = Field(
        False, description="Mixed precision for every training stage (bf16 autocast over fp32 weights; frozen "
        "reward models score in bf16). `auto` is resolved when the profile loads: on where bf16 trains faster than "
        "fp32 (a bf16 GPU, a CPU with AMX, an AMD CPU with AVX-512-BF16; forge/hardware.py), off elsewhere, so the "
        "loaded profile says which it got.")
    gradient_checkpointing: bool = False
    threads: int = Field(0, ge=0, description="torch threads; 0 = all cores.")
    fused_lm_head: bool = Field(
        True, description="SFT's loss and GRPO's token log-probabilities through TRL's fused LM head, which scores "
        "tokens in tiles and never holds the full logits (a GPU's memory at a 150k vocabulary and long contexts). "
        "False takes the same values from the logits: on 2 CPU cores at the tiny 4k vocabulary SFT steps 1.4x and "
        "GRPO steps 1.3x faster (bench/sft_lm_head.py).")
    num_processes: int = Field(
        1, ge=1, description="Processes per training stage. Above 1 every training stage but the tiny base's "
        "pre-training (SFT, the reward models, GRPO, code RL, agentic RL) runs under `accelerate launch` as a child "
        "of its task (forge/training/launch.py): one per GPU, or CPU ranks over gloo.")
    accelerate_config: str | None = Field(
        None, description="An accelerate config the launched stages use: a name under infra/accelerate/ (fsdp, "
        "zero3) or a path. Setting it launches the stages even with num_processes 1.")

    @field_validator("bf16", mode="before")
    @classmethod
    def _resolve_auto(cls, value: Any) -> Any:
        if value != "auto":
            return value
        from forge.hardware import bf16_pays_off

        return bf16_pays_off()


class ClusterConfig(Strict):
    """Where independent stages fan out (forge/fanout.py); where to compute, never what: no stage's input."""

    ray_address: str | None = Field(
        None, description="A Ray cluster (HOST:PORT; `forge stack up --ray` starts one): deep-search synthesis "
        "shards, code-judge batches and eval suites run on it through prefect-ray's task runner. None = in this "
        "process.")


class HumanEvalConfig(Strict):
    limit: int | None = Field(None, ge=1, description="First N problems only (None = all 164).")
    max_new_tokens: int = Field(128, ge=1)
    batch_size: int = Field(16, ge=1)
    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit per problem in the sandbox.")
    memory_mb: int = Field(512, ge=64)
    workers: int = Field(2, ge=1)


CodeSource = Literal["forge", "humaneval", "mbpp", "mbpp-train"]  # mbpp: MBPP's test split (tasks 11–510)


class CodeSuiteConfig(Strict):
    """The code suite on Forge's judge (forge/evals/code.py): pass@1 (greedy) per problem source."""

    sources: list[Literal["forge", "humaneval", "mbpp"]] = Field(
        default_factory=lambda: ["mbpp"], description="Problem sources: forge, humaneval, mbpp (its test split).")
    limit: int | None = Field(None, ge=1, description="First N problems per source (None = all).")
    max_new_tokens: int = Field(256, ge=1)
    batch_size: int = Field(16, ge=1)
    time_limit_s: float = Field(2.0, gt=0, description="Per-test limit in the sandbox.")
    memory_mb: int = Field(512, ge=64)


EVALUATED_ALWAYS = ("humaneval",)  # the HumanEval stage (eval.humaneval) runs in every recipe


class CodeSFTConfig(Strict):
    """§2.3.2 SFT data construction: candidates sampled per problem from the teacher endpoint
    (``generation.openai_base_url``) when one is set, else the base model; the judge keeps those that pass every test
    and are time-optimal (or of the best class measured among the correct ones), and they join the code pool before
    the mix. Off in tiny: its code SFT rows are the drills' weak teacher's (docs/architecture.md)."""

    enabled: bool = Field(False, description="Build judged code SFT rows before the mix (§2.3.2).")
    sources: list[CodeSource] = Field(
        default_factory=lambda: ["mbpp-train"],
        description="Problem sources (mbpp-train: MBPP's train tasks); none the eval suites score.")
    limit: int | None = Field(None, ge=1, description="First N problems per source (None = all).")
    n_candidates: int = Field(4, ge=1, description="Candidates sampled per problem.")
    temperature: float = Field(0.8, ge=0)
    max_new_tokens: int = Field(384, ge=1)


class CodeJudgeConfig(Strict):
    """§2.3.1's judge system, one for code SFT data, the code RL filter, R_time and stage 2's check: the sandbox for
    correctness; for time complexity an instruct model asked for the class when an endpoint is set (the paper's
    judge), else timed runs on growing inputs (the empirical judge, and the fallback when the model's answer names
    no class)."""

    complexity_model_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (…/v1) of a complexity judge model; None = empirical judge."
    )
    complexity_model: str | None = Field(None, description="The model name complexity_model_url serves.")

    @model_validator(mode="after")
    def _judge_model(self) -> CodeJudgeConfig:
        _needs_model(self.complexity_model_url, self.complexity_model, "complexity_model")
        return self


class SuiteConfig(Strict):
    """One model-run eval suite (forge/evals/suites.py): how many items, the answer budget, the batch."""

    limit: int | None = Field(None, ge=1, description="First N items (None = all).")
    max_new_tokens: int = Field(512, ge=1)
    batch_size: int = Field(16, ge=1)


class MathSuiteConfig(SuiteConfig):
    sources: list[Literal["gsm8k", "math500", "aime24", "amc23"]] = Field(
        ["gsm8k", "math500", "aime24", "amc23"], min_length=1, description="Math sets, from corpora/.")
    limit: int | None = Field(None, ge=1, description="First N items of each source (None = all).")
    check_time_limit_s: float = Field(10.0, gt=0, description="Seconds per answer check before it is a timeout.")


class AlignmentSuiteConfig(SuiteConfig):
    """HH-RLHF held-out conversations; the pair-wise RM judges the model's turn against the reference."""

    judge_max_length: int = Field(1024, ge=32, description="Judge input tokens (history + both answers).")


class DeepSearchSuiteConfig(SuiteConfig):
    """Held-out lookup questions answered through the offline search tools (forge/search/lookups.py)."""

    questions: int = Field(100, ge=1)
    min_hops: int = Field(1, ge=1)
    max_hops: int = Field(2, ge=1)
    max_tool_calls: int = Field(8, ge=1, description="Tool calls before the episode must answer.")
    multihop_questions: int = Field(0, ge=0, description=(
        "2Wiki/HotpotQA/MuSiQue eval questions whose evidence the offline wiki holds (forge/search/evaluation.py), "
        "taken in turn from the three sets, after the lookups."))


class EvalConfig(Strict):
    """The evaluation matrix (docs/architecture.md): code on the judge, then the five model-run suites."""

    humaneval: HumanEvalConfig = HumanEvalConfig()
    code: CodeSuiteConfig = CodeSuiteConfig()
    math: MathSuiteConfig = MathSuiteConfig()
    science: SuiteConfig = SuiteConfig()
    tool_use: SuiteConfig = SuiteConfig()
    alignment: AlignmentSuiteConfig = AlignmentSuiteConfig()
    deep_search: DeepSearchSuiteConfig = DeepSearchSuiteConfig()
    heldout_rows: int = Field(64, ge=1, description="Held-out mix rows for the SFT loss metric.")


GateDomain = Literal["code", "math", "science", "alignment", "tool_use", "deep_search", "general"]  # the paper's §3
GATE_DOMAINS: tuple[str, ...] = get_args(GateDomain)


class GatedMetric(Strict):
    """One metric the promotion gate compares, and how."""

    direction: Literal["higher", "lower"] = Field(description="Which way is better.")
    tolerance: float = Field(0.0, ge=0, description="How much worse than the champion the candidate may be.")
    weight: float = Field(
        0.0, ge=0, description="Its share of the weighted aggregate the candidate must improve; 0: a guard only "
        "(it can block the candidate, it never counts towards an improvement).")
    domain: GateDomain | None = Field(
        None, description=f"The paper's domain it measures ({', '.join(GATE_DOMAINS)}), named in the evidence.")


def _default_gate() -> dict[str, GatedMetric]:
    # Guards only (no weight): a profile that declares no gate keeps the per-metric rule alone.
    return {
        "humaneval_pass_at_1": GatedMetric(direction="higher", tolerance=0.02, domain="code"),
        "sft_heldout_loss": GatedMetric(direction="lower", tolerance=0.05, domain="general"),
    }


class PromotionConfig(Strict):
    """Gate for moving `champion` (registry/promotion.py), a matrix of declared metrics:

    - every declared metric must be on the candidate (an eval that did not run is not a pass), even the first;
    - no metric may be worse than the champion's beyond its tolerance;
    - the weighted aggregate, sum of ``weight × improvement`` over the weighted metrics both versions carry, must
      be above ``tie_tolerance`` (within it is a tie, decided by ``on_tie``). With no weighted metric the aggregate
      rule does not apply and the gate is the per-metric rule alone;
    - with ``require_signoff``, a person must have signed the version off (``forge signoff VERSION --by NAME``).

    Only declared metrics count: a version may carry other ``metric.*`` tags (set by any stage) and they neither
    block nor pass it."""

    metrics: dict[str, GatedMetric] = Field(
        default_factory=_default_gate, min_length=1,
        description="metric name → direction, tolerance, weight, domain; every one must be on the candidate version.")
    on_tie: Literal["refuse", "promote"] = Field(
        "refuse", description="When the weighted aggregate is a tie (within tie_tolerance of 0): 'refuse' keeps the "
        "champion (a new version must earn the move), 'promote' moves to the newer version.")
    tie_tolerance: float = Field(
        1e-9, ge=0, description="|aggregate| at or below this is a tie (float noise; raise it to ignore small gains).")
    require_signoff: bool = Field(
        False, description="Refuse a version that no person signed off (tag promotion.signoff, set by forge signoff).")


class RefinementConfig(Strict):
    """§2.1.1 Solution Refinement (critique → revision, at most ``sft.solution_refinement_iterations`` rounds, an
    answer revised only when its critique flags it) and CoT Reconstruction, run on answers of the SFT mix before
    SFT: the refined rows replace their originals in the mix, the refined-over-draft pairs join the point-wise RM's
    data. Generated by the teacher endpoint (``generation.openai_base_url``) when set, else by the base model."""

    enabled: bool = Field(True, description="Refine SFT answers and rebuild their reasoning before SFT (§2.1.1).")
    items: int = Field(1000, ge=1, description="SFT answers to refine (train rows of the mix, in a seeded order).")
    domains: list[str] = Field(default_factory=lambda: ["general", "stem", "code"], min_length=1,
                               description=f"Mix domains whose answers are refined, of {', '.join(DOMAINS)}.")
    max_new_tokens: int = Field(1024, ge=8, description="Budget of each critique, revision and reasoning trace.")
    max_prompt_length: int = Field(4096, ge=16, description="Questions longer than this (in tokens) are skipped.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature of every call (0: greedy).")

    @field_validator("domains")
    @classmethod
    def _known_domains(cls, domains: list[str]) -> list[str]:
        unknown = sorted(set(domains) - set(DOMAINS))
        if unknown:
            raise ValueError(f"unknown domain(s) {', '.join(unknown)}: use some of {', '.join(DOMAINS)}")
        return domains


class RecipeConfig(Strict):
    profile: str = "tiny"
    seed: int = 0
    base: BaseModelConfig = BaseModelConfig()
    pools: PoolsConfig = PoolsConfig()
    mix: MixConfig = MixConfig()
    sft: SFTConfig = SFTConfig()
    pointwise_rl: PointwiseRLConfig = PointwiseRLConfig()
    pairwise_rl: PairwiseRLConfig = PairwiseRLConfig()
    refinement: RefinementConfig = RefinementConfig()
    code_judge: CodeJudgeConfig = CodeJudgeConfig()
    code_sft: CodeSFTConfig = CodeSFTConfig()
    code_rl: CodeRLConfig = CodeRLConfig()
    deep_search: DeepSearchConfig = DeepSearchConfig()
    agentic_rl: AgenticRLConfig = AgenticRLConfig()
    generation: GenerationConfig = GenerationConfig()
    runtime: TrainingRuntimeConfig = TrainingRuntimeConfig()
    cluster: ClusterConfig = ClusterConfig()
    eval: EvalConfig = EvalConfig()
    promotion: PromotionConfig = PromotionConfig()

    @model_validator(mode="after")
    def _context_fits_model(self) -> RecipeConfig:
        longest = self.sft.curriculum[-1].max_length
        if self.base.source == "build" and longest > self.base.max_position_embeddings:
            raise ValueError(
                f"sft.curriculum: ends at {longest} tokens but base.max_position_embeddings is "
                f"{self.base.max_position_embeddings}: raise max_position_embeddings or shorten the curriculum"
            )
        return self

    @model_validator(mode="after")
    def _trains_on_no_evaluated_problem(self) -> RecipeConfig:
        evaluated = {*EVALUATED_ALWAYS, *self.eval.code.sources}
        for name, cfg in (("code_sft", self.code_sft), ("code_rl", self.code_rl)):
            shared = [s for s in cfg.sources if s in evaluated] if cfg.enabled else []
            if shared:
                raise ValueError(
                    f"{name}.sources: {', '.join(shared)} would train on problems the code evaluation scores "
                    f"(eval.code.sources: {', '.join(self.eval.code.sources)}; HumanEval is always scored): "
                    "take them out of one of the two")
        return self


class ConfigError(InputError):
    """A profile that does not validate; the message names the file and each bad field."""


def profile_names() -> list[str]:
    """The profiles that ship in ``configs/``, by name."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


# A flow parameter naming a profile: the Prefect run form shows a choice of the shipped profiles (and a deployment
# refuses any other value); called in-process (``forge run --profile path.yaml``), a YAML path is accepted too.
ProfileName = Annotated[str, WithJsonSchema({
    "type": "string", "title": "profile", "enum": profile_names(),
    "description": "A profile in configs/ (the tiny one runs on a CPU; overrides go in the next field).",
})]


def profile_path(name_or_path: str | Path) -> Path:
    """``configs/<name>.yaml`` for a profile name, or the YAML path itself; a clear error when neither exists."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIGS_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(profile_names())
        raise ConfigError(f"{path}: no such profile (known: {known})")
    return path


def _nested(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": {"d": 2}}`` → ``{"a": {"b": 1}, "c": {"d": 2}}``: dotted keys become nested mappings."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        *parents, leaf = str(key).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"overrides: {key}: {part} is both a value and a section")
        node[leaf] = _nested(value) if isinstance(value, Mapping) else value
    return out


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _in_overrides(loc: tuple, overrides: dict[str, Any]) -> bool:
    node: Any = overrides
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The config model a location inside :class:`RecipeConfig` points into (None past a list, dict or value)."""
    model: type[BaseModel] = RecipeConfig
    for part in loc:
        field = model.model_fields.get(str(part)) if isinstance(part, str) else None
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _explain(error: dict) -> str:
    """pydantic's message, plus the closest valid key for an unknown one and the value given for a wrong one."""
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1) if model else []
        return f"unknown key{f': did you mean {close[0]!r}?' if close else ''}"
    if error["type"].endswith(("_type", "_parsing", "literal_error")) and "input" in error:
        return f"{error['msg']} (got {error['input']!r})"
    return error["msg"]


def load_profile(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> RecipeConfig:
    """Load ``configs/<name>.yaml`` (or a YAML path) into a validated :class:`RecipeConfig`.

    ``overrides`` (nested, or with dotted keys such as ``"sft.packing"``) is merged over the file before
    validation; each error names the file, the field, and whether the bad value came from the overrides.
    """
    path = profile_path(name_or_path)
    from forge.text import NotUTF8Error, decode_utf8

    try:
        text = decode_utf8(path.read_bytes(), path)
    except NotUTF8Error as err:
        raise ConfigError(str(err)) from None
    loader = yaml.SafeLoader(text)
    try:  # one parse: the node tree (for line numbers) and the data built from it, as yaml.safe_load does
        node = loader.get_single_node()
        raw = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{at}: not valid YAML: {getattr(err, 'problem', None) or err}") from None
    finally:
        loader.dispose()
    if raw is None:
        raise ConfigError(f"{path}: the profile is empty (expected sections such as base:, sft:, data:)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a profile is a mapping of sections, got {type(raw).__name__}")
    extra = _nested(overrides or {})
    try:
        return RecipeConfig.model_validate(_merged(raw, extra))
    except ValidationError as err:
        lines = []
        for e in map(_located, err.errors()):
            where = ".".join(str(p) for p in e["loc"]) or "<root>"
            overridden = _in_overrides(e["loc"], extra)
            origin = " (from overrides)" if overridden else ""
            line = "" if overridden else f":{_line_of(node, e['loc'])}"
            lines.append(f"{path}{line}: {where}{origin}: {_explain(e)}")
        raise ConfigError("\n".join(lines)) from None


_FIELD_FIRST = re.compile(r"^Value error, ([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+): (.+)$", re.DOTALL)


def _located(error: dict) -> dict:
    """A whole-profile check (a validator of :class:`RecipeConfig`) raises "field.path: reason": the error is put at
    that field, so it names the file's line as a field's own error does, instead of ``<root>``."""
    match = _FIELD_FIRST.match(error["msg"]) if not error["loc"] else None
    if not match:
        return error
    return {**error, "loc": tuple(match.group(1).split(".")), "msg": match.group(2), "type": "value_error"}


def _line_of(node: yaml.Node | None, loc: tuple) -> int:
    """The line (1-based) of the deepest part of ``loc`` the YAML holds: the bad key or value, else its parent."""
    line = 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
