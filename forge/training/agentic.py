"""Agentic RL's trainer (§2.2, abstract): a group-relative policy gradient over multi-turn tool episodes, with
trajectory- and turn-level rewards.

Each step the environment (:class:`forge.search.rollout.SearchEnvironment`, handed in by tasks/agentic.py: training
and search import neither way) runs ``num_generations`` episodes of each of its questions with
:class:`TurnPolicy` (this model, sampling) and judges every assistant turn with the §2.2.1 critic. Then
(:func:`turn_advantages`):

- trajectory reward R = 1 when the final answer is the gold one, else 0; within a question's group
  Â = (R − mean) / std (0 when the whole group agrees);
- a turn the critic passed gets the advantage ``trajectory_weight · Â`` on every token it generated;
- a turn the critic failed gets none of its trajectory's credit: with ``rejected_turns='no_loss'`` its tokens are
  masked out (no loss, zero gradient), with ``'negative_reward'`` they get the advantage −``turn_weight``, with
  ``'no_credit'`` the trajectory's advantage when it is negative (the group did better) and no loss otherwise;
- tool responses, the question and the system prompt are context, never trained on.
Loss (:func:`sequence_loss`) = −Σ A·log π(token) / (number of trained tokens), plus β·KL to the starting policy
(the k3 estimator) when β > 0. There is one update per batch of fresh episodes, so the sampling policy is the one
being updated (ratio 1) and no clipping is needed.

Why not TRL 1.16's ``GRPOTrainer(environment_factory=…)`` or its ``rollout_func`` (docs/stack.md):
- its advantage is one scalar per rollout. ``rollout_func`` may return an ``env_mask`` that zeroes tokens (the
  ``no_loss`` mode), but a rejected turn cannot get a negative reward while the rest of its episode is credited;
- it trains one prompt + one completion per rollout. A long episode whose old tool responses were cut to fit the
  context has no such single sequence: its turns were generated from different histories;
- its tool loop parses calls through a ``response_schema`` on the tokenizer and scores a rollout as it ends;
  Forge parses calls in one place (:func:`forge.chat.parse_assistant_text`) and its critic judges the whole
  trajectory before any turn's reward exists.

Under ``accelerate launch`` (forge/training/launch.py) each rank rolls out its share of a step's questions, divides
its loss by the trained tokens of all ranks and adds its gradients to theirs before the step (not DDP: ranks may run
different numbers of micro-batches), so 2 ranks take the update one process would (tests/training/test_agentic.py).

A turn is trained on the exact prompt ids it was generated from (the history as shown, cut or not) and the ids it
generated; consecutive turns whose prompts extend each other token for token are packed into one sequence
(:func:`pack_turns`), so an uncut episode is one forward pass.

    result = train_agentic(policy_dir, env, cfg.agentic_rl, cfg.runtime, out_dir, seed=0)
    result.window_metrics(["trajectory_reward"])      # first / last 20% of the steps
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from forge.chat import ENDOFTEXT, IM_END, render_chat
from forge.config import AgenticRLConfig, TrainingRuntimeConfig
from forge.data.schemas import SearchTrajectory
from forge.training.checkpoints import MetricsLogger, apply_runtime, save_atomically, training_device, work_dir_for
from forge.training.grpo import GRPOResult
from forge.training.launch import (
    assert_replicas_agree,
    barrier,
    broadcast_from_rank0,
    gather_objects,
    is_main_process,
    join_process_group,
    rank,
    sum_gradients,
    sum_over_ranks,
    world_size,
)

logger = logging.getLogger(__name__)

Chat = list[dict[str, Any]]
STATE_FILE = "agentic_state.pt"
MIN_SHARED_PREFIX = 32  # tokens a micro-batch's rows must share before the prefix is run once
CURVES = ("trajectory_reward", "turn_reward", "rejected_turn_share", "tool_calls")
CHECK_BATCH = 32  # episodes the held-out check samples at once (no update follows, so no micro-batch bound)


@dataclass(frozen=True)
class TurnTokens:
    """One assistant turn as the policy produced it: the prompt ids it saw and the ids it generated (its closing
    ``<|im_end|>`` included unless it ran out of tokens)."""

    prompt_ids: list[int]
    completion_ids: list[int]


class EpisodeLike(Protocol):
    """One judged episode as the environment hands it over (forge/search/rollout.py's ``Rollout``)."""

    group: str
    trajectory: SearchTrajectory  # with one verdict per assistant turn
    records: list[TurnTokens]  # what TurnPolicy.generate returned for each assistant turn, in order
    tool_calls: int
    context_reductions: int
    ended: str


class Environment(Protocol):
    def rollout(self, policy: Any, step: int, shard: tuple[int, int] = (0, 1)) -> list[EpisodeLike]:
        """The step's judged episodes; under a launch, rank r of n runs the ``shard=(r, n)`` share of them."""
        ...


class TurnPolicy:
    """The model being trained as the environment's policy: renders each history with the chat template, samples
    one turn per history (batched, left-padded) and keeps the token ids with the text."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, max_new_tokens: int,
                 temperature: float, batch_size: int) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        vocab = tokenizer.get_vocab()
        self.stop_ids = [vocab[t] for t in (IM_END, ENDOFTEXT) if t in vocab] or [tokenizer.eos_token_id]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]

    def _prompt_ids(self, chat: Chat, tools: list[dict[str, Any]]) -> list[int]:
        text, _ = render_chat(self.tokenizer, chat, tools, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, chat: Chat, tools: list[dict[str, Any]]) -> int:
        return len(self._prompt_ids(chat, tools))

    @torch.no_grad()
    def generate(self, chats: list[Chat], tools: list[dict[str, Any]]) -> list[tuple[str, TurnTokens]]:
        prompts = [self._prompt_ids(chat, tools) for chat in chats]
        out: list[tuple[str, TurnTokens]] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            width = max(len(ids) for ids in chunk)
            input_ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, ids in enumerate(chunk):  # left padding: every row's last prompt token at position -1
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                attention[row, width - len(ids) :] = 1
            generated = self.model.generate(
                input_ids=input_ids.to(self.model.device), attention_mask=attention.to(self.model.device),
                do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens,
                eos_token_id=self.stop_ids, pad_token_id=self.pad_id)
            for row, ids in enumerate(chunk):
                new = generated[row, width:].tolist()
                stop = next((k for k, t in enumerate(new) if t in self.stop_ids), None)
                new = new if stop is None else new[: stop + 1]
                out.append((self.tokenizer.decode(new, skip_special_tokens=True), TurnTokens(ids, new)))
        return out


def turn_advantages(episodes: list[EpisodeLike], cfg: AgenticRLConfig) -> list[list[tuple[float, bool]]]:
    """Per episode, per assistant turn: (advantage, trained?) — see the module docstring for the rule.

    A turn without a verdict counts as passed (the critic judges every turn; this keeps an unjudged trajectory
    trainable on its trajectory reward alone)."""
    rewards = [float(e.trajectory.correct) for e in episodes]
    groups: dict[str, list[float]] = defaultdict(list)
    for e, r in zip(episodes, rewards, strict=True):
        groups[e.group].append(r)
    out = []
    for e, r in zip(episodes, rewards, strict=True):
        mean, std = statistics.fmean(groups[e.group]), statistics.pstdev(groups[e.group])
        advantage = cfg.trajectory_weight * (r - mean) / std if std > 0 else 0.0
        passed = {v.message_index: v.passed for v in e.trajectory.verdicts}
        turns = []
        for index in e.trajectory.assistant_indices():
            if passed.get(index, True):
                turns.append((advantage, True))
            elif cfg.rejected_turns == "negative_reward":
                turns.append((-cfg.turn_weight, True))
            elif cfg.rejected_turns == "no_credit" and advantage < 0:
                turns.append((advantage, True))
            else:  # no_loss, or no_credit in a trajectory that did no worse than its group
                turns.append((0.0, False))
        out.append(turns)
    return out


@dataclass
class PackedSequence:
    """Token ids with, per token, whether it is trained (``mask``) and its advantage. Index j is about token j
    (predicted from the tokens before it)."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], trained: bool, advantage: float) -> None:
        self.ids += ids
        self.mask += [int(trained)] * len(ids)
        self.advantages += [advantage if trained else 0.0] * len(ids)


def pack_turns(turns: list[tuple[TurnTokens, float, bool]]) -> list[PackedSequence]:
    """An episode's turns as few sequences as possible: a turn whose prompt starts with the whole sequence so far
    (the previous turns, their tool responses, uncut) continues it; otherwise it starts a new one. Prompt tokens
    (system, question, tool responses, earlier turns as context) carry mask 0."""
    sequences: list[PackedSequence] = []
    for tokens, advantage, trained in turns:
        current = sequences[-1] if sequences else None
        if current is not None and tokens.prompt_ids[: len(current.ids)] == current.ids:
            context = tokens.prompt_ids[len(current.ids) :]
        else:
            current = PackedSequence()
            sequences.append(current)
            context = tokens.prompt_ids
        current.extend(context, False, 0.0)
        current.extend(tokens.completion_ids, trained, advantage)
    return sequences


def collate(sequences: list[PackedSequence], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors, each ``(batch, longest)``: ``input_ids``, ``attention_mask``, ``mask``,
    ``advantages``."""
    width = max(len(s.ids) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width))
    advantages = torch.zeros((len(sequences), width))
    for row, s in enumerate(sequences):
        n = len(s.ids)
        ids[row, :n], attention[row, :n] = torch.tensor(s.ids), 1
        mask[row, :n], advantages[row, :n] = torch.tensor(s.mask, dtype=torch.float), torch.tensor(s.advantages)
    return {"input_ids": ids, "attention_mask": attention, "mask": mask, "advantages": advantages}


def shared_prefix_logits(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         min_prefix: int = MIN_SHARED_PREFIX) -> torch.Tensor:
    """Logits ``(B, T, V)`` of right-padded sequences, the prefix every row shares (the system prompt with the
    tool specs, most of a tiny profile's tokens) run once: its keys and values are repeated over the batch for the
    rest. Equal to ``model(input_ids, attention_mask).logits`` (tests/training/test_agentic.py), gradients
    included; a plain forward pass when the shared prefix is shorter than ``min_prefix``."""
    rows, width = input_ids.shape
    same = ((input_ids == input_ids[:1]) & (attention_mask == 1)).all(dim=0).tolist()
    prefix = min(same.index(False) if False in same else width, width - 1)
    if rows == 1 or prefix < min_prefix:
        return model(input_ids=input_ids, attention_mask=attention_mask).logits
    head = model(input_ids=input_ids[:1, :prefix], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(prefix, width, device=input_ids.device).expand(rows, -1)
    tail = model(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, past_key_values=cache,
                 position_ids=positions, use_cache=False)
    return torch.cat([head.logits.expand(rows, -1, -1), tail.logits], dim=1)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log π(token j | tokens < j) for j ≥ 1: logits ``(B, T, V)``, ids ``(B, T)`` → ``(B, T-1)``."""
    return torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def sequence_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], normalizer: float,
                  ref_logprobs: torch.Tensor | None = None, beta: float = 0.0) -> tuple[torch.Tensor, float]:
    """The policy-gradient loss of one micro-batch and its summed KL; ``normalizer`` is the step's trained-token
    count, so micro-batches add up to the step's token mean. Tokens with mask 0 contribute nothing."""
    logp = token_logprobs(logits, batch["input_ids"])
    mask, advantages = batch["mask"][:, 1:], batch["advantages"][:, 1:]
    loss = -(advantages * logp * mask).sum() / normalizer
    kl_sum = 0.0
    if ref_logprobs is not None and beta > 0:
        delta = torch.where(mask > 0, ref_logprobs - logp, 0.0)  # padding's log-ratios could overflow exp()
        kl = (torch.exp(delta) - delta - 1) * mask
        loss = loss + beta * kl.sum() / normalizer
        kl_sum = float(kl.sum().detach())
    return loss, kl_sum


def rollout_metrics(episodes: list[EpisodeLike]) -> dict[str, float]:
    """What a step's episodes did: rewards, the critic's turn verdicts, calls run, how episodes ended."""
    verdicts = [v for e in episodes for v in e.trajectory.verdicts]
    groups: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        groups[e.group].append(float(e.trajectory.correct))
    n = max(1, len(episodes))
    return {
        "trajectory_reward": sum(e.trajectory.correct for e in episodes) / n,
        "turn_reward": sum(v.reward for v in verdicts) / max(1, len(verdicts)),
        "rejected_turn_share": sum(not v.passed for v in verdicts) / max(1, len(verdicts)),
        "tool_calls": sum(e.tool_calls for e in episodes) / n,
        "tool_calls_max": float(max((e.tool_calls for e in episodes), default=0)),
        "answered": sum(e.ended == "answered" for e in episodes) / n,
        "context_reductions": sum(e.context_reductions for e in episodes) / n,
        "groups_with_signal": sum(len(set(g)) > 1 for g in groups.values()) / max(1, len(groups)),
    }


def build_sequences(episodes: list[EpisodeLike], cfg: AgenticRLConfig) -> list[PackedSequence]:
    """The step's training sequences: every episode's turns with their advantages, packed. A sequence whose
    trained tokens all have advantage 0 adds no gradient (only its KL, when there is one) and is left out."""
    sequences = []
    for episode, turns in zip(episodes, turn_advantages(episodes, cfg), strict=True):
        sequences += pack_turns([(tokens, adv, trained) for tokens, (adv, trained) in
                                 zip(episode.records, turns, strict=True)])
    return [s for s in sequences if any(s.mask) and (cfg.beta > 0 or any(s.advantages))]


def _load_state(path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer) -> tuple[int, list[dict]]:
    if not path.exists():
        return 0, []
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    logger.info("agentic RL: resuming at step %d", state["step"])
    return state["step"], state["curve"]


def _save_state(path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer, step: int,
                curve: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "curve": curve}, tmp)
    os.replace(tmp, path)


def update_policy(model: PreTrainedModel, ref_model: PreTrainedModel | None, episodes: list[EpisodeLike],
                  cfg: AgenticRLConfig, optimizer: torch.optim.Optimizer, pad_id: int, *,
                  bf16: bool = False) -> dict[str, float]:
    """One optimiser step on a batch of judged episodes; returns the loss, KL and packing figures. ``bf16``: the
    forward passes under bf16 autocast (the weights, their gradients and the loss stay fp32)."""
    sequences = build_sequences(episodes, cfg)
    # Under a launch each rank holds its own episodes: the loss is divided by the token count of all ranks', and
    # the gradients summed over ranks, so the step is the one a single process would take on the whole batch.
    n_sequences, trained = sum_over_ranks(float(len(sequences)), float(sum(sum(s.mask) for s in sequences)))
    stats = {"sequences": n_sequences, "trained_tokens": trained, "loss": 0.0, "kl": 0.0}
    if not trained:
        return stats  # no trained token carries an advantage on any rank: nothing to learn from this batch
    sequences.sort(key=lambda s: len(s.ids))  # similar lengths share a micro-batch: less padding
    optimizer.zero_grad(set_to_none=True)
    model.train()
    for start in range(0, len(sequences), cfg.micro_batch_size):
        batch = collate(sequences[start : start + cfg.micro_batch_size], pad_id)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        ref = None
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            if ref_model is not None:
                with torch.no_grad():
                    ref = token_logprobs(shared_prefix_logits(ref_model, batch["input_ids"], batch["attention_mask"]),
                                         batch["input_ids"])
            logits = shared_prefix_logits(model, batch["input_ids"], batch["attention_mask"])
        loss, kl_sum = sequence_loss(logits, batch, trained, ref, cfg.beta)
        loss.backward()
        stats["loss"] += float(loss.detach())
        stats["kl"] += kl_sum / trained
    sum_gradients(model)
    stats["loss"], stats["kl"] = sum_over_ranks(stats["loss"], stats["kl"])
    stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
    optimizer.step()
    model.eval()
    return stats


def updates(curve: list[dict[str, float]]) -> int:
    """How many steps of ``curve`` changed the policy: those where some trained token carried an advantage."""
    return sum(1 for r in curve if r.get("trained_tokens"))


class CheckEnvironment(Protocol):
    def attempt(self, policy: Any, qas: list[Any]) -> list[EpisodeLike]:
        """One episode of each question under the training environment's rules."""
        ...


def success_check(model_dir: Path, env: CheckEnvironment, qas: list[Any], cfg: AgenticRLConfig,
                  runtime: TrainingRuntimeConfig, seed: int) -> list[bool]:
    """Which of ``qas`` the policy in ``model_dir`` answers right, one episode each, sampled as the rollouts are
    (``cfg.temperature``, the same context rule) from a fixed seed: the held-out check of the stage's start and
    end checkpoints (tasks/agentic.py), which the training curve's windows cannot give (each step draws other
    questions, so their mix moves the curve too)."""
    apply_runtime(runtime)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(training_device()).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    policy = TurnPolicy(model, tokenizer, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                        batch_size=max(cfg.micro_batch_size, CHECK_BATCH))
    torch.manual_seed(seed)
    with torch.autocast(training_device().type, dtype=torch.bfloat16, enabled=runtime.bf16):
        return [e.trajectory.correct for e in env.attempt(policy, qas)]


def idle_steps(curve: list[dict[str, float]]) -> int:
    """How many of ``curve``'s last steps in a row changed no weight."""
    return next((i for i, r in enumerate(reversed(curve)) if r.get("trained_tokens")), len(curve))


def train_agentic(policy_dir: Path, env: Environment, cfg: AgenticRLConfig, runtime: TrainingRuntimeConfig,
                  out_dir: Path, *, seed: int = 0, log_metrics: MetricsLogger | None = None) -> GRPOResult:
    """``cfg.max_steps`` rollout-and-update steps from the policy in ``policy_dir`` (fewer when
    ``cfg.stop_after_idle_steps`` steps in a row change no weight); the trained policy is written to ``out_dir``
    (atomically). Every ``cfg.save_steps`` steps the model, optimiser and curve are saved next to
    ``out_dir``, and a killed run resumes there. Returns the per-step curve (:data:`CURVES` and the update's
    figures)."""
    started = time.monotonic()
    apply_runtime(runtime)
    join_process_group()  # under `accelerate launch` rank r runs every n-th question of a step (launch.py)
    shard = (rank(), world_size())
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir).to(training_device())
    broadcast_from_rank0(model)  # every rank starts from the same weights, whatever the loader did
    model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    ref_model = copy.deepcopy(model).requires_grad_(False) if cfg.beta > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    work_dir = work_dir_for(Path(out_dir))
    work_dir.mkdir(parents=True, exist_ok=True)
    first, curve = _load_state(work_dir / STATE_FILE, model, optimizer)
    policy = TurnPolicy(model, tokenizer, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                        batch_size=cfg.micro_batch_size)
    # runtime.bf16 as the Trainer stages have it: bf16 autocast over the fp32 weights, in sampling and update alike.
    mixed = torch.autocast(training_device().type, dtype=torch.bfloat16, enabled=runtime.bf16)
    for step in range(first, cfg.max_steps):
        tick = time.monotonic()
        # A resumed run samples what the killed one would have; each rank its own stream.
        torch.manual_seed(seed * 100_003 + step + 1_000_003 * shard[0])
        with mixed:
            episodes = env.rollout(policy, step, shard=shard)
        record: dict[str, float] = {"step": step + 1, **rollout_metrics(gather_objects(episodes)),
                                    "seconds_rollout": time.monotonic() - tick}
        tick = time.monotonic()
        record |= update_policy(model, ref_model, episodes, cfg, optimizer, policy.pad_id, bf16=runtime.bf16)
        record["seconds_update"] = time.monotonic() - tick
        curve.append(record)
        logger.info("agentic RL step %d/%d: trajectory reward %.3f, rejected turns %.3f, %.2f calls/episode",
                    step + 1, cfg.max_steps, record["trajectory_reward"], record["rejected_turn_share"],
                    record["tool_calls"])
        if log_metrics is not None:
            log_metrics({k: v for k, v in record.items() if k != "step"}, step + 1)
        if (step + 1) % cfg.save_steps == 0 and step + 1 < cfg.max_steps and is_main_process():
            _save_state(work_dir / STATE_FILE, model, optimizer, step + 1, curve)
        if cfg.stop_after_idle_steps and idle_steps(curve) >= cfg.stop_after_idle_steps and step + 1 < cfg.max_steps:
            # trained_tokens is summed over ranks, so every rank stops at the same step
            logger.warning("agentic RL: stopped after step %d of %d: its last %d steps changed no weight "
                           "(stop_after_idle_steps)", step + 1, cfg.max_steps, cfg.stop_after_idle_steps)
            break
    if not updates(curve):
        if cfg.rejected_turns == "no_loss" and all(r["rejected_turn_share"] == 1 for r in curve):
            reason = "the critic rejected every turn and rejected turns train on nothing (rejected_turns='no_loss')"
        else:
            reason = "every group's trajectory rewards were equal"
        logger.warning(
            "agentic RL: none of its %d steps updated the policy: no trained turn carried an advantage (%s), so the "
            "new version's weights are its parent's. The policy needs turns the critic passes and answers that differ "
            "in reward within a group; rejected_turns='negative_reward' trains on rejected turns (docs/architecture.md)",
            len(curve), reason)
    assert_replicas_agree(model)
    if is_main_process():
        save_atomically(model, tokenizer, Path(out_dir))
        shutil.rmtree(work_dir, ignore_errors=True)
    barrier()
    return GRPOResult(out_dir=Path(out_dir), curve=curve, steps=len(curve), seconds=time.monotonic() - started,
                      resumed_from_step=first or None)
