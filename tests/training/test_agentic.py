"""Agentic RL (forge/training/agentic.py, tasks/agentic.py): trajectory- and turn-level advantages, a rejected turn
and the tool responses get no loss (zero gradient), the update moves toward the rewarded turns, a killed run
resumes, and the stage task logs and registers a policy version."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from forge.chat import IM_END, format_assistant_text
from forge.config import AgenticRLConfig, BaseModelConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import Message, SearchTrajectory, TurnVerdict
from forge.search.lookups import LookupAgent, build_lookup_qas
from forge.search.rollout import Rollout, SearchEnvironment
from forge.search.tools import SearchTools
from forge.training.agentic import (
    STATE_FILE,
    TurnPolicy,
    TurnTokens,
    build_sequences,
    collate,
    idle_steps,
    sequence_loss,
    shared_prefix_logits,
    token_logprobs,
    train_agentic,
    turn_advantages,
    update_policy,
    updates,
)
from forge.training.base_model import build_model
from forge.training.checkpoints import save_atomically, work_dir_for

CFG = AgenticRLConfig(num_generations=2, questions_per_step=1, max_steps=2, learning_rate=1e-2, max_tool_calls=4,
                      max_new_tokens=32, context_tokens=2048, micro_batch_size=4, save_steps=1)


@pytest.fixture(scope="module")
def tools(workspace) -> SearchTools:
    return SearchTools.load(workspace)


@pytest.fixture(scope="module")
def one_hop(tools):
    return next(qa for qa in build_lookup_qas(tools.graph, 20, seed=5) if len(qa.gold_relations) == 1)


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory):
    cfg = BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128, seed=3)
    return save_atomically(build_model(cfg, tokenizer), tokenizer, tmp_path_factory.mktemp("agentic") / "policy")


# --- advantages (pure) ---------------------------------------------------------------------------------------


def _episode(group: str, correct: bool, passed: list[bool]) -> Rollout:
    messages = [Message(role="user", content="Q?")]
    for _ in passed[:-1]:
        messages += [Message(role="assistant", content="call"), Message(role="tool", content="obs")]
    messages.append(Message(role="assistant", content="A"))
    indices = [i for i, m in enumerate(messages) if m.role == "assistant"]
    traj = SearchTrajectory.build(source="t", qa_id=group, agent="t", question="Q?", gold_answer="A",
                                  messages=messages, correct=correct, verdicts=[
                                      TurnVerdict(message_index=i, logical=ok, tool_call=True, info_gain=True)
                                      for i, ok in zip(indices, passed, strict=True)])
    return Rollout(group=group, trajectory=traj)


@pytest.mark.parametrize("mode, episodes, expected", [
    # a group of one right and one wrong answer: ±1 (std-normalized) on every passed turn
    ("no_loss", [("g", True, [True, True]), ("g", False, [True, True])], [[(1.0, True)] * 2, [(-1.0, True)] * 2]),
    # a group that agrees carries no trajectory signal
    ("no_loss", [("g", True, [True]), ("g", True, [True])], [[(0.0, True)], [(0.0, True)]]),
    # a rejected turn in a right trajectory: no loss, not the trajectory's credit
    ("no_loss", [("g", True, [False, True]), ("g", False, [True, True])],
     [[(0.0, False), (1.0, True)], [(-1.0, True)] * 2]),
    # ... or a negative reward of -turn_weight
    ("negative_reward", [("g", True, [False, True]), ("g", False, [True, True])],
     [[(-0.5, True), (1.0, True)], [(-1.0, True)] * 2]),
    # ... or, with no_credit, the blame of a failed trajectory and no credit from a right one: a rejected turn in the
    # wrong episode gets its -1, the one in the right episode no loss; a group that agrees (all wrong) blames no one
    ("no_credit",
     [("g", True, [False, True]), ("g", False, [False, True]), ("h", False, [False]), ("h", False, [False])],
     [[(0.0, False), (1.0, True)], [(-1.0, True)] * 2, [(0.0, False)], [(0.0, False)]]),
    # groups are normalized apart: 3 of 4 right → the wrong one gets -√3, the right ones +1/√3
    ("no_loss", [("a", True, [True])] * 3 + [("a", False, [True]), ("b", False, [True])],
     [[(3 ** -0.5, True)]] * 3 + [[(-(3 ** 0.5), True)], [(0.0, True)]]),
])
def test_turn_advantages(mode, episodes, expected):
    cfg = CFG.model_copy(update={"rejected_turns": mode, "turn_weight": 0.5})
    got = turn_advantages([_episode(*e) for e in episodes], cfg)
    assert [[(pytest.approx(a), t) for a, t in turns] for turns in got] == expected


# --- real episodes from a scripted policy --------------------------------------------------------------------


class ScriptedLookup(TurnPolicy):
    """The model's tokenizer and template, with scripted text: visit the head for the relation, visit it again
    (a repeated call: the critic rejects it), then answer — right in the first episode of the batch, wrong in the
    second. Its token ids are the template's prompt ids and the tokenized text, as if the model had written it."""

    def __init__(self, tokenizer, qa):
        super().__init__(None, tokenizer, max_new_tokens=64, temperature=1.0, batch_size=8)
        self.qa = qa

    def generate(self, chats, tools):
        out = []
        for k, chat in enumerate(chats):
            turn = sum(m["role"] == "assistant" for m in chat)
            head, label = self.qa.gold_path[0], self.qa.gold_relations[0]
            if turn < 2:
                text = format_assistant_text("", f"I need the {label} of \"{head}\".",
                                             [{"name": "visit", "arguments": {"page": head, "goal": label}}])
            else:
                text = format_assistant_text(self.qa.answer if k == 0 else "Atlantis", "So that is it.")
            ids = self.tokenizer(text + IM_END, add_special_tokens=False)["input_ids"]
            out.append((text, TurnTokens(self._prompt_ids(chat, tools), ids)))
        return out


@pytest.fixture(scope="module")
def episodes(tools, one_hop, tokenizer):
    env = SearchEnvironment(tools, [one_hop], num_generations=2, questions_per_step=1, max_tool_calls=4)
    return env.rollout(ScriptedLookup(tokenizer, one_hop), step=0)


def test_the_critic_rejects_the_repeated_call_and_the_wrong_answer(episodes):
    right, wrong = episodes
    assert right.trajectory.correct and not wrong.trajectory.correct and right.tool_calls == wrong.tool_calls == 2
    assert [v.passed for v in right.trajectory.verdicts] == [True, False, True]
    assert [v.passed for v in wrong.trajectory.verdicts] == [True, False, False]


def _spans(episode) -> list[tuple[int, int]]:
    """Where each turn's generated ids sit in its episode's packed sequence (one sequence: nothing was cut)."""
    return [(len(t.prompt_ids), len(t.prompt_ids) + len(t.completion_ids)) for t in episode.records]


@pytest.mark.parametrize("mode", ["no_loss", "negative_reward"])
def test_a_rejected_turn_and_the_tool_responses_get_no_loss(episodes, model_dir, tokenizer, mode):
    cfg = CFG.model_copy(update={"rejected_turns": mode})
    sequences = build_sequences(episodes, cfg)
    assert len(sequences) == 2  # each episode's three turns packed into one sequence
    right_seq, right_spans = sequences[0], _spans(episodes[0])
    assert right_seq.ids[right_spans[2][0] : right_spans[2][1]] == episodes[0].records[2].completion_ids
    trained = {j for start, end in right_spans for j in range(start, end) if right_seq.mask[j]}
    assert trained == {j for k, (start, end) in enumerate(right_spans) for j in range(start, end)
                       if k != 1 or mode == "negative_reward"}  # question, tool responses: mask 0
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    batch = collate(sequences, tokenizer.pad_token_id)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits.retain_grad()
    loss, _ = sequence_loss(logits, batch, float(batch["mask"].sum()))
    loss.backward()
    # logits at position j-1 predict token j: the gradient on them is zero exactly where token j is not trained.
    per_position = logits.grad[0].abs().sum(-1)
    rejected = per_position[right_spans[1][0] - 1 : right_spans[1][1] - 1]
    passed = per_position[right_spans[2][0] - 1 : right_spans[2][1] - 1]
    tool_response = per_position[right_spans[0][1] : right_spans[1][0] - 1]
    assert torch.all(passed > 0) and torch.all(tool_response == 0)
    if mode == "no_loss":
        assert torch.all(rejected == 0)
    else:  # pushed down: a positive d loss / d log p on every token of the rejected turn
        assert torch.all(rejected > 0) and set(right_seq.advantages[right_spans[1][0] : right_spans[1][1]]) == {-0.5}


def test_one_update_raises_the_rewarded_answer_and_lowers_the_unrewarded_one(episodes, model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = CFG.model_copy(update={"rejected_turns": "negative_reward"})
    right, wrong = (e.records[2] for e in episodes)
    # The two answer turns share their reasoning and template tokens (pushed up by +1 and down by -0.5: the shared
    # text rises on balance), so the answers are read where the two completions differ: the answer itself.
    start = next(i for i, (a, b) in enumerate(zip(right.completion_ids, wrong.completion_ids, strict=False)) if a != b)
    tail = next(i for i, (a, b) in enumerate(zip(right.completion_ids[::-1], wrong.completion_ids[::-1], strict=False))
                if a != b)

    def answer_logprob(tokens) -> float:
        ids = torch.tensor([tokens.prompt_ids + tokens.completion_ids])
        with torch.no_grad():
            logp = token_logprobs(model(input_ids=ids).logits, ids)[0, len(tokens.prompt_ids) - 1 :]
        return float(logp[start : len(tokens.completion_ids) - tail].sum())

    before = [answer_logprob(t) for t in (right, wrong)]
    stats = update_policy(model, None, episodes, cfg, torch.optim.AdamW(model.parameters(), lr=1e-2),
                          tokenizer.pad_token_id)
    after = [answer_logprob(t) for t in (right, wrong)]
    assert stats["sequences"] == 2 and stats["trained_tokens"] > 0
    assert after[0] > before[0] + 1.0  # the right answer (advantage +1) is more likely
    assert after[1] < before[1]  # the wrong one (rejected, advantage -0.5) less


def test_an_update_under_bf16_autocast_takes_the_fp32_step_in_bf16(episodes, model_dir, tokenizer):
    """``runtime.bf16`` reaches the agentic loop's update: its forward passes run in bf16 (a layer's output is bf16)
    while the weights stay fp32, and the step is the fp32 one to bf16's precision (plain SGD: the weights move by
    the gradient, so the comparison reads the gradients)."""
    cfg = CFG.model_copy(update={"rejected_turns": "negative_reward", "max_grad_norm": 1e9})
    start = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    moves, losses, seen = {}, {}, []
    for bf16 in (False, True):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        hook = model.model.layers[0].mlp.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        stats = update_policy(model, None, episodes, cfg, torch.optim.SGD(model.parameters(), lr=1.0),
                              tokenizer.pad_token_id, bf16=bf16)
        hook.remove()
        losses[bf16] = stats["loss"]
        assert all(p.dtype == torch.float32 for p in model.parameters())
        moves[bf16] = torch.cat([(v - start[k]).flatten() for k, v in model.state_dict().items()])
    assert seen[0] == torch.float32 and seen[-1] == torch.bfloat16
    assert losses[True] == pytest.approx(losses[False], rel=0.02)
    assert float(torch.nn.functional.cosine_similarity(moves[True], moves[False], dim=0)) > 0.95


def test_shared_prefix_logits_equal_a_plain_forward_pass(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(0)
    ids = torch.randint(5, 1000, (3, 80))
    ids[:, :50] = ids[0, :50]  # a shared prefix of 50 tokens, then rows of 80, 70 and 60 tokens
    attention = torch.ones_like(ids)
    for row, length in enumerate([80, 70, 60]):
        attention[row, length:] = 0
    real = attention.bool()
    plain = model(input_ids=ids, attention_mask=attention).logits
    plain[real].sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = shared_prefix_logits(model, ids, attention)
    shared[real].sum().backward()
    assert torch.allclose(plain[real], shared[real], atol=1e-4)
    for before, param in zip(grads, model.parameters(), strict=True):  # equal up to float rounding
        assert torch.allclose(before, param.grad, rtol=1e-4, atol=1e-5 * float(before.abs().max()))


# --- the training loop and the stage ---------------------------------------------------------------------------


class Killed(RuntimeError):
    pass


class KilledAt:
    """The real environment, with the process killed when step ``step`` starts."""

    def __init__(self, env, step: int) -> None:
        self.env, self.step = env, step

    def rollout(self, policy, step, shard=(0, 1)):
        if step == self.step:
            raise Killed
        return self.env.rollout(policy, step, shard)


def test_train_agentic_logs_every_step_and_resumes_after_a_kill(tools, one_hop, model_dir, tmp_path):
    env = SearchEnvironment.from_config(tools, [one_hop], CFG)
    out = tmp_path / "rl"
    with pytest.raises(Killed):
        train_agentic(model_dir, KilledAt(env, 1), CFG, TrainingRuntimeConfig(), out, seed=0)
    assert (work_dir_for(out) / STATE_FILE).exists() and not out.exists()
    result = train_agentic(model_dir, env, CFG, TrainingRuntimeConfig(), out, seed=0)
    assert result.resumed_from_step == 1 and [r["step"] for r in result.curve] == [1, 2]
    for record in result.curve:
        assert {"trajectory_reward", "turn_reward", "rejected_turn_share", "tool_calls"} <= set(record)
        assert 0 <= record["tool_calls"] <= CFG.max_tool_calls
    assert (out / "config.json").exists() and not work_dir_for(out).exists()


class Scripted:
    """The environment, with every episode written by ``policy`` instead of the model under training."""

    def __init__(self, env, policy):
        self.env, self.policy = env, policy

    def rollout(self, policy, step, shard=(0, 1)):
        return self.env.rollout(self.policy, step, shard)


class AlwaysWrong(ScriptedLookup):
    def __init__(self, tokenizer, qa):
        super().__init__(tokenizer, qa.model_copy(update={"answer": "Atlantis"}))  # every episode answers wrong


@pytest.mark.parametrize("policy, learns", [(ScriptedLookup, True), (AlwaysWrong, False)])
def test_a_run_that_never_updates_the_policy_says_so(tools, one_hop, model_dir, tokenizer, tmp_path, caplog,
                                                    policy, learns):
    """One right and one wrong answer per group: every step trains. Two wrong ones: the group's trajectory rewards
    agree, the passed turns get advantage 0 and the rejected ones no loss (no_loss), so no step changes a weight,
    and the run says so instead of registering its parent's weights in silence."""
    env = Scripted(SearchEnvironment.from_config(tools, [one_hop], CFG), policy(tokenizer, one_hop))
    with caplog.at_level("WARNING", logger="forge.training.agentic"):
        result = train_agentic(model_dir, env, CFG, TrainingRuntimeConfig(), tmp_path / "rl", seed=0)
    assert updates(result.curve) == (2 if learns else 0)
    warned = [r.getMessage() for r in caplog.records if "updated the policy" in r.getMessage()]
    assert bool(warned) != learns
    if warned:
        assert "none of its 2 steps" in warned[0] and "trajectory rewards were equal" in warned[0]
    before = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "rl").state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) != learns


@pytest.mark.parametrize("policy, steps", [(ScriptedLookup, 3), (AlwaysWrong, 2)])
def test_a_run_stops_after_its_idle_steps_only_when_none_changed_a_weight(tools, one_hop, model_dir, tokenizer,
                                                                        tmp_path, caplog, policy, steps):
    """stop_after_idle_steps=2 of 3: a run whose groups disagree trains every step; one whose groups always agree
    stops after two, says so, and hands back its parent's weights as such a run does."""
    cfg = CFG.model_copy(update={"max_steps": 3, "stop_after_idle_steps": 2})
    env = Scripted(SearchEnvironment.from_config(tools, [one_hop], cfg), policy(tokenizer, one_hop))
    with caplog.at_level("WARNING", logger="forge.training.agentic"):
        result = train_agentic(model_dir, env, cfg, TrainingRuntimeConfig(), tmp_path / "rl", seed=0)
    assert result.steps == len(result.curve) == steps
    assert idle_steps(result.curve) == (0 if steps == 3 else 2)
    stopped = [r.getMessage() for r in caplog.records if "stopped after" in r.getMessage()]
    message = "agentic RL: stopped after step 2 of 3: its last 2 steps changed no weight (stop_after_idle_steps)"
    assert stopped == ([] if steps == 3 else [message])
    assert (tmp_path / "rl" / "config.json").exists()


def test_agentic_rl_task_registers_a_policy_version_with_its_parent(workspace, tools, model_dir, tmp_path):
    import mlflow

    from forge.data.jsonl import write_jsonl
    from forge.stages import Checkpoint, DataMix
    from registry.tracking import PARENT_VERSION_TAG, StageContext, init_mlflow
    from tasks.agentic import agentic_rl_task

    init_mlflow(workspace)
    mix = tmp_path / "mix"
    mix.mkdir()
    sft_rows = [LookupAgent().run(qa, tools).to_chat_sample() for qa in build_lookup_qas(tools.graph, 6, seed=0)]
    write_jsonl(mix / "train-000.jsonl", sft_rows[:4])
    write_jsonl(mix / "heldout.jsonl", sft_rows[4:])
    cfg = CFG.model_copy(update={"questions": 8, "max_steps": 2, "save_steps": 10})
    sft = SFTConfig(curriculum=[SFTStageConfig(name="s", max_length=2048, max_steps=1, learning_rate=1e-3)])
    parent = Checkpoint(model_dir=str(model_dir), model_name="forge-policy", version="7")
    result = agentic_rl_task.fn(ctx=StageContext(), cfg=cfg, sft=sft, runtime=TrainingRuntimeConfig(), seed=0,
                                policy=parent, data=DataMix(mix_dir=str(mix), data_md5="md5"))
    assert result.model_name == "forge-policy"
    version = mlflow.MlflowClient().get_model_version("forge-policy", result.version)
    assert version.tags[PARENT_VERSION_TAG] == "forge-policy/7" and "metric.sft_heldout_loss" in version.tags
    run = mlflow.get_run(result.run_id)
    assert {"trajectory_reward_first20", "trajectory_reward_last20", "tool_calls_last20",
            "rejected_turn_share_first20", "updates"} <= set(run.data.metrics)
    assert 0 <= run.data.metrics["updates"] <= 2
    history = mlflow.MlflowClient().get_metric_history(result.run_id, "tool_calls")
    assert [m.step for m in history] == [1, 2]
    assert int(run.data.params["questions"]) == 8 and int(run.data.params["sft_pages_excluded"]) >= 6
    curves = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id, "curves")}
    assert "curves/agentic_rl_trajectory_reward.png" in curves
    shown = mlflow.artifacts.load_dict(f"runs:/{result.run_id}/episodes.json")
    assert shown and not {e["question"] for e in shown} & {r.messages[0].content for r in sft_rows}
    shutil.rmtree(result.model_dir)


def test_two_ranks_take_the_update_one_process_takes_on_all_episodes(episodes, model_dir, tokenizer, tmp_path):
    """Under `accelerate launch` each rank trains on its own groups' episodes; the loss is divided by both ranks'
    trained tokens and the gradients summed, so the step equals one process's on the union. The shards differ in
    size (2 and 3 episodes): dividing by a rank's own token count, or averaging instead of summing, would not."""
    from forge.training.launch import run_training
    from tests.training.launched import agentic_update

    right, wrong = episodes
    other = [dataclasses.replace(e, group="h") for e in (right, wrong, wrong)]
    cfg = CFG.model_copy(update={"rejected_turns": "negative_reward", "max_grad_norm": 1e9})
    lr = 1.0  # plain SGD: the weights move by exactly the gradient, so the comparison reads the gradients

    one = AutoModelForCausalLM.from_pretrained(model_dir)
    one_stats = update_policy(one, None, [right, wrong, *other], cfg, torch.optim.SGD(one.parameters(), lr=lr),
                              tokenizer.pad_token_id)
    two = run_training(agentic_update, TrainingRuntimeConfig(num_processes=2), tmp_path / "two", model_dir=model_dir,
                       shards=[[right, wrong], other], cfg=cfg, pad_id=tokenizer.pad_token_id, lr=lr)
    start = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    moved = max(float((one.state_dict()[k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-3  # the step changed the weights
    for key, value in one.state_dict().items():
        torch.testing.assert_close(two["weights"][key], value, rtol=1e-4, atol=1e-6, msg=key)
    assert two["stats"]["trained_tokens"] == one_stats["trained_tokens"]
    assert two["stats"]["sequences"] == one_stats["sequences"] == 5
    assert two["stats"]["loss"] == pytest.approx(one_stats["loss"], rel=1e-4)
