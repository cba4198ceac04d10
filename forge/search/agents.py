"""Agents that answer graph-walk questions with the offline tools, all writing one trajectory format.

Scripted agents read the question's constraints (``SearchQA.walk`` without its gold tails: the head or its
description + year range, then per hop the relation label and condition) and find every entity through the
tools alone — the gold path is never consulted:

- :class:`PlannerAgent` follows the chain: search the head, visit each page with the hop's relation as the
  goal, check conditions on candidates (year ranges with ``python``), answer;
- :class:`GreedyAgent` reads whole pages first and takes detours (an unrelated neighbour, a search for the
  bare relation) before going on;
- :class:`NoisyAgent` is the planner plus malformed, redundant and wrong calls.
:class:`ReActAgent` drives a policy model through a generation backend: it generates, the tool calls are parsed
with :func:`forge.chat.parse_assistant_text`, run, and fed back until an answer or the turn limit.

    traj = PlannerAgent().run(qa, tools)          # SearchTrajectory
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from forge.chat import parse_assistant_text
from forge.data.corpora import DATE_ATTRS
from forge.data.schemas import Message, SearchQA, SearchTrajectory, ToolCall, ToolSpec
from forge.search.critic import normalize_answer, opened_pages, resolve_answer
from forge.search.tools import TOOL_SPECS, SearchTools, dumps_call, parse_results
from forge.search.walks import Condition


class Episode:
    """The conversation being built: each act() appends an assistant call and the tool's answer.

    ``page`` is the page the episode is on (``follow`` starts there): the one a question starts it on
    (``start_page``), then each page a call opens. ``specs``: the tools it is given (default: search, visit, python)."""

    def __init__(self, tools: SearchTools, question: str, *, start_page: str | None = None,
                 specs: list[ToolSpec] | None = None):
        self.tools = tools
        self.messages = [Message(role="user", content=question)]
        self.bad: list[int] = []
        self.memory: dict[str, str] = {}
        self.calls = 0
        self.page = start_page
        self.specs = list(specs) if specs is not None else tools.specs

    def run_call(self, call: ToolCall) -> str:
        """Run ``call`` from where the episode is (a tool it was not given answers an error), append the tool's
        turn and move to the page the call opens, if any."""
        given = [s.function.name for s in self.specs]
        if call.name in given:
            observation = self.tools.call(call.name, call.arguments, page=self.page)
            self.page = self.tools.opens(call.name, call.arguments, page=self.page) or self.page
        else:
            observation = f"Error: unknown tool {call.name!r} (tools: {', '.join(given)})"
        self.messages.append(Message(role="tool", name=call.name, content=observation))
        self.calls += 1
        return observation

    def act(self, reasoning: str, name: str, arguments: dict, bad: bool = False) -> str:
        """Call a tool (one assistant turn + one tool turn). A call made before is answered from memory, with
        no new turn, unless it is meant to be bad (a scripted redundant call)."""
        key = dumps_call(name, arguments)
        if not bad and key in self.memory and name != "follow":  # follow's answer depends on where it is made
            return self.memory[key]
        if bad:
            self.bad.append(len(self.messages))
        call = ToolCall(name=name, arguments=arguments)
        self.messages.append(Message(role="assistant", reasoning=reasoning, tool_calls=[call]))
        observation = self.run_call(call)
        self.memory.setdefault(key, observation)
        return observation

    def answer(self, reasoning: str, answer: str, bad: bool = False) -> None:
        if bad:
            self.bad.append(len(self.messages))
        self.messages.append(Message(role="assistant", reasoning=reasoning, content=answer))

    def finish(self, qa: SearchQA, agent: str, final: str | None) -> SearchTrajectory:
        """The trajectory; its ``final_answer`` is what the answer names (a citation ``[k]`` resolved)."""
        if final is not None:
            final = resolve_answer(final, opened_pages(self.messages))
        return SearchTrajectory.build(
            source=f"forge.search:{agent}", parents=[qa.id], qa_id=qa.id, agent=agent, question=qa.question,
            gold_answer=qa.answer, messages=self.messages, tools=self.specs, final_answer=final,
            correct=normalize_answer(final) == normalize_answer(qa.answer), bad_turns=sorted(self.bad))


DEEP_SEARCH_TOOLS = tuple(s.function.name for s in TOOL_SPECS)


def fact_tails(observation: str, subject: str, label: str) -> list[str]:
    """Tails of the page lines ``The {label} of {subject} is {tail}.``"""
    prefix = f"The {label} of {subject} is "
    return [line[len(prefix):-1] for line in observation.splitlines() if line.startswith(prefix) and line.endswith(".")]


def year_on_page(observation: str, subject: str, attr: str) -> int | None:
    prefix = f"{subject} {DATE_ATTRS[attr]} "
    for line in observation.splitlines():
        if line.startswith(prefix) and line[len(prefix):-1].isdigit():
            return int(line[len(prefix):-1])
    return None


class PlannerAgent:
    """Follows the chain of constraints step by step (the reference behaviour)."""

    name = "planner"
    max_candidates = 150
    narrow_above = 12
    python_batch = 6

    def run(self, qa: SearchQA, tools: SearchTools, rng: random.Random | None = None) -> SearchTrajectory:
        ep = Episode(tools, qa.question)
        final = self.solve(ep, qa.walk or {}, rng or random.Random(qa.id))
        return ep.finish(qa, self.name, final)

    # Hooks the other scripted agents override.
    def before_step(self, ep: Episode, current: str | None, rng: random.Random) -> None:
        return None

    def read_page(self, ep: Episode, title: str, label: str, reasoning: str) -> str:
        return ep.act(reasoning, "visit", {"page": title, "goal": label})

    def solve(self, ep: Episode, spec: dict[str, Any], rng: random.Random) -> str | None:
        head = self.find_head(ep, spec, rng)
        if head is None:
            ep.answer("I could not identify the entity the question starts from.", "unknown")
            return "unknown"
        current = head
        for hop in spec["hops"]:
            self.before_step(ep, current, rng)
            label = hop["label"]
            page = self.read_page(ep, current, label, f"I need the {label} of \"{current}\"; its page should list it.")
            candidates = fact_tails(page, current, label)
            if not candidates:
                ep.answer(f"The page of \"{current}\" does not give its {label}.", "unknown")
                return "unknown"
            cond = Condition(**hop["condition"]) if hop.get("condition") else None
            chosen = candidates[0] if cond is None or len(candidates) == 1 else self.pick(ep, candidates, cond, label)
            if chosen is None:
                ep.answer(f"None of the {label} candidates of \"{current}\" matches ({cond.phrase()}).", "unknown")
                return "unknown"
            current = chosen
        self.before_step(ep, None, rng)
        ep.answer(f"Following the chain, the last step leads to \"{current}\". So the answer is {current}.", current)
        return current

    def find_head(self, ep: Episode, spec: dict[str, Any], rng: random.Random) -> str | None:
        if not spec.get("head_condition"):
            title = self._head_title(ep, spec)
            obs = ep.act(f"The question starts from \"{title}\"; I will search for it first.", "search",
                         {"query": title, "k": 5})
            # A named head is visited by its title even when the search missed it (stop-word-only titles).
            return title
        cond = Condition(**spec["head_condition"])
        years = " ".join(str(y) for y in range(cond.low, cond.high + 1)) if cond.date_attr else ""
        checked: set[str] = set()
        queries = [(f"{cond.description} {years}".strip(), 10), (cond.description, 20)]
        if cond.date_attr:  # then one year at a time, as a person paging through results would
            queries += [(f"{cond.description} {y}", 10) for y in range(cond.low, cond.high + 1)]
        for query, k in queries:
            obs = ep.act(f"The question starts from an entity described as {cond.phrase()}; I will search for "
                         "that description" + (" and those years." if years in query else "."), "search",
                         {"query": query, "k": k})
            matches = [t for t, snip in parse_results(obs) if f" {cond.description}." in snip]
            found = self.pick(ep, matches, cond, "description", checked)
            if found is not None:
                return found
        return None

    def _head_title(self, ep: Episode, spec: dict[str, Any]) -> str:
        """The named head: the question minus the hop phrases it is built from (outermost hop first)."""
        rest = ep.messages[0].content.removeprefix("What is ").removesuffix("?")
        for hop in reversed(spec["hops"]):
            cond = f" ({Condition(**hop['condition']).phrase()})" if hop.get("condition") else ""
            rest = rest.removeprefix(f"the {hop['label']}{cond} of ")
        if ep.tools.graph.resolve(rest) is None:  # not a template question (an LLM rewrote it): the named head
            rest = ep.tools.graph.title(spec["head"])
        return rest

    def pick(self, ep: Episode, candidates: list[str], cond: Condition, label: str,
             checked: set[str] | None = None) -> str | None:
        """The first candidate satisfying ``cond``: visit candidates, keep those with the description, and test
        the years of up to ``python_batch`` of them at once with python. Candidates in ``checked`` were already
        ruled out and are not visited again."""
        checked = set() if checked is None else checked
        dated: dict[str, int] = {}
        todo = [c for c in candidates if c not in checked]
        if len(todo) > self.narrow_above and cond.description:
            todo = self.narrow(ep, todo, cond, label)
        todo = todo[: self.max_candidates]
        for n, cand in enumerate(todo):
            checked.add(cand)
            goal = DATE_ATTRS[cond.date_attr] if cond.date_attr else "description"
            page = ep.act(f"Several entities fit the {label}; I will check whether \"{cand}\" is {cond.phrase()}.",
                          "visit", {"page": cand, "goal": goal})
            if cond.description and page.splitlines()[1:2] != [_describe_line(cand, cond.description)]:
                continue
            if not cond.date_attr:
                return cand
            year = year_on_page(page, cand, cond.date_attr)
            if year is not None:
                dated[cand] = year
            if dated and (len(dated) >= self.python_batch or n == len(todo) - 1):
                found = self.check_years(ep, dated, cond)
                if found:
                    return found
                dated = {}
        return self.check_years(ep, dated, cond) if dated else None  # the last candidates may be undated

    def narrow(self, ep: Episode, candidates: list[str], cond: Condition, label: str) -> list[str]:
        """Many candidates: search for the condition and check the candidates the search returns first."""
        years = " ".join(str(y) for y in range(cond.low, cond.high + 1)) if cond.date_attr else ""
        obs = ep.act(f"{len(candidates)} entities are {label} candidates; I will search for {cond.phrase()} to "
                     "check the likeliest first.", "search", {"query": f"{cond.description} {years}".strip(), "k": 20})
        found = [t for t, _ in parse_results(obs)]
        return [c for c in candidates if c in found] + [c for c in candidates if c not in found]

    def check_years(self, ep: Episode, dated: dict[str, int], cond: Condition) -> str | None:
        listing = ", ".join(f"{c!r}: {y}" for c, y in dated.items())
        out = ep.act(f"I have the years of {len(dated)} candidates; I will test which is in {cond.low}-{cond.high}.",
                     "python", {"code": f"years = {{{listing}}}\n"
                                        f"print([name for name, y in years.items() if {cond.low} <= y <= {cond.high}])"})
        try:
            import ast

            hits = ast.literal_eval(out.strip())
        except (ValueError, SyntaxError):
            return None
        return hits[0] if isinstance(hits, list) and hits and hits[0] in dated else None


def _describe_line(title: str, description: str) -> str:
    article = "an" if description[0].lower() in "aeiou" else "a"
    return f"{title} is {article} {description}."


class GreedyAgent(PlannerAgent):
    """Reads whole pages (a goal only when the page was cut) and takes detours on the way."""

    name = "greedy"
    detour_prob = 0.35

    def read_page(self, ep: Episode, title: str, label: str, reasoning: str) -> str:
        page = ep.act(f"I will read the whole page of \"{title}\".", "visit", {"page": title})
        if f"The {label} of {title} is " in page and not page.endswith("visit with a goal)"):
            return page
        return ep.act(f"The page of \"{title}\" was cut before its {label}; I will open it with that goal.",
                      "visit", {"page": title, "goal": label})

    def before_step(self, ep: Episode, current: str | None, rng: random.Random) -> None:
        if current is None or rng.random() >= self.detour_prob:
            return
        last = ep.messages[-1].content if ep.messages[-1].role == "tool" else ""
        others = [line.rsplit(" is ", 1)[-1].rstrip(".") for line in last.splitlines()
                  if line.startswith("The ") and " is " in line]
        others = [o for o in others if o != current and o not in ep.messages[0].content]
        if others and rng.random() < 0.6:
            other = rng.choice(others)
            ep.act(f"\"{other}\" is mentioned here; I will have a look at it too.", "visit", {"page": other},
                   bad=True)
        else:
            words = rng.choice(["related facts", "more information", "overview"])
            ep.act("Let me search more broadly before going on.", "search", {"query": f"{current} {words}", "k": 5},
                   bad=True)


class NoisyAgent(PlannerAgent):
    """The planner, plus malformed, redundant and wrong calls before its steps."""

    name = "noisy"
    noise_prob = 0.4

    def before_step(self, ep: Episode, current: str | None, rng: random.Random) -> None:
        if current is None or rng.random() >= self.noise_prob:
            return
        kind = rng.choice(["malformed", "redundant", "wrong"])
        previous = [m for m in ep.messages if m.role == "assistant" and m.tool_calls]
        if kind == "redundant" and previous:
            call = previous[-1].tool_calls[0]
            ep.act("Let me make sure of that.", call.name, dict(call.arguments), bad=True)
        elif kind == "wrong":
            other = ep.tools.graph.title(rng.choice(ep.tools.graph.entities))
            ep.act(f"Maybe \"{other}\" has what I need.", "visit", {"page": other}, bad=True)
        else:
            broken = rng.choice([{"page_title": current}, {"query": current, "k": "five"}, {"page": ""}])
            ep.act(f"I will open \"{current}\".", "visit" if "page" in str(broken) else "search", broken, bad=True)


SCRIPTED_AGENTS: dict[str, type[PlannerAgent]] = {"planner": PlannerAgent, "greedy": GreedyAgent, "noisy": NoisyAgent}


# --- the policy as a ReAct agent ----------------------------------------------------------------------------


def parse_assistant(text: str, tool_names: Sequence[str] = DEEP_SEARCH_TOOLS) -> Message:
    """Generated text → an assistant message: reasoning, content and at most one call to a tool of
    ``tool_names`` (the tools the episode was given).

    Calls to other tools are not taken as calls (the content keeps their text), so the critic sees a turn with no
    valid action; the episode runs one call per turn, so calls after the first are dropped."""
    content, reasoning, calls = parse_assistant_text(text, tool_names=tuple(tool_names))
    if not (content or calls or reasoning):
        content = "(empty)"
    return Message(role="assistant", reasoning=reasoning, content=content, tool_calls=calls[:1])


class ReActAgent:
    """The policy model answering through the tools: generate → parse call → run tool → … (batched over QAs), with
    at most ``max_turns`` assistant turns (the last may only answer: its call is not run).

    The loop is :func:`forge.search.rollout.run_episodes`, the one agentic RL's rollouts run; here the policy is a
    generation backend. Synthesis runs it beside the scripted agents when ``deep_search.policy_agent`` is on
    (forge/search/synthesize.py), and the deep-search eval suite runs it on the policy;
    tests/search/test_react_cli.py and tests/search/test_policy_agent.py run it on a real model."""

    name = "policy"

    def __init__(self, backend: Any, *, max_turns: int = 6, max_new_tokens: int = 128, temperature: float = 0.0):
        self.backend, self.max_turns = backend, max_turns
        self.max_new_tokens, self.temperature = max_new_tokens, temperature

    def generate(self, chats: list[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> list[tuple[str, None]]:
        texts = self.backend.generate(chats, tools=tools, max_new_tokens=self.max_new_tokens,
                                      temperature=self.temperature)
        return [(text, None) for text in texts]

    def count_tokens(self, chat: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        raise NotImplementedError("ReActAgent runs without a context budget")

    def run_many(self, qas: list[SearchQA], tools: SearchTools) -> list[SearchTrajectory]:
        from forge.search.rollout import run_episodes  # the loop's module imports this one (Episode, parse_assistant)

        rollouts = run_episodes(self, qas, tools, max_tool_calls=self.max_turns - 1, agent=self.name)
        return [r.trajectory for r in rollouts]
