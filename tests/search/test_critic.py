"""Turn-level critic: ≥ 90% of injected faulty turns flagged, ≤ 10% false flags on clean turns; turn masks and
rewards follow the verdicts; an LLM critic's replies are parsed (and refused when unparseable)."""

from __future__ import annotations

import json
import random
import re

import pytest

from forge.data.schemas import FAIL_REWARD, PASS_REWARD
from forge.search.agents import NoisyAgent
from forge.search.critic import FAULTS, critic_scores, inject_fault, judge_trajectory, llm_judge, natural_scores


@pytest.fixture(scope="module")
def clean(planner_runs):
    return planner_runs[:80]


def test_critic_recall_and_false_flags(clean, tools):
    scores = critic_scores(clean, tools, seed=1)
    assert scores["injected"] >= 60
    assert scores["recall"] >= 0.9
    assert scores["false_flag_rate"] <= 0.1
    assert all(r is None or r >= 0.8 for r in scores["recall_by_kind"].values())


def test_each_fault_kind_is_caught_for_the_right_reason(clean, tools):
    rng = random.Random(5)
    dimension = {"malformed": "tool_call", "redundant": "tool_call", "unmentioned_page": "logical",
                 "off_path_page": "info_gain", "hallucinated_claim": "logical", "wrong_answer": "logical"}
    for kind in FAULTS:
        made = next((m for t, q in clean if t.correct and (m := inject_fault(t, q, tools, rng, kind))), None)
        assert made is not None, kind
        faulty, at, _ = made
        qa = next(q for _, q in clean if q.id == faulty.qa_id)
        verdict = next(v for v in judge_trajectory(faulty, qa, tools.graph) if v.message_index == at)
        assert not getattr(verdict, dimension[kind]), (kind, verdict)


def test_noisy_agents_bad_turns_are_flagged(qas, tools):
    runs = [(NoisyAgent().run(qa, tools), qa) for qa in qas[:40]]
    scores = natural_scores(runs, tools.graph)
    assert scores["bad_turns"] >= 10 and scores["recall"] >= 0.9 and scores["false_flag_rate"] <= 0.1


def test_failing_turns_are_masked_and_get_negative_reward(clean, tools):
    traj, qa = next((t, q) for t, q in clean if t.correct)
    faulty, at, _ = inject_fault(traj, qa, tools, random.Random(0), "redundant")
    verdicts = judge_trajectory(faulty, qa, tools.graph)
    judged = faulty.model_copy(update={"verdicts": verdicts})
    sample = judged.to_chat_sample()
    masked = [i for i, m in enumerate(sample.messages) if m.role == "assistant" and not m.loss]
    assert at in masked
    rewards = judged.turn_rewards()
    assert len(rewards) == len(faulty.assistant_indices())
    assert rewards[faulty.assistant_indices().index(at)] == FAIL_REWARD and PASS_REWARD in rewards


class _ScriptedTeacher:
    """A stand-in for a teacher endpoint: replies with fixed critic JSON (the one part Forge does not own)."""

    def __init__(self, replies):
        self.replies = replies

    def generate(self, prompts, **kwargs):
        return [self.replies[i % len(self.replies)] for i in range(len(prompts))]


def test_llm_critic_parses_verdicts_and_fails_unparseable_replies(clean):
    traj, qa = clean[0]
    ok = json.dumps({"logical": True, "tool_call": True, "info_gain": False, "reason": "nothing new"})
    verdicts = llm_judge(_ScriptedTeacher([ok, "I think it is fine"]), traj, qa)
    assert len(verdicts) == len(traj.assistant_indices()) and all(v.judge == "llm" for v in verdicts)
    assert verdicts[0].logical and not verdicts[0].info_gain and verdicts[0].reasons == ["nothing new"]
    assert not verdicts[1].passed and verdicts[1].reasons == ["unparseable critic reply"]


def test_teacher_rewrites_questions_and_vetoes_turns(qas, tools):
    from forge.search.synthesize import rewrite_questions, run_agents

    qa = next(q for q in qas if q.walk["head_condition"])  # has a year range
    years = re.findall(r"\b\d{4}\b", qa.question)
    kept = rewrite_questions([qa], _ScriptedTeacher(["A question without its years?"]))[0]
    assert kept == qa  # a rewrite that loses a year is refused
    fluent = f"Which entity do you reach from the one {years[0]}-{years[-1]} … ({' '.join(years)})?"
    rewritten = rewrite_questions([qa], _ScriptedTeacher([fluent]))[0]
    assert rewritten.question == fluent and rewritten.id != qa.id and rewritten.walk == qa.walk
    veto = json.dumps({"logical": False, "tool_call": True, "info_gain": True, "reason": "non sequitur"})
    [traj] = run_agents([rewritten], tools, ["planner"], backend=_ScriptedTeacher([veto]))
    assert traj.correct  # the planner still follows the constraints of a rewritten question
    assert all(not v.passed and v.judge == "llm" for v in traj.verdicts)
