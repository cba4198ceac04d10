"""Typed rows for every dataset Forge reads or writes.

Each record carries a content-hash ``id`` (the same content always gets the same id), its ``domain``, its
``source`` (corpus file or producing task) and its ``parents`` (ids it was made from): lineage runs from a
corpus row to a synthesized item, a mix, a checkpoint and an eval score.

    row = ChatSample.build(domain="stem", source="gsm8k/train", messages=[...])
    row.id  # 'cs-…' stable hash of the content
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
        known = {t.function.name for t in self.tools}
        for m in self.messages:
            for call in m.tool_calls:
                if call.name not in known:
                    raise ValueError(f"tool call to {call.name!r}, which is not among the sample's tools")
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


class CodeTest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["assert", "stdio"] = "assert"
    code: str | None = Field(None, description="For 'assert': Python test code run after the solution.")
    stdin: str | None = None
    expected_stdout: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> CodeTest:
        if self.kind == "assert" and not self.code:
            raise ValueError("an assert test needs code")
        if self.kind == "stdio" and self.expected_stdout is None:
            raise ValueError("a stdio test needs expected_stdout")
        return self


class CodeProblem(Row):
    _id_prefix = "cp"
    domain: Domain = "code"
    task_id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    entry_point: str | None = None
    language: Literal["python", "cpp"] = "python"
    tests: list[CodeTest] = Field(min_length=1)
    reference_solution: str = Field(min_length=1)
    complexity: str | None = Field(None, description="Reference time-complexity class, e.g. 'O(n log n)'.")


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


SCHEMAS: dict[str, type[Row]] = {
    "chat": ChatSample,
    "preference": PreferencePair,
    "code": CodeProblem,
    "search_qa": SearchQA,
}
