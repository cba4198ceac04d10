"""Agentic RL's environment (forge/search/lookups.py, forge/search/rollout.py): lookup questions held out from the
SFT rows and solvable in one visit per hop, the context rule, and one episode driven past 100 tool calls."""

from __future__ import annotations

import pytest

from forge.chat import format_assistant_text, messages_to_hf
from forge.data.schemas import Message, ToolCall
from forge.search.critic import judge_trajectory
from forge.search.lookups import LookupAgent, build_lookup_qas, sft_seen
from forge.search.rollout import ContextBudget, fit_context, run_episodes
from forge.search.tools import parse_results
from forge.search.walks import answer_set


@pytest.fixture(scope="module")
def synthesis_rows(planner_runs):
    """The SFT rows deep-search synthesis makes from the planner's trajectories (forge/search/synthesize.py)."""
    return [traj.to_chat_sample() for traj, _ in planner_runs if traj.correct]


@pytest.fixture(scope="module")
def lookups(graph, synthesis_rows):
    return build_lookup_qas(graph, 60, min_hops=1, max_hops=2, seen=sft_seen(synthesis_rows), seed=3)


def test_lookups_are_held_out_from_the_sft_rows(lookups, planner_runs, synthesis_rows, graph):
    seen = sft_seen(synthesis_rows)
    assert len(seen.pages) > 200 and len(seen.questions) == len(synthesis_rows)
    heads = {qa.gold_path[0].casefold() for qa in lookups}
    assert len(lookups) == 60 and not heads & seen.pages  # no RL question starts at a page an SFT row opened
    assert not {qa.question for qa in lookups} & seen.questions
    synthesized = {qa.id for _, qa in planner_runs}
    assert not {qa.id for qa in lookups} & synthesized
    # Without the exclusion the same seed does pick heads the SFT rows visited: the filter is what holds them out.
    unfiltered = build_lookup_qas(graph, 300, min_hops=1, max_hops=2, seed=3)
    assert {qa.gold_path[0].casefold() for qa in unfiltered} & seen.pages


def test_lookups_take_one_visit_per_hop(lookups, tools, graph):
    assert {len(qa.gold_relations) for qa in lookups} == {1, 2}
    for qa in lookups:
        assert answer_set(graph, qa.walk) == {qa.answer_id}  # a unique answer, re-read from the graph
        assert all(hop["condition"] is None for hop in qa.walk["hops"])
        traj = LookupAgent().run(qa, tools)
        calls = [c for m in traj.messages for c in m.tool_calls]
        assert traj.correct and [c.name for c in calls] == ["visit"] * len(qa.gold_relations)
        assert all(v.passed for v in judge_trajectory(traj, qa, graph))  # the critic passes every turn


def _step(k: int, size: int) -> list[Message]:
    return [Message(role="assistant", tool_calls=[ToolCall(name="visit", arguments={"page": f"P{k}"})]),
            Message(role="tool", name="visit", content=f"page {k} " + "x" * size)]


HISTORY = [Message(role="user", content="Q?"), *[m for k in range(5) for m in _step(k, 100)]]


def _chars(messages: list[Message]) -> int:
    return sum(len(m.content) + 20 * len(m.tool_calls) for m in messages)


@pytest.mark.parametrize("limit, strategy, expect", [
    (10_000, "truncate", "whole"),  # it fits: shown as it is
    (500, "truncate", "cut"),  # the oldest responses are cut to their first 10 characters, the newest 2 kept
    (480, "elide", "cut"),  # stubs instead of prefixes
    (320, "truncate", "folded"),  # cutting is not enough: the oldest steps become a note on the question
    (100, "truncate", None),  # even the most reduced history does not fit
])
def test_fit_context(limit, strategy, expect):
    budget = ContextBudget(tokens=limit, strategy=strategy, keep_recent=2, truncated_chars=10)
    fitted = fit_context(HISTORY, lambda ms: _chars(ms) <= limit, budget)
    if expect is None:
        assert fitted is None
        return
    view, reductions = fitted
    assert _chars(view) <= limit
    assert view[-2:] == HISTORY[-2:]  # the newest step is always shown whole
    if expect == "whole":
        assert view == HISTORY and reductions == 0
    elif expect == "cut":
        assert len(view) == len(HISTORY) and 0 < reductions <= 3 and view[-4:] == HISTORY[-4:]  # newest 2 whole
        cut = [m.content for m in view if m.role == "tool" and m.content not in {h.content for h in HISTORY}]
        assert cut and all(("characters cut" if strategy == "truncate" else "elided") in c for c in cut)
        assert _chars(fit_context(HISTORY, lambda ms: _chars(ms) <= limit, budget)[0]) <= limit
    else:
        assert len(view) < len(HISTORY) and view[0].content.startswith("Q?\n\n(Earlier steps")
        assert 'visit {"page": "P0"}' in view[0].content  # the note names the calls it replaced


class Wanderer:
    """A scripted policy that reads the tool response it is shown and visits a page named there that it has not
    visited yet (a fact's tail, or a search hit), searching when none is left, until it has made ``calls`` calls;
    then it answers."""

    def __init__(self, tokenizer, calls: int) -> None:
        self.tokenizer, self.calls = tokenizer, calls
        self.visited: set[str] = set()
        self.prompt_tokens: list[int] = []
        self.made = 0

    def count_tokens(self, chat, tools) -> int:
        text = self.tokenizer.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=True)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, chats, tools):
        out = []
        for chat in chats:
            self.prompt_tokens.append(self.count_tokens(chat, tools))
            if self.made >= self.calls:
                out.append((format_assistant_text("Done.", "I have walked far enough."), None))
                continue
            last = chat[-1]["content"] if chat[-1]["role"] == "tool" else ""
            named = [line.rsplit(" is ", 1)[1].rstrip(".") for line in last.splitlines()
                     if line.startswith("The ") and " is " in line] + [title for title, _ in parse_results(last)]
            fresh = [name for name in named if name not in self.visited]
            if fresh:
                self.visited.add(fresh[0])
                call = {"name": "visit", "arguments": {"page": fresh[0], "goal": "film"}}
            else:
                call = {"name": "search", "arguments": {"query": f"film {self.made}", "k": 3}}
            self.made += 1
            out.append((format_assistant_text("", "Next.", [call]), call))
        return out


def test_one_episode_runs_past_100_tool_calls_within_the_context(tools, graph, tokenizer, lookups):
    qa = lookups[0]
    policy = Wanderer(tokenizer, calls=110)
    budget = ContextBudget(tokens=1600, strategy="truncate", keep_recent=2, truncated_chars=80)
    [rollout] = run_episodes(policy, [qa], tools, max_tool_calls=600, context=budget)
    traj = rollout.trajectory
    assert rollout.tool_calls == 110 and rollout.ended == "answered" and traj.final_answer == "Done."
    assert len(traj.messages) == 1 + 2 * 110 + 1  # the stored trajectory keeps every turn, uncut
    specs = [s.model_dump(mode="json") for s in tools.specs]
    assert max(policy.prompt_tokens) <= 1600 < policy.count_tokens(messages_to_hf(traj.messages[:40]), specs)
    assert rollout.context_reductions > 100  # by the end, old steps were folded, not only cut
    visits = [(i, m.tool_calls[0].arguments["page"]) for i, m in enumerate(traj.messages)
              if m.tool_calls and m.tool_calls[0].name == "visit"]
    assert len(visits) >= 30 and all(page in traj.messages[i - 1].content for i, page in visits)  # read, then acted
    assert len(rollout.records) == 111  # one record per assistant turn, in order
    assert len(judge_trajectory(traj, qa, graph)) == 111


def test_the_call_budget_ends_an_episode_without_running_the_extra_call(tools, tokenizer, lookups):
    policy = Wanderer(tokenizer, calls=10)
    [rollout] = run_episodes(policy, [lookups[1]], tools, max_tool_calls=3)
    assert rollout.tool_calls == 3 and rollout.ended == "budget" and rollout.trajectory.final_answer is None
    assert rollout.trajectory.messages[-1].role == "assistant" and rollout.trajectory.messages[-1].tool_calls
    last = judge_trajectory(rollout.trajectory, lookups[1], tools.graph)[-1]
    assert not last.passed and "call budget" in " ".join(last.reasons)  # the unrun call fails the critic
