"""Multi-turn episodes of a policy in the offline search environment: agentic RL's rollouts (§2.2) and
:class:`forge.search.agents.ReActAgent`'s.

An episode: the question → the policy writes one assistant turn in the chat format of forge/chat.py → its first
call to a known tool is run (:class:`forge.search.tools.SearchTools`) and the response appended as a tool turn → …
until the policy answers (a turn without a call) or spends its budget: a call past ``max_tool_calls`` is not run
and ends the episode unanswered. ``Rollout.tool_calls`` counts the calls actually run.

Long horizons (the abstract's up to 600 tool calls): before each turn the history is fitted to the context
(:class:`ContextBudget`, :func:`fit_context`). Old tool responses are cut first, oldest first, the newest
``keep_recent`` kept whole: to their first characters (``truncate``) or to a stub (``elide``). When that is not
enough, the oldest steps (call + response) are folded into a note on the question that lists the calls made; last,
the newest response is cut too. When even that does not fit, the episode ends unanswered (``ended='context'``).
Only what the policy is shown shrinks: the stored trajectory keeps every turn, and the critic
(forge/search/critic.py) judges the whole of it. tests/search/test_agentic_env.py drives one episode past 100
calls through this loop.

    env = SearchEnvironment(tools, qas, num_generations=4, questions_per_step=4, max_tool_calls=4,
                            context=ContextBudget(tokens=944))
    rollouts = env.rollout(policy, step=0)    # 4 questions × 4 episodes, each judged turn by turn
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from forge.chat import messages_to_hf
from forge.config import AgenticRLConfig
from forge.data.schemas import Message, SearchQA, SearchTrajectory
from forge.search.agents import DEEP_SEARCH_TOOLS, Episode, parse_assistant
from forge.search.critic import judge_trajectory
from forge.search.lookups import relation_turns
from forge.search.tools import SPECS_BY_NAME, SearchTools

Chat = list[dict[str, Any]]
NOTE_CALLS = 10  # calls a fold note names (the newest); older ones are only counted, so the note stays short
Task = Literal["lookups", "links"]
QuestionOrder = Literal["shuffled", "by_relation"]
# The tools each task family gives the policy: lookups (and deep search) the three deep-search tools; links, the
# link navigation of forge/search/lookups.py, ``follow`` alone (what it needs: the prompt stays short).
TASK_TOOLS: dict[str, tuple[str, ...]] = {"lookups": DEEP_SEARCH_TOOLS, "links": ("follow",)}


class AgentPolicy(Protocol):
    """What drives an episode: the model being trained (forge/training/agentic.py), a generation backend, a script."""

    def generate(self, chats: list[Chat], tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        """One assistant turn per chat: the text it wrote, and a record the caller keeps with that turn."""
        ...

    def count_tokens(self, chat: Chat, tools: list[dict[str, Any]]) -> int:
        """Tokens of ``chat`` rendered with its generation prompt (called only under a :class:`ContextBudget`)."""
        ...


@dataclass(frozen=True)
class ContextBudget:
    """How much history the policy may be shown, and how it is cut to fit.

    Args:
        tokens: prompt tokens at most (the model's context minus one turn's generation budget).
        strategy: ``truncate`` keeps the first ``truncated_chars`` characters of an old tool response, ``elide``
            replaces it with a one-line stub.
        keep_recent: the newest tool responses are never cut (they are what the next turn acts on).
        truncated_chars: characters an old response keeps under ``truncate``.
    """

    tokens: int
    strategy: Literal["truncate", "elide"] = "truncate"
    keep_recent: int = 2
    truncated_chars: int = 200


def _cut(message: Message, budget: ContextBudget) -> Message:
    text = message.content
    if budget.strategy == "truncate" and len(text) > budget.truncated_chars:
        cut = len(text) - budget.truncated_chars
        text = f"{text[: budget.truncated_chars]}\n(… {cut} characters cut to fit the context)"
    elif budget.strategy == "elide":
        text = f"(response of {len(text)} characters elided to fit the context)"
    return message.model_copy(update={"content": text})


def _call_text(m: Message) -> str:
    call = m.tool_calls[0]
    return f"{call.name} {json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)}"


def _steps(messages: list[Message]) -> list[int]:
    """Indices of the tool responses (each answers the call just before it)."""
    return [i for i, m in enumerate(messages) if m.role == "tool" and i > 0 and messages[i - 1].tool_calls]


def _view(messages: list[Message], level: int, budget: ContextBudget) -> list[Message]:
    """The history after the first ``level`` reductions: cut old tool responses (oldest first, all but the newest
    ``keep_recent``), then fold the oldest steps into a note on the question (all but the newest step), and last
    cut the newest response too (one response larger than the context)."""
    steps = _steps(messages)
    cuttable = steps[: max(0, len(steps) - budget.keep_recent)]
    folds = max(0, min(level - len(cuttable), len(steps) - 1))
    cuts = set(cuttable[:level])
    if steps and level > len(cuttable) + len(steps) - 1:
        cuts.add(steps[-1])
    view = [_cut(m, budget) if i in cuts else m for i, m in enumerate(messages)]
    if not folds:
        return view
    folded = [_call_text(messages[i - 1]) for i in steps[:folds]]
    listed = folded[-NOTE_CALLS:]
    more = f" (and {len(folded) - len(listed)} earlier)" if len(folded) > len(listed) else ""
    note = (f"{view[0].content}\n\n(Earlier steps, dropped to fit the context: {len(folded)} tool calls{more}: "
            + "; ".join(listed) + ".)")
    return [view[0].model_copy(update={"content": note}), *view[steps[folds - 1] + 1 :]]


def _phases(messages: list[Message], budget: ContextBudget) -> list[int]:
    """Reduction counts at which each kind of reduction is used up: cuts, folds, the newest response's cut. Within
    a phase every reduction shortens the history; across a boundary not always (the first fold adds the note)."""
    steps = len(_steps(messages))
    cuts = max(0, steps - budget.keep_recent)
    return [cuts, cuts + max(0, steps - 1), cuts + max(0, steps - 1) + min(1, steps)]


def fit_context(messages: list[Message], fits: Callable[[list[Message]], bool], budget: ContextBudget
                ) -> tuple[list[Message], int] | None:
    """The least-reduced history that ``fits``, and how many reductions it took; None when even the most reduced
    one does not fit. The first phase whose end fits is searched by bisection (a few ``fits`` calls per turn,
    however long the episode)."""
    if fits(messages):
        return messages, 0
    low = 0
    for end in _phases(messages, budget):
        if end > low and fits(_view(messages, end, budget)):
            high = end  # fits(view(high)); not fits(view(low)), or low is where this phase starts
            while high - low > 1:
                mid = (low + high) // 2
                if fits(_view(messages, mid, budget)):
                    high = mid
                else:
                    low = mid
            return _view(messages, high, budget), high
        low = max(low, end)
    return None


@dataclass
class Rollout:
    """One episode: the trajectory (with the critic's verdicts once judged), the policy's record of each assistant
    turn in order, the calls run, and the most reductions any turn's context needed."""

    group: str
    trajectory: SearchTrajectory
    records: list[Any] = field(default_factory=list)
    tool_calls: int = 0
    context_reductions: int = 0
    ended: Literal["answered", "budget", "context"] = "answered"


def run_episodes(policy: AgentPolicy, qas: list[SearchQA], tools: SearchTools, *, max_tool_calls: int,
                 context: ContextBudget | None = None, agent: str = "policy", task: Task = "lookups"
                 ) -> list[Rollout]:
    """One episode per QA, batched: every active episode gets its next turn from one ``policy.generate`` call.
    ``task``: what the policy is given (:data:`TASK_TOOLS`; ``links`` episodes start on the question's head page)."""
    specs_given = [SPECS_BY_NAME[name] for name in TASK_TOOLS[task]]
    episodes = [Episode(tools, qa.question, specs=specs_given,
                        start_page=tools.graph.title(qa.walk["head"]) if task == "links" else None) for qa in qas]
    records: list[list[Any]] = [[] for _ in qas]
    most_reduced = [0] * len(qas)
    ended = ["answered"] * len(qas)
    finals: list[str | None] = [None] * len(qas)
    specs = [s.model_dump(mode="json") for s in specs_given]

    def fits(messages: list[Message]) -> bool:
        return policy.count_tokens(messages_to_hf(messages), specs) <= context.tokens

    active = list(range(len(qas)))
    while active:
        shown: list[tuple[int, list[Message]]] = []
        for i in active:
            fitted = (episodes[i].messages, 0) if context is None else fit_context(episodes[i].messages, fits, context)
            if fitted is None:
                if len(episodes[i].messages) == 1:  # not even the question fits: a setting, not a long horizon
                    need = policy.count_tokens(messages_to_hf(episodes[i].messages), specs)
                    raise ValueError(f"the question with the tools' system prompt takes {need} tokens, more than the "
                                     f"{context.tokens} the context leaves for a prompt (agentic_rl.context_tokens "
                                     "minus max_new_tokens): raise context_tokens (and the model's context)")
                ended[i] = "context"
                continue
            most_reduced[i] = max(most_reduced[i], fitted[1])
            shown.append((i, fitted[0]))
        outputs = policy.generate([messages_to_hf(view) for _, view in shown], specs) if shown else []
        active = []
        for (i, _), (text, record) in zip(shown, outputs, strict=True):
            ep, msg = episodes[i], parse_assistant(text, TASK_TOOLS[task])
            ep.messages.append(msg)
            records[i].append(record)
            if not msg.tool_calls:
                finals[i] = msg.content
            elif ep.calls >= max_tool_calls:
                ended[i] = "budget"
            else:
                ep.run_call(msg.tool_calls[0])
                active.append(i)
    return [Rollout(group=qa.id, trajectory=ep.finish(qa, agent, final), records=recs, tool_calls=ep.calls,
                    context_reductions=red, ended=end)
            for ep, qa, final, recs, red, end in zip(episodes, qas, finals, records, most_reduced, ended, strict=True)]


class SearchEnvironment:
    """Agentic RL's environment: the questions, the tools, the call budget, the context rule and the critic.

    Step ``k`` takes the next ``questions_per_step`` questions of a seeded order (cycling), runs
    ``num_generations`` episodes of each (the group whose rewards are compared) and judges every turn. The order is
    shuffled, or with ``order='by_relation'`` shuffled and then dealt so the relation sequences take turns
    (forge.search.lookups.relation_turns): every relation is trained as often as any other while it lasts, not in
    the graph's proportions."""

    def __init__(self, tools: SearchTools, qas: list[SearchQA], *, num_generations: int, questions_per_step: int,
                 max_tool_calls: int, context: ContextBudget | None = None, seed: int = 0,
                 task: Task = "lookups", order: QuestionOrder = "shuffled") -> None:
        if not qas:
            raise ValueError("the environment needs at least one question")
        self.tools, self.max_tool_calls, self.context, self.task = tools, max_tool_calls, context, task
        self.num_generations, self.questions_per_step = num_generations, questions_per_step
        self.order = list(qas)
        random.Random(f"{seed}:agentic-order").shuffle(self.order)
        if order == "by_relation":
            self.order = relation_turns(self.order)
        self.last: list[Rollout] = []

    @classmethod
    def from_config(cls, tools: SearchTools, qas: list[SearchQA], cfg: AgenticRLConfig, seed: int = 0
                    ) -> SearchEnvironment:
        """The environment a profile's ``agentic_rl`` section describes (the history shown leaves one turn's
        ``max_new_tokens`` free in ``context_tokens``)."""
        context = ContextBudget(tokens=cfg.context_tokens - cfg.max_new_tokens, strategy=cfg.context_strategy,
                                keep_recent=cfg.keep_recent_tool_responses, truncated_chars=cfg.truncated_tool_chars)
        return cls(tools, qas, num_generations=cfg.num_generations, questions_per_step=cfg.questions_per_step,
                   max_tool_calls=cfg.max_tool_calls, context=context, seed=seed, task=cfg.task,
                   order=cfg.question_order)

    def attempt(self, policy: AgentPolicy, qas: list[SearchQA]) -> list[Rollout]:
        """One unjudged episode of each of ``qas`` under the environment's rules (the held-out check)."""
        return run_episodes(policy, qas, self.tools, max_tool_calls=self.max_tool_calls, context=self.context,
                            task=self.task)

    def questions(self, step: int) -> list[SearchQA]:
        start = step * self.questions_per_step
        return [self.order[(start + k) % len(self.order)] for k in range(self.questions_per_step)]

    def rollout(self, policy: AgentPolicy, step: int, shard: tuple[int, int] = (0, 1)) -> list[Rollout]:
        """``num_generations`` judged episodes of each of this step's questions (a trajectory's verdicts: one per
        assistant turn, from :func:`forge.search.critic.judge_trajectory`). ``shard=(r, n)``: only every n-th
        question from the r-th (rank r of a launched stage; a question's whole group stays on one rank)."""
        index, count = shard
        qas = [qa for qa in self.questions(step)[index::count] for _ in range(self.num_generations)]
        rollouts = run_episodes(policy, qas, self.tools, max_tool_calls=self.max_tool_calls, context=self.context,
                                task=self.task)
        for r, qa in zip(rollouts, qas, strict=True):
            r.trajectory = r.trajectory.model_copy(
                update={"verdicts": judge_trajectory(r.trajectory, qa, self.tools.graph)})
        self.last = rollouts
        return rollouts
