"""One trajectory format for every agent, and what SFT and agentic RL take from it.

A :class:`SearchTrajectory` is the conversation (user question → assistant reasoning + tool call → tool
response → … → assistant final answer) in Forge's :class:`~forge.data.schemas.Message` format — exactly what
:class:`~forge.data.schemas.ChatSample` holds — plus who produced it, whether the final answer is right, and
one :class:`TurnVerdict` per assistant turn (from the critic, overridden by a human reviewer where one judged).

    sample = to_chat_sample(traj)          # failing turns get Message.loss = False (no SFT loss)
    rewards = turn_rewards(traj)           # +1 / -1 per assistant turn for RL
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forge.data.schemas import ChatSample, Message, Row, ToolSpec
from forge.search.tools import TOOL_SPECS

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
    _id_prefix = "tr"
    qa_id: str
    agent: str
    question: str
    gold_answer: str
    messages: list[Message] = Field(min_length=2)
    tools: list[ToolSpec] = Field(default_factory=lambda: list(TOOL_SPECS))
    final_answer: str | None = None
    correct: bool = False
    bad_turns: list[int] = Field(default_factory=list, description="Turns the agent made bad on purpose (noise, "
                                 "detours, injected faults): ground truth for measuring the critic.")
    verdicts: list[TurnVerdict] = Field(default_factory=list)

    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]

    def uses(self, tool: str) -> bool:
        return any(c.name == tool for m in self.messages for c in m.tool_calls)

    @property
    def domain(self) -> str:
        """The SFT domain it feeds: trajectories that run ``python`` are tool-use data, the others deep search."""
        return "tool_use" if self.uses("python") else "deep_search"


def normalize_answer(text: str | None) -> str:
    return " ".join((text or "").lower().replace(".", " ").split())


def to_chat_sample(traj: SearchTrajectory, verdicts: list[TurnVerdict] | None = None) -> ChatSample:
    """The SFT sample: same messages, each assistant turn trained on only if its verdict passed."""
    verdicts = traj.verdicts if verdicts is None else verdicts
    failed = {v.message_index for v in verdicts if not v.passed}
    messages = [m.model_copy(update={"loss": i not in failed}) if m.role == "assistant" else m
                for i, m in enumerate(traj.messages)]
    return ChatSample.build(domain=traj.domain, source=f"forge.search:{traj.agent}", parents=[traj.qa_id, traj.id],
                            messages=messages, tools=traj.tools)


def turn_rewards(traj: SearchTrajectory, verdicts: list[TurnVerdict] | None = None) -> list[float]:
    """One reward per assistant turn, in order (agentic RL's turn-level signal)."""
    by_index = {v.message_index: v for v in (traj.verdicts if verdicts is None else verdicts)}
    return [by_index[i].reward if i in by_index else 0.0 for i in traj.assistant_indices()]
