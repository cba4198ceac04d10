"""Typed rows for every dataset Forge reads or writes.

Each record carries a content-hash ``id`` (the same content always gets the same id), its ``domain``, its
``source`` (corpus file or producing task) and its ``parents`` (ids it was made from): lineage runs from a
corpus row to a synthesized item, a mix, a checkpoint and an eval score.

    row = ChatSample.build(domain="stem", source="gsm8k/train", messages=[...])
    row.id  # 'cs-…' stable hash of the content

A :class:`SearchTrajectory` is an agent's tool-using conversation with one :class:`TurnVerdict` per assistant
turn (critic or human); deep-search synthesis (forge/search/) writes them and the review store (forge/review/)
keeps them. What training takes from one:

    sample = traj.to_chat_sample()         # failing turns get Message.loss = False (no SFT loss)
    rewards = traj.turn_rewards()          # +1 / -1 per assistant turn for RL
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Domain = Literal["code", "deep_search", "stem", "tool_use", "general"]
Role = Literal["system", "user", "assistant", "tool"]


def content_hash(payload: Any, prefix: str) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{prefix}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    _id_prefix = "row"

    id: str = Field(min_length=1)
    source: str = Field(min_length=1, description="Corpus file or task that produced the row.")
    parents: list[str] = Field(default_factory=list)

    @classmethod
    def build(cls, **fields: Any):
        """Make a row whose id hashes its content (everything but id, source and parents)."""
        probe = cls.model_construct(id="", **fields)
        payload = probe.model_dump(exclude={"id", "source", "parents"}, mode="json")
        return cls(id=content_hash(payload, cls._id_prefix.default), **fields)


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(BaseModel):
    """A tool definition in OpenAI function format."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: ToolFunction


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class GoldCall(ToolCall):
    """A reference call of a tool-use eval item: the call, plus the other values that count as right for some of its
    arguments (forge/evals/tool_calls.py reads them)."""

    alternatives: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "Argument -> every value that counts as right for it. An argument listed here but left out of `arguments` "
        "may be left out; an empty list means it must be."))


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str = ""
    reasoning: str | None = Field(None, description="Assistant thinking, rendered inside <think></think>.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    name: str | None = Field(None, description="Tool name on a tool response.")
    loss: bool = Field(True, description="Assistant turns only: train on this turn (critic/reviewer verdict).")

    @model_validator(mode="after")
    def _shape(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages may carry tool_calls")
        if self.role != "assistant" and self.reasoning:
            raise ValueError("only assistant messages may carry reasoning")
        if self.role == "assistant" and not (self.content or self.tool_calls or self.reasoning):
            raise ValueError("assistant message is empty (no content, reasoning or tool call)")
        return self


def _check_calls_known(messages: list[Message], tools: list[ToolSpec], what: str) -> None:
    known = {t.function.name for t in tools}
    for m in messages:
        for call in m.tool_calls:
            if call.name not in known:
                raise ValueError(f"tool call to {call.name!r}, which is not among the {what}'s tools")


class ChatSample(Row):
    """One SFT conversation; the loss mask is per assistant turn (``Message.loss``)."""

    _id_prefix = "cs"
    domain: Domain
    messages: list[Message] = Field(min_length=2)
    tools: list[ToolSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_assistant(self) -> ChatSample:
        if not any(m.role == "assistant" for m in self.messages):
            raise ValueError("a chat sample needs at least one assistant turn")
        _check_calls_known(self.messages, self.tools, "sample")
        return self


class PreferencePair(Row):
    """A prompt (possibly multi-turn history) with a preferred and a dispreferred final assistant answer."""

    _id_prefix = "pp"
    domain: Domain = "general"
    prompt: list[Message] = Field(min_length=1)
    chosen: str = Field(min_length=1)
    rejected: str = Field(min_length=1)

    @model_validator(mode="after")
    def _differ(self) -> PreferencePair:
        if self.chosen == self.rejected:
            raise ValueError("chosen and rejected are identical")
        return self


class SearchQA(Row):
    _id_prefix = "qa"
    domain: Domain = "deep_search"
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1)
    gold_path: list[str] = Field(default_factory=list, description="Entities/pages from question to answer.")
    # Graph-walk QAs (forge.search.walks) also keep what is needed to re-check and replay them:
    answer_id: str | None = Field(None, description="Graph id of the answer entity.")
    gold_relations: list[str] = Field(default_factory=list, description="Relation label of each hop.")
    walk: dict[str, Any] | None = Field(None, description="Head, per-hop constraints, gold tails, walk parameters.")


PASS_REWARD = 1.0
FAIL_REWARD = -1.0


class TurnVerdict(BaseModel):
    """The judgement of one assistant turn on the paper's three dimensions (§2.2.1)."""

    model_config = ConfigDict(extra="forbid")
    message_index: int = Field(ge=0, description="Index of the assistant message in the trajectory.")
    logical: bool = Field(description="Logically sound: grounded in what was seen, consistent, correct answer.")
    tool_call: bool = Field(description="Tool-call accurate: known tool, valid arguments, not redundant, no error.")
    info_gain: bool = Field(description="The observation adds new facts about the gold path.")
    reasons: list[str] = Field(default_factory=list)
    judge: Literal["rule", "llm", "human"] = "rule"

    @property
    def passed(self) -> bool:
        return self.logical and self.tool_call and self.info_gain

    @property
    def reward(self) -> float:
        return PASS_REWARD if self.passed else FAIL_REWARD


class SearchTrajectory(Row):
    """One agent's attempt at a :class:`SearchQA`: the conversation in :class:`ChatSample`'s message format plus
    who produced it, whether the final answer is right, and the per-turn verdicts."""

    _id_prefix = "tr"
    qa_id: str
    agent: str
    question: str
    gold_answer: str
    messages: list[Message] = Field(min_length=2)
    tools: list[ToolSpec] = Field(default_factory=list, description="The tools the agent was given (its producer "
                                  "passes them, so a stored row says which tools its calls refer to).")
    final_answer: str | None = None
    correct: bool = False
    bad_turns: list[int] = Field(default_factory=list, description="Turns the agent made bad on purpose (noise, "
                                 "detours, injected faults): ground truth for measuring the critic.")
    verdicts: list[TurnVerdict] = Field(default_factory=list)

    @model_validator(mode="after")
    def _calls_known_tools(self) -> SearchTrajectory:
        _check_calls_known(self.messages, self.tools, "trajectory")
        return self

    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]

    def uses(self, tool: str) -> bool:
        return any(c.name == tool for m in self.messages for c in m.tool_calls)

    @property
    def domain(self) -> Domain:
        """The SFT domain it feeds: trajectories that run ``python`` are tool-use data, the others deep search."""
        return "tool_use" if self.uses("python") else "deep_search"

    def to_chat_sample(self, verdicts: list[TurnVerdict] | None = None) -> ChatSample:
        """The SFT sample: same messages and tools, each assistant turn trained on only if its verdict passed
        (``verdicts`` defaults to the trajectory's own)."""
        verdicts = self.verdicts if verdicts is None else verdicts
        failed = {v.message_index for v in verdicts if not v.passed}
        messages = [m.model_copy(update={"loss": i not in failed}) if m.role == "assistant" else m
                    for i, m in enumerate(self.messages)]
        return ChatSample.build(domain=self.domain, source=self.source, parents=[self.qa_id, self.id],
                                messages=messages, tools=self.tools)

    def turn_rewards(self, verdicts: list[TurnVerdict] | None = None) -> list[float]:
        """One reward per assistant turn, in order (agentic RL's turn-level signal); 0 for an unjudged turn."""
        by_index = {v.message_index: v for v in (self.verdicts if verdicts is None else verdicts)}
        return [by_index[i].reward if i in by_index else 0.0 for i in self.assistant_indices()]


# --- evaluation items shipped in corpora/ (forge/data/corpora.py reads them) --------------------------------------

CHOICE_LETTERS = "ABCDEFGHIJ"  # up to ten options, as in MMLU-Pro and GPQA-style sets


class ChoiceQuestion(BaseModel):
    """A multiple-choice question (the science suite): options in order, the gold as the letter of one of them."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    choices: list[str] = Field(min_length=2, max_length=len(CHOICE_LETTERS), description="Option A first.")
    answer: str = Field(pattern=f"^[{CHOICE_LETTERS}]$", description="The gold letter.")
    subject: str = Field(min_length=1)
    source: str = Field(min_length=1, description="Upstream set and split, e.g. 'mmlu/test'.")

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> ChoiceQuestion:
        if CHOICE_LETTERS.index(self.answer) >= len(self.choices):
            raise ValueError(f"answer {self.answer} names no option: there are {len(self.choices)}")
        return self


class ToolUseQuestion(BaseModel):
    """A single-turn function-calling question (the tool-use suite): the user's text, the tools on offer and the calls
    that answer it (in any order)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    category: str = Field(min_length=1, description="Upstream category, e.g. BFCL's 'parallel_multiple'.")
    question: str = Field(min_length=1)
    tools: list[ToolSpec] = Field(min_length=1)
    gold_calls: list[GoldCall] = Field(min_length=1)

    @model_validator(mode="after")
    def _calls_known_tools(self) -> ToolUseQuestion:
        known = {t.function.name for t in self.tools}
        for call in self.gold_calls:
            if call.name not in known:
                raise ValueError(f"gold call to {call.name!r}, which is not among the question's tools")
        return self


SCHEMAS: dict[str, type[Row]] = {
    "chat": ChatSample,
    "preference": PreferencePair,
    "search_qa": SearchQA,
    "trajectory": SearchTrajectory,
}
