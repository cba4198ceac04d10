"""The link task of agentic RL (forge/search/lookups.py, tools.py's ``follow``, the critic's citations): questions asked
from a page and answered by following its links and citing the page reached, held out as RL needs them."""

from __future__ import annotations

from collections import Counter

import pytest

from forge.config import AgenticRLConfig, SFTStageConfig
from forge.data.schemas import Message, ToolCall
from forge.search.agents import Episode
from forge.search.critic import judge_trajectory, opened_pages, resolve_answer
from forge.search.lookups import (
    LinkAgent,
    balanced_by_relations,
    build_link_qas,
    check_questions,
    link_relations,
    relation_sequence,
    sft_seen,
    task_questions,
    warmup_questions,
)
from forge.search.rollout import SearchEnvironment, run_episodes
from forge.search.tools import FOLLOW_SPEC, TOOL_SPECS

LINKS = AgenticRLConfig(task="links", link_relations=12, questions=40, warmup_questions=60, check_questions=20,
                        warmup=SFTStageConfig(name="w", max_length=256, max_steps=1, learning_rate=1e-3))


@pytest.fixture(scope="module")
def link_qas(graph):
    return build_link_qas(graph, 40, relations=12, seed=3)


def test_follow_opens_the_one_page_a_link_leads_to(tools, graph, link_qas):
    qa = next(q for q in link_qas if len(q.walk["hops"]) == 2)
    head, first, _ = qa.gold_path
    label = qa.walk["hops"][0]["label"]
    seen = tools.call("follow", {"link": label}, page=head)
    assert seen.splitlines()[0] == first and seen.splitlines()[2].startswith("Links: ")
    assert qa.walk["hops"][1]["label"] in seen  # the next hop's link is listed on the page reached
    assert tools.opens("follow", {"link": label}, page=head) == first
    # A link is a relation with exactly one page: one with several is a fact to read, not a link.
    mid = graph.resolve(head)
    tails: dict[str, set[str]] = {}
    for r, t in graph.out_edges(mid):
        tails.setdefault(graph.label(r), set()).add(t)
    assert set(tools.links(mid)) == {k for k, v in tails.items() if len(v) == 1}
    assert tools.call("follow", {"link": "no such relation"}, page=head) == (
        f"Error: the page of {head} has no link 'no such relation'.")
    assert tools.call("follow", {"link": label}).startswith("Error: no page is open")
    assert tools.opens("follow", {"link": "no such relation"}, page=head) is None


def test_an_episode_moves_with_its_calls_and_runs_only_the_tools_it_was_given(tools, link_qas):
    qa = next(q for q in link_qas if len(q.walk["hops"]) == 2)
    head, first, second = qa.gold_path
    ep = Episode(tools, qa.question, start_page=head, specs=[FOLLOW_SPEC])
    ep.act("", "follow", {"link": qa.walk["hops"][0]["label"]})
    assert ep.page == first
    ep.act("", "follow", {"link": "no such relation"})  # an error moves nowhere
    assert ep.page == first and ep.messages[-1].content.startswith("Error")
    ep.act("", "visit", {"page": second})  # given follow only: visit is no tool here
    assert ep.messages[-1].content == "Error: unknown tool 'visit' (tools: follow)" and ep.page == first
    ep.act("", "follow", {"link": qa.walk["hops"][1]["label"]})
    assert ep.page == second and opened_pages(ep.messages) == [first, second]
    plain = Episode(tools, "Q?")  # the deep-search tools, as every SFT row has them
    assert plain.specs == TOOL_SPECS and plain.page is None


def test_a_citation_names_the_kth_page_opened():
    opened = ["Leicester", "University of Leicester"]
    assert resolve_answer("[2]", opened) == "University of Leicester"
    assert resolve_answer(" [1]. ", opened) == "Leicester"
    assert resolve_answer("[3]", opened) == "[3]"  # no third page: the answer stays as written (and is wrong)
    assert resolve_answer("Leicester [1]", opened) == "Leicester [1]"  # only a bare citation is one


def test_link_questions_ask_the_first_hop_last_over_the_common_relations(graph, link_qas):
    labels = {graph.label(r) for r in link_relations(graph, 12)}
    assert len(labels) == 12 and len(link_qas) == 40
    assert {len(q.walk["hops"]) for q in link_qas} == {1, 2}
    for qa in link_qas:
        hops = [h["label"] for h in qa.walk["hops"]]
        assert set(hops) <= labels
        assert qa.question.startswith(f"You are on the page of {qa.gold_path[0]}. What is ")
        assert qa.question.endswith(f"its {hops[0]}?") and qa.source == "kg_fb15k237:links"


def test_the_scripted_solution_is_right_and_every_turn_passes_the_critic(tools, graph, link_qas):
    for qa in link_qas:
        traj = LinkAgent().run(qa, tools)
        calls = [c for m in traj.messages for c in m.tool_calls]
        assert [c.name for c in calls] == ["follow"] * len(qa.walk["hops"])
        assert traj.messages[-1].content == f"[{len(qa.walk['hops'])}]"
        assert traj.correct and traj.final_answer == qa.answer and traj.tools == [FOLLOW_SPEC]
        assert all(v.passed for v in judge_trajectory(traj, qa, graph))


def test_the_critic_fails_an_early_answer_and_a_link_nobody_named(tools, graph, link_qas):
    qa = next(q for q in link_qas if len(q.walk["hops"]) == 2)
    good = LinkAgent().run(qa, tools)
    early = good.model_copy(update={"messages": [*good.messages[:3], Message(role="assistant", content="[1]")]})
    last = judge_trajectory(early, qa, graph)[-1]  # stops one hop short: cites the page on the way
    assert not last.passed and "final answer is not the one the gold path leads to" in last.reasons
    head = qa.gold_path[0]
    other = next(label for label in tools.links(graph.resolve(head)) if label not in qa.question)
    off = good.model_copy(update={"messages": [
        good.messages[0], Message(role="assistant", tool_calls=[ToolCall(name="follow", arguments={"link": other})]),
        Message(role="tool", name="follow", content=tools.call("follow", {"link": other}, page=head))]})
    verdict = judge_trajectory(off, qa, graph)[0]
    assert not verdict.logical and f"follows {other!r}, which neither the question nor a page named" in verdict.reasons


def test_rl_warmup_and_check_questions_share_no_head(graph, link_qas):
    seen = sft_seen([])
    rl = task_questions(graph, LINKS, seen, seed=0)
    warm = warmup_questions(graph, LINKS, rl, seed=0)
    check = check_questions(graph, LINKS, rl, seed=0)
    heads = [{q.walk["head"] for q in qs} for qs in (rl, warm, check)]
    assert [len(q) for q in (rl, warm, check)] == [40, 60, 20]
    assert not heads[0] & heads[1] and not heads[0] & heads[2] and not heads[1] & heads[2]
    # Without the exclusion the warm-up's seed does meet RL's heads: the exclusion is what holds them apart.
    unfiltered = build_link_qas(graph, 400, relations=12, seed=1)
    assert {q.walk["head"] for q in unfiltered} & heads[0]


def test_a_balanced_warmup_asks_every_relation_about_as_often_while_rl_and_its_check_stay_natural(graph):
    natural = LINKS.model_copy(update={"warmup_questions": 240, "min_hops": 1, "max_hops": 1})
    balanced = natural.model_copy(update={"warmup_mix": "balanced"})
    rl = task_questions(graph, natural, sft_seen([]), seed=0)

    def relations(qs):
        return Counter(q.walk["hops"][0]["relation"] for q in qs)

    drawn = {c.warmup_mix: warmup_questions(graph, c, rl, seed=0) for c in (natural, balanced)}
    counts = {mix: relations(qs) for mix, qs in drawn.items()}
    assert len(drawn["balanced"]) == 240 and len(counts["balanced"]) == 12
    assert set(counts["balanced"].values()) == {20}  # 240 / 12 relations, the graph has 20 of each to give
    assert max(counts["natural"].values()) >= 4 * min(counts["natural"].values())  # what balancing undoes
    rl_heads = {q.walk["head"] for q in rl}
    assert not rl_heads & {q.walk["head"] for q in drawn["balanced"]}
    # The held-out slice the warm-up keeps (every 20th) mixes the relations too: the draw is shuffled.
    assert len(relations(drawn["balanced"][::20])) >= 6
    # The check's questions avoid the balanced warm-up's heads, and RL's draw does not depend on the warm-up's mix.
    check = check_questions(graph, balanced, rl, seed=0)
    assert not {q.walk["head"] for q in check} & {q.walk["head"] for q in drawn["balanced"]}
    assert [q.id for q in task_questions(graph, balanced, sft_seen([]), seed=0)] == [q.id for q in rl]


def test_a_contrast_warmup_asks_each_head_about_every_link_it_has_so_only_the_question_tells_them_apart(tools, graph):
    contrast = LINKS.model_copy(update={"warmup_questions": 240, "min_hops": 1, "max_hops": 1,
                                        "warmup_mix": "contrast"})
    rl = task_questions(graph, contrast, sft_seen([]), seed=0)
    drawn = warmup_questions(graph, contrast, rl, seed=0)
    assert len(drawn) == 240 and all(len(q.walk["hops"]) == 1 for q in drawn)
    wanted = {graph.label(r) for r in link_relations(graph, 12)}
    by_head: dict[str, set[str]] = {}
    for q in drawn:
        by_head.setdefault(q.walk["head"], set()).add(q.walk["hops"][0]["label"])
    # A head is asked about links of the 12 its page has (each once; not one that leads to a hub page, or whose
    # page is not the only answer), most heads about each such link.
    for head, asked in by_head.items():
        assert asked <= set(tools.links(head)) & wanted, graph.title(head)
    every = sum(asked == set(tools.links(head)) & wanted for head, asked in by_head.items())
    assert every >= 0.8 * len(by_head)
    assert len({q.id for q in drawn}) == 240
    assert sum(len(a) >= 2 for a in by_head.values()) >= 20  # sets where the head cannot tell the link
    assert not {q.walk["head"] for q in rl} & set(by_head)
    # The scripted solution answers each one (the question names a link the page has, and it leads to the answer).
    assert all(LinkAgent().run(q, tools).correct for q in drawn[:30])
    with pytest.raises(ValueError, match="'contrast' asks 1-hop questions"):
        contrast.model_validate({**contrast.model_dump(), "max_hops": 2})


def test_balancing_takes_each_relation_sequence_in_turn_until_it_runs_out(link_qas):
    by_kind = Counter(relation_sequence(q) for q in link_qas)
    rarest = min(by_kind.values())
    picked = balanced_by_relations(link_qas, rarest * len(by_kind), seed=0)
    assert Counter(relation_sequence(q) for q in picked) == {k: rarest for k in by_kind}
    everything = balanced_by_relations(link_qas, 10_000, seed=0)
    assert sorted(q.id for q in everything) == sorted(q.id for q in link_qas)  # past the rarest, the rest follow


def test_rl_by_relation_trains_the_relations_in_turn_on_the_same_questions(tools, link_qas):
    kinds = Counter(relation_sequence(q) for q in link_qas)
    rounds = min(kinds.values())
    cfg = LINKS.model_copy(update={"questions_per_step": len(kinds)})
    shuffled, by_relation = (SearchEnvironment.from_config(tools, link_qas, cfg.model_copy(update={
        "question_order": order}), seed=1) for order in ("shuffled", "by_relation"))
    assert sorted(q.id for q in by_relation.order) == sorted(q.id for q in link_qas)  # the same questions, reordered
    for step in range(rounds):  # while the rarest relation lasts, each step asks every relation once
        assert Counter(relation_sequence(q) for q in by_relation.questions(step)) == {k: 1 for k in kinds}
    # the shuffled order asks them as the graph does: the commonest several times in as many steps
    asked = Counter(relation_sequence(q) for step in range(rounds) for q in shuffled.questions(step))
    assert max(asked.values()) > rounds and len(kinds) > 2


class Scripted:
    """A policy that writes fixed turns (no model): the loop, not the sampling, is what is tested here."""

    def __init__(self, turns: list[str]) -> None:
        self.turns = turns

    def generate(self, chats, tools):
        assert [t["function"]["name"] for t in tools] == ["follow"]  # a links episode offers follow alone
        return [(self.turns[(len(chat) - 1) // 2], None) for chat in chats]

    def count_tokens(self, chat, tools):
        return 0


def test_a_links_episode_starts_on_the_head_page_and_grades_the_citation(tools, link_qas):
    qa = next(q for q in link_qas if len(q.walk["hops"]) == 1)
    label = qa.walk["hops"][0]["label"]
    call = f'<tool_call>\n{{"name": "follow", "arguments": {{"link": "{label}"}}}}\n</tool_call>'
    (right,) = run_episodes(Scripted([call, "[1]"]), [qa], tools, max_tool_calls=4, task="links")
    assert right.tool_calls == 1 and right.trajectory.correct and right.trajectory.final_answer == qa.answer
    (wrong,) = run_episodes(Scripted([call, "[2]"]), [qa], tools, max_tool_calls=4, task="links")
    assert not wrong.trajectory.correct and wrong.trajectory.final_answer == "[2]"
