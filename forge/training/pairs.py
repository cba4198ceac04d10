"""RL prompts and preference pairs for both reward models (§2.1.2 point-wise, §2.1.3 pair-wise), built one way.

A prompt is a conversation from the SFT mix up to its last assistant answer (the whole history: §2.1.3 feeds
multi-turn dialogues whole) with that answer as its reference. A pair is a prompt with a strong and a weak answer:
- the strong checkpoint's answer over the weak checkpoint's (§2.1.3's strong-vs-weak pairs), and
- the prompt's reference answer (the teacher that wrote the SFT data) over the weak checkpoint's.
Every side of every pair is held to one token budget, the one the weak answers were generated with: a reference
is cut to it, so that length alone never separates a pair. A rule checklist then keeps a pair only when it agrees
that the strong side wins (§2.1.3, "checklist-filtered"). Nothing here generates: the stage hands in the answers.

    prompts = build_rl_prompts(mix_rows, tokenizer, max_prompts=240, max_prompt_tokens=160, seed=0)
    weak = backend.generate([p["prompt"] for p in prompts], max_new_tokens=48, ...)
    split = reference_pairs(prompts, weak, tokenizer, budget=48, eval_pairs=70, seed=0)      # point-wise RM
    split = pairwise_pairs(prompts, strong, weak, tokenizer, budget=64, eval_pairs=60, seed=0)  # pair-wise RM
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from transformers import PreTrainedTokenizerBase

from forge import pyast
from forge.chat import CONTROL_TOKENS, messages_from_hf, messages_to_hf, render_chat
from forge.data.schemas import ChatSample, PreferencePair

Chat = list[dict[str, Any]]
T = TypeVar("T")
FORGE_PAIR_SOURCE = "reference-over-weak"


# --- prompts -----------------------------------------------------------------------------------------------------


def prompt_and_reference(sample: ChatSample) -> tuple[Chat, str] | None:
    """The conversation up to its last assistant answer (whole history: §2.1.3 multi-turn) and that answer.

    Only plain-text exchanges qualify (no tools, no tool calls): the RMs judge chat answers, and the agentic
    stages handle tool use. Returns None for samples that do not end in a trained text answer.
    """
    if sample.tools or any(m.role == "tool" or m.tool_calls for m in sample.messages):
        return None
    last = sample.messages[-1]
    if last.role != "assistant" or not last.content or not last.loss:
        return None
    history = messages_to_hf(sample.messages[:-1])
    if not history or history[-1]["role"] != "user":
        return None
    return history, last.content


def build_rl_prompts(
    rows: Sequence[ChatSample],
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_prompts: int,
    max_prompt_tokens: int,
    seed: int | str,
    domains: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """RL prompts ``{"prompt": chat, "reference": answer, "domain": ...}`` from SFT rows, in a seeded order (a
    stage names its own ``seed``, e.g. ``"0:grpo-pairwise"``, so two stages draw different prompts).

    Prompts longer than ``max_prompt_tokens`` (rendered with the generation header) are skipped: TRL 1.16 has
    no prompt truncation, and a cut prompt would lose the question.
    """
    out: list[dict[str, Any]] = []
    # The positions are shuffled, not the rows (the same permutation: it depends on the length and the seed only),
    # so ``rows`` may be a mix read on demand (forge.data.mix.MixRows): only the rows drawn are ever parsed.
    order = list(range(len(rows)))
    random.Random(f"{seed}:rl-prompts").shuffle(order)
    for sample in (rows[i] for i in order):
        if domains and sample.domain not in domains:
            continue
        pr = prompt_and_reference(sample)
        if pr is None:
            continue
        history, reference = pr
        text, _ = render_chat(tokenizer, history, add_generation_prompt=True)
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_prompt_tokens:
            continue
        out.append({"prompt": history, "reference": reference, "domain": sample.domain})
        if len(out) >= max_prompts:
            break
    return out


# --- pairs -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrongWeakPair:
    """One prompt (full history), the strong side's answer, the weak side's, and the prompt's full reference."""

    history: Chat
    strong: str
    weak: str
    reference: str = ""
    domain: str = "general"


def cut_to_budget(tokenizer: PreTrainedTokenizerBase, text: str, budget: int) -> str:
    """``text`` cut to its first ``budget`` tokens (unchanged when it fits)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text if len(ids) <= budget else tokenizer.decode(ids[:budget])


def strong_over_weak(prompts: list[dict[str, Any]], strong: list[str], weak: list[str]) -> list[StrongWeakPair]:
    """Pairs of two checkpoints' answers to the same prompts (both generated with the same budget)."""
    return [StrongWeakPair(p["prompt"], s, w, p.get("reference", ""), p.get("domain", "general"))
            for p, s, w in zip(prompts, strong, weak, strict=True)]


def reference_over_weak(
    prompts: list[dict[str, Any]], weak: list[str], tokenizer: PreTrainedTokenizerBase, budget: int
) -> list[StrongWeakPair]:
    """Pairs whose strong side is the prompt's reference answer cut to ``budget`` tokens (the weak answers'
    generation budget) and whose weak side is the weak checkpoint's answer."""
    return [StrongWeakPair(p["prompt"], cut_to_budget(tokenizer, p["reference"], budget), w, p["reference"],
                           p.get("domain", "general"))
            for p, w in zip(prompts, weak, strict=True)]


# --- the checklist -----------------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
_CODE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def repetition_fraction(text: str, n: int = 4) -> float:
    """Share of the word ``n``-grams in ``text`` that repeat an earlier one (0 = no repetition, →1 = a loop)."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def _overlap_f1(a: str, b: str) -> float:
    """Bag-of-words F1 between two texts (0 when either is empty)."""
    wa, wb = _WORD.findall(a.lower()), _WORD.findall(b.lower())
    if not wa or not wb:
        return 0.0
    common = sum(min(wa.count(w), wb.count(w)) for w in set(wa))
    if not common:
        return 0.0
    p, r = common / len(wa), common / len(wb)
    return 2 * p * r / (p + r)


def _parses(code: str) -> bool:
    try:
        pyast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def checklist(history: Chat, answer: str, reference: str = "") -> dict[str, float]:
    """Rule-based checklist of an answer; each item in [0, 1], higher is better.

    Items: ``nonempty`` (some words), ``clean`` (no leaked control tokens, balanced think tags), ``not_repetitive``
    (≤ 30% repeated 4-grams), ``on_topic`` (shares a content word with the last user turn), ``code_parses``
    (when the reference holds a Python block, the answer holds one that parses), ``reference_f1`` (word F1 with
    the reference answer, when there is one).
    """
    words = answer.split()
    question = next((m["content"] for m in reversed(history) if m["role"] == "user"), "")
    q_words = {w for w in _WORD.findall(question.lower()) if len(w) > 3}
    items = {
        "nonempty": float(len(words) >= 2),
        "clean": float(not any(t in answer for t in CONTROL_TOKENS)
                       and answer.count("<think>") == answer.count("</think>")),
        "not_repetitive": float(repetition_fraction(answer) <= 0.3),
        "on_topic": float(bool(q_words & set(_WORD.findall(answer.lower())))) if q_words else 1.0,
    }
    if _CODE.search(reference):
        blocks = _CODE.findall(answer)
        items["code_parses"] = float(bool(blocks) and all(_parses(b) for b in blocks))
    if reference:
        items["reference_f1"] = _overlap_f1(answer, reference)
    return items


def checklist_score(history: Chat, answer: str, reference: str = "") -> float:
    return sum(checklist(history, answer, reference).values())


def filter_pairs(pairs: list[StrongWeakPair]) -> tuple[list[StrongWeakPair], dict[str, int]]:
    """Keep a pair only when the checklist agrees that the strong answer wins (strictly higher score).

    Returns the kept pairs and counts (``kept``, ``disagree``: the checklist prefers the weak answer, ``tie``).
    """
    kept, counts = [], {"kept": 0, "disagree": 0, "tie": 0}
    for pair in pairs:
        s = checklist_score(pair.history, pair.strong, pair.reference)
        w = checklist_score(pair.history, pair.weak, pair.reference)
        if pair.strong.strip() == pair.weak.strip() or s == w:
            counts["tie"] += 1
        elif s > w:
            kept.append(pair)
            counts["kept"] += 1
        else:
            counts["disagree"] += 1
    return kept, counts


# --- what each reward model trains on -----------------------------------------------------------------------------


def split_pairs(items: list[T], eval_pairs: int, seed: int) -> tuple[list[T], list[T]]:
    """Seeded split into (train, held-out); the held-out share is at most a third of the items."""
    order = list(items)
    random.Random(f"{seed}:rm-split").shuffle(order)
    n_eval = min(eval_pairs, len(order) // 3)
    return order[n_eval:], order[:n_eval]


def to_preference_pairs(pairs: list[StrongWeakPair], source: str = FORGE_PAIR_SOURCE) -> list[PreferencePair]:
    """Strong-over-weak pairs as point-wise preference rows (chosen = strong); identical answers are skipped."""
    out = []
    for p in pairs:
        if p.strong.strip() and p.weak.strip() and p.strong != p.weak:
            out.append(PreferencePair.build(
                source=source, domain=p.domain, chosen=p.strong, rejected=p.weak,
                prompt=messages_from_hf(p.history),
            ))
    return out


@dataclass
class PairSplit:
    """Pairs to train a reward model on and to measure it with, and what the checklist did (``counts``)."""

    train: list = field(default_factory=list)
    heldout: list = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def reference_pairs(
    prompts: list[dict[str, Any]], weak: list[str], tokenizer: PreTrainedTokenizerBase, *, budget: int,
    eval_pairs: int, seed: int,
) -> PairSplit:
    """The point-wise RM's reference-over-weak pairs, checklist-filtered, as ``PreferencePair`` rows split into
    train / held-out. ``counts``: ``kept`` / ``disagree`` / ``tie`` of the checklist."""
    kept, counts = filter_pairs(reference_over_weak(prompts, weak, tokenizer, budget))
    train, heldout = split_pairs(to_preference_pairs(kept), eval_pairs, seed)
    return PairSplit(train, heldout, counts)


def pairwise_pairs(
    prompts: list[dict[str, Any]], strong: list[str], weak: list[str], tokenizer: PreTrainedTokenizerBase, *,
    budget: int, eval_pairs: int, min_pairs: int, seed: int,
) -> PairSplit:
    """The pair-wise RM's pairs (§2.1.3): the strong checkpoint's answer over the weak one's, and the reference
    (cut to the same budget) over the weak one's, both checklist-filtered, split into train / held-out.

    ``counts``: ``{kept,disagree,tie}_{policy,reference}``, ``train``, ``heldout``. Raises ValueError when the
    checklist keeps fewer than ``min_pairs``: an RM trained on a handful of pairs would only add noise.
    """
    kept_policy, policy = filter_pairs(strong_over_weak(prompts, strong, weak))
    kept_reference, reference = filter_pairs(reference_over_weak(prompts, weak, tokenizer, budget))
    kept = kept_policy + kept_reference
    if len(kept) < min_pairs:
        raise ValueError(f"the checklist kept {len(kept)} of {2 * len(prompts)} strong-vs-weak pairs (fewer than "
                         f"min_pairs={min_pairs}): too few to train a pairwise reward model on")
    train, heldout = split_pairs(kept, eval_pairs, seed)
    counts = {**{f"{k}_policy": v for k, v in policy.items()}, **{f"{k}_reference": v for k, v in reference.items()},
              "train": len(train), "heldout": len(heldout)}
    return PairSplit(train, heldout, counts)
