"""Turn-level critic (paper §2.2.1): every assistant turn judged on logical soundness, tool-call accuracy and
information gain; a failing turn is not trained on (``Message.loss = False``) and gets a negative RL reward.

The rule-based critic (default) knows the QA's gold path and reads the graph:
- **tool-call accuracy**: the turn acts (a call, or the final answer); the call names a known tool with
  schema-valid arguments (:func:`forge.search.tools.validate_arguments`); it repeats no earlier call; the tool
  did not answer with an error;
- **logical soundness**: a visited page was named before (in the question or an observation: no jumps to
  entities from nowhere), and so was a followed link's label; every title quoted in the reasoning was seen before;
  the final answer (a citation ``[k]`` read as the k-th page opened) was seen in an observation and is the gold
  answer;
- **information gain**: the observation tells something new about the question's *relevant* entities — the gold
  path, the candidates the chain's relations offer at each step, the entities sharing an obfuscated head's
  description: a search must surface such a page not seen before, a visit or a followed link must open one and
  return lines not seen before, python must print something new.
The LLM critic (:func:`llm_judge`) asks a teacher endpoint for the same three verdicts per turn.

    verdicts = judge_trajectory(traj, qa, graph)
    faulty, clean = inject_fault(traj, qa, tools, rng)      # for measuring the critic
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

from forge.data.schemas import Message, SearchQA, SearchTrajectory, ToolCall, TurnVerdict
from forge.search.graph import SearchGraph
from forge.search.tools import SearchTools, dumps_call, parse_results, validate_arguments
from forge.search.walks import Condition

_QUOTED = re.compile(r"\"([^\"]{2,200})\"")


def normalize_answer(text: str | None) -> str:
    """An answer as compared with the gold one: lower case, full stops dropped, whitespace collapsed."""
    return " ".join((text or "").lower().replace(".", " ").split())


_CITATION = re.compile(r"^\[(\d{1,3})\]\.?$")
OPENING_TOOLS = ("visit", "follow")


def opened_pages(messages: list[Message]) -> list[str]:
    """Titles of the pages an episode opened, in order: every ``visit`` or ``follow`` the tool answered without an
    error (its answer's first line is the page's title)."""
    titles = []
    for call_msg, obs in itertools.pairwise(messages):
        if (call_msg.role == "assistant" and call_msg.tool_calls and call_msg.tool_calls[0].name in OPENING_TOOLS
                and obs.role == "tool" and obs.content and not obs.content.startswith("Error")):
            titles.append(obs.content.splitlines()[0])
    return titles


def resolve_answer(answer: str, opened: list[str]) -> str:
    """A final answer as graded: a citation ``[k]`` names the k-th page the episode opened (what a deep-search
    answer cites); anything else is the answer as written."""
    match = _CITATION.match(answer.strip())
    if match and 1 <= int(match.group(1)) <= len(opened):
        return opened[int(match.group(1)) - 1]
    return answer


def relevant_titles(qa: SearchQA, g: SearchGraph) -> set[str]:
    """Titles whose pages bear on the question: gold path, per-hop candidates, obfuscated-head look-alikes."""
    spec = qa.walk or {}
    titles = set(qa.gold_path)
    if spec.get("head_condition"):
        cond = Condition(**spec["head_condition"])
        titles |= {g.title(m) for m in g.with_description(cond.description or "")}
    node = spec.get("head")
    for hop in spec.get("hops", []):
        if node is None:
            break
        titles |= {g.title(t) for t in g.tails(node, hop["relation"])}
        node = hop["tail"]
    return titles


def judge_trajectory(traj: SearchTrajectory, qa: SearchQA, g: SearchGraph) -> list[TurnVerdict]:
    """One rule-based verdict per assistant turn."""
    relevant = relevant_titles(qa, g)
    relevant_cf = {t.casefold() for t in relevant}
    question = traj.messages[0].content
    seen_text = question  # everything the agent has been shown so far
    seen_lines: set[str] = set()
    seen_titles: set[str] = set()
    calls: set[str] = set()
    verdicts = []
    msgs = traj.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            if m.role == "tool":
                seen_text += "\n" + m.content
                seen_lines |= set(m.content.splitlines())
            continue
        reasons: list[str] = []
        logical = tool_ok = gain = True
        for quoted in _QUOTED.findall(m.reasoning or ""):
            if quoted not in seen_text:
                logical = False
                reasons.append(f"claims {quoted!r}, which nothing shown so far says")
        obs = msgs[i + 1].content if i + 1 < len(msgs) and msgs[i + 1].role == "tool" else None
        if not m.tool_calls:
            if i != len(msgs) - 1:
                tool_ok = False
                reasons.append("no tool call and not the final answer")
            else:
                answer = resolve_answer(m.content.strip(), opened_pages(msgs[:i]))  # a citation [k] names a page
                if normalize_answer(answer) != normalize_answer(traj.gold_answer):
                    logical = False
                    reasons.append("final answer is not the one the gold path leads to")
                if answer.casefold() not in seen_text.casefold():
                    logical = False
                    reasons.append("final answer appears in no observation")
            verdicts.append(TurnVerdict(message_index=i, logical=logical, tool_call=tool_ok, info_gain=gain,
                                        reasons=reasons))
            continue
        call = m.tool_calls[0]
        problem = validate_arguments(call.name, call.arguments)
        key = dumps_call(call.name, call.arguments)
        if problem:
            tool_ok = False
            reasons.append(f"invalid call: {problem}")
        elif key in calls:
            tool_ok = False
            reasons.append("repeats an earlier call")
        if obs is None:
            tool_ok = False
            reasons.append("the call was not run (the episode's call budget or context was spent)")
        elif obs.startswith("Error"):
            tool_ok = False
            reasons.append("the tool returned an error")
        calls.add(key)
        if not problem and call.name == "visit":
            page = call.arguments["page"]
            if page.casefold() not in seen_text.casefold():
                logical = False
                reasons.append(f"visits {page!r}, which was never mentioned")
        if not problem and call.name == "follow":
            link = call.arguments["link"]
            if link.casefold() not in seen_text.casefold():
                logical = False
                reasons.append(f"follows {link!r}, which neither the question nor a page named")
        if not problem and obs is not None and not obs.startswith("Error"):
            gain, why = _information_gain(call, obs, relevant, relevant_cf, seen_lines, seen_titles)
            if not gain:
                reasons.append(why)
        else:
            gain = False
        verdicts.append(TurnVerdict(message_index=i, logical=logical, tool_call=tool_ok, info_gain=gain,
                                    reasons=reasons))
    return verdicts


def _information_gain(call: ToolCall, obs: str, relevant: set[str], relevant_cf: set[str], seen_lines: set[str],
                      seen_titles: set[str]) -> tuple[bool, str]:
    if call.name == "search":
        titles = [t for t, _ in parse_results(obs)]
        new = [t for t in titles if t in relevant and t not in seen_titles]
        seen_titles.update(titles)
        return bool(new), "the results add no page relevant to the question"
    if call.name in OPENING_TOOLS:
        title = obs.splitlines()[0] if obs else ""
        seen_titles.add(title)
        if title.casefold() not in relevant_cf:
            return False, f"{title!r} is off the question's path"
        if not set(obs.splitlines()[1:]) - seen_lines:
            return False, "the page shows nothing new"
        return True, ""
    # python: a new computation that runs is new information (repeats are caught as redundant calls).
    return True, ""


# --- LLM critic ---------------------------------------------------------------------------------------------

CRITIC_PROMPT = """You judge one step of a search agent. Question: {question}
Gold answer: {answer}. Gold path: {path}.
Conversation so far:
{history}
The step to judge:
{turn}
Answer with a JSON object {{"logical": true|false, "tool_call": true|false, "info_gain": true|false, "reason": "..."}}:
logical = the step follows from what was seen; tool_call = a valid, non-redundant call; info_gain = it reveals new
facts on the gold path (a final answer counts as gaining when it is correct)."""


def _render(m: Message) -> str:
    calls = " ".join(dumps_call(c.name, c.arguments) for c in m.tool_calls)
    return f"[{m.role}] {(m.reasoning or '')} {m.content} {calls}".strip()


def llm_judge(backend: Any, traj: SearchTrajectory, qa: SearchQA) -> list[TurnVerdict]:
    """Verdicts from a teacher model (one prompt per assistant turn, batched). Unparseable replies fail the turn."""
    prompts, indices = [], []
    for i, m in enumerate(traj.messages):
        if m.role != "assistant":
            continue
        history = "\n".join(_render(x)[:600] for x in traj.messages[:i])
        turn = _render(m) + ("\n[observation] " + traj.messages[i + 1].content[:800]
                             if i + 1 < len(traj.messages) else "")
        prompts.append([{"role": "user", "content": CRITIC_PROMPT.format(
            question=qa.question, answer=qa.answer, path=" -> ".join(qa.gold_path), history=history, turn=turn)}])
        indices.append(i)
    replies = backend.generate(prompts, max_new_tokens=128, temperature=0.0) if prompts else []
    out = []
    for i, reply in zip(indices, replies, strict=True):
        match = re.search(r"\{.*\}", reply, re.DOTALL)
        try:
            obj = json.loads(match.group(0)) if match else {}
        except json.JSONDecodeError:
            obj = {}
        ok = all(isinstance(obj.get(k), bool) for k in ("logical", "tool_call", "info_gain"))
        out.append(TurnVerdict(message_index=i, logical=bool(obj.get("logical")) if ok else False,
                               tool_call=bool(obj.get("tool_call")) if ok else False,
                               info_gain=bool(obj.get("info_gain")) if ok else False,
                               reasons=[str(obj.get("reason", ""))[:300] if ok else "unparseable critic reply"],
                               judge="llm"))
    return out


# --- fault injection (to measure the critic) ----------------------------------------------------------------

FAULTS = ("malformed", "redundant", "unmentioned_page", "off_path_page", "hallucinated_claim", "wrong_answer")


def inject_fault(traj: SearchTrajectory, qa: SearchQA, tools: SearchTools, rng: random.Random,
                 kind: str | None = None) -> tuple[SearchTrajectory, int, str] | None:
    """A copy of a clean trajectory with one faulty assistant turn; returns (trajectory, its index, kind).

    The faulty call is really run, so its observation is what the tools would answer. None when the kind does
    not apply to this trajectory (e.g. no page line to go off the path with)."""
    kind = kind or rng.choice(FAULTS)
    msgs = list(traj.messages)
    calls = [i for i, m in enumerate(msgs) if m.role == "assistant" and m.tool_calls]
    if not calls:
        return None
    if kind == "wrong_answer":
        seen = [t for i in calls for t, _ in parse_results(msgs[i + 1].content)] or [tools.graph.title(
            rng.choice(tools.graph.entities))]
        wrong = next((t for t in seen if normalize_answer(t) != normalize_answer(qa.answer)), "Atlantis")
        at = len(msgs) - 1
        msgs[at] = Message(role="assistant", reasoning=f"So the answer is {wrong}.", content=wrong)
        return _rebuilt(traj, msgs, at), at, kind
    at = rng.choice(calls)
    if kind == "hallucinated_claim":
        fake = tools.graph.title(rng.choice(tools.graph.entities))
        if fake in "\n".join(m.content for m in msgs):
            return None
        msgs[at] = msgs[at].model_copy(update={"reasoning": f"{msgs[at].reasoning} I recall that \"{fake}\" is "
                                                            "part of the answer."})
        return _rebuilt(traj, msgs, at), at, kind
    if kind == "malformed":
        name = msgs[at].tool_calls[0].name
        args = rng.choice([{"page_title": "x"}, {"query": 5}, {}]) if name != "python" else {"source": "print(1)"}
        call = ToolCall(name=name, arguments=args)
    elif kind == "redundant":
        call = msgs[at].tool_calls[0]
        at = at + 2  # the same call again right after the original
    else:
        lines = [ln for i in calls for ln in msgs[i + 1].content.splitlines() if ln.startswith("The ")]
        if kind == "off_path_page":
            relevant = {t.casefold() for t in relevant_titles(qa, tools.graph)}
            options = [ln.rsplit(" is ", 1)[-1].rstrip(".") for ln in lines]
            options = [o for o in options if o.casefold() not in relevant and tools.graph.resolve(o)]
        else:
            text = "\n".join(m.content for m in msgs).casefold()
            options = [t for t in (tools.graph.title(m) for m in rng.sample(tools.graph.entities, 20))
                       if t.casefold() not in text]
        if not options:
            return None
        call = ToolCall(name="visit", arguments={"page": rng.choice(sorted(options))})
    step = [Message(role="assistant", reasoning="Let me look at this.", tool_calls=[call]),
            Message(role="tool", name=call.name, content=tools.call(call.name, call.arguments))]
    if kind == "malformed":
        msgs[at : at + 2] = step
    else:
        msgs[at:at] = step
    return _rebuilt(traj, msgs, at), at, kind


def _rebuilt(traj: SearchTrajectory, msgs: list[Message], at: int) -> SearchTrajectory:
    return SearchTrajectory.build(source=traj.source, parents=traj.parents, qa_id=traj.qa_id,
                                  agent=f"{traj.agent}+fault", question=traj.question, gold_answer=traj.gold_answer,
                                  messages=msgs, tools=traj.tools, final_answer=msgs[-1].content,
                                  correct=traj.correct, bad_turns=[at])


def critic_scores(clean: list[tuple[SearchTrajectory, SearchQA]], tools: SearchTools, seed: int = 0) -> dict:
    """Recall on one injected fault per clean trajectory, false-flag rate on the clean trajectories' turns and
    precision (flagged injected turns / all flagged turns of the faulty trajectories).

    Only correct trajectories without known bad turns count as clean (planner output)."""
    rng = random.Random(seed)
    g = tools.graph
    flagged = injected = false_flags = clean_turns = other_flags = 0
    by_kind: dict[str, list[int]] = {k: [0, 0] for k in FAULTS}
    for traj, qa in clean:
        if not traj.correct or traj.bad_turns:
            continue
        for v in judge_trajectory(traj, qa, g):
            clean_turns += 1
            false_flags += not v.passed
        made = None
        for _ in range(4):
            made = inject_fault(traj, qa, tools, rng)
            if made:
                break
        if made is None:
            continue
        faulty, at, kind = made
        verdicts = judge_trajectory(faulty, qa, g)
        verdict = next(v for v in verdicts if v.message_index == at)
        other_flags += sum(not v.passed for v in verdicts if v.message_index != at)
        injected += 1
        flagged += not verdict.passed
        by_kind[kind][0] += not verdict.passed
        by_kind[kind][1] += 1
    return {"injected": injected, "recall": flagged / max(1, injected), "clean_turns": clean_turns,
            "precision": flagged / max(1, flagged + other_flags),
            "false_flag_rate": false_flags / max(1, clean_turns),
            "recall_by_kind": {k: (a / b if b else None) for k, (a, b) in by_kind.items()}}


def natural_scores(trajs: list[tuple[SearchTrajectory, SearchQA]], g: SearchGraph) -> dict:
    """Critic against the turns agents made bad on purpose (noisy agent's calls, greedy detours)."""
    tp = fp = fn = tn = 0
    for traj, qa in trajs:
        bad = set(traj.bad_turns)
        for v in judge_trajectory(traj, qa, g):
            flagged, truth = not v.passed, v.message_index in bad
            tp += flagged and truth
            fp += flagged and not truth
            fn += truth and not flagged
            tn += not flagged and not truth
    return {"bad_turns": tp + fn, "recall": tp / max(1, tp + fn), "precision": tp / max(1, tp + fp),
            "false_flag_rate": fp / max(1, fp + tn)}
