"""Launched training (forge/training/launch.py): two CPU ranks over gloo under `accelerate launch` follow the loss
curve one process draws with the same global batch; rank 0's metrics reach the caller; a failing rank's traceback
does; a killed launch leaves no rank running and the next launch resumes from its checkpoint."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import time

import psutil
import pytest

from forge.config import SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.data.schemas import ChatSample, Message
from forge.training.checkpoints import work_dir_for
from forge.training.launch import LaunchError, job_dir_for, run_training
from forge.training.sft import run_sft_stage
from tests.processes import processes_naming

pytestmark = pytest.mark.cost(250)

ONE = TrainingRuntimeConfig(fused_lm_head=False)
TWO = TrainingRuntimeConfig(fused_lm_head=False, num_processes=2)
STEPS = 16


def qa_rows(docs: list[dict]) -> list[ChatSample]:
    return [ChatSample.build(domain="general", source="wiki2", messages=[
        Message(role="user", content=f"Who or what is {d['title']}?"),
        Message(role="assistant", content=d["text"].split(". ")[0][:200])]) for d in docs]


@pytest.fixture(scope="module")
def rows(wiki_docs):
    return qa_rows(wiki_docs[:256]), qa_rows(wiki_docs[-16:])


def sft_call(rows, batch: int, save_steps: int = 4, steps: int = STEPS) -> dict:
    stage = SFTStageConfig(name="s", max_length=96, max_steps=steps, learning_rate=3e-3, per_device_batch_size=batch)
    return {"train_rows": rows[0], "eval_rows": rows[1], "stage": stage,
            "sft": SFTConfig(curriculum=[stage], save_steps=save_steps)}


def test_two_ranks_follow_the_one_process_loss_curve(tiny_policy, rows, tmp_path):
    one = run_training(run_sft_stage, ONE, tmp_path / "one", model_dir=tiny_policy, **sft_call(rows, batch=8))
    logged: list[tuple[int, dict]] = []
    two = run_training(run_sft_stage, TWO, tmp_path / "two", log_metrics=lambda m, s: logged.append((s, m)),
                       model_dir=tiny_policy, **sft_call(rows, batch=4))  # 2 ranks × 4 = the same global batch of 8

    # Same samples per step (accelerate hands rank r every other batch of the same shuffled order), a loss averaged
    # over the tokens of both ranks and gradients averaged by DDP: the curves agree to float noise (gloo sums in
    # another order). Ranks stepping on their own gradients drift ~1% apart within 16 steps: that is what 1e-3 catches.
    assert [s for s, _ in two.train_curve] == [s for s, _ in one.train_curve] and len(one.train_curve) >= 4
    for (step, a), (_, b) in zip(one.train_curve, two.train_curve):
        assert b == pytest.approx(a, rel=1e-3), f"step {step}: 1 process {a:.5f}, 2 ranks {b:.5f}"
    assert one.train_curve[-1][1] < one.train_curve[0][1] - 0.5  # and the curve is one of learning
    # Held-out losses are averaged per evaluation batch, and 2 ranks batch the held-out rows differently: 1%.
    assert two.eval_loss_after == pytest.approx(one.eval_loss_after, rel=0.01)
    assert two.eval_loss_before == pytest.approx(one.eval_loss_before, rel=0.01)
    assert two.tokens == one.tokens  # every row trained once, on one rank or the other
    assert two.steps == STEPS and (tmp_path / "two" / "config.json").exists()
    assert not job_dir_for(tmp_path / "two").exists() and not work_dir_for(tmp_path / "two").exists()
    # Rank 0's records reached the caller's logger (the task's MLflow run), once each.
    losses = [(s, m["sft/loss"]) for s, m in logged if "sft/loss" in m]
    assert [s for s, _ in losses] == [s for s, _ in two.train_curve]


def test_a_failing_rank_fails_the_call_with_its_traceback(rows, tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(LaunchError) as err:
        run_training(run_sft_stage, TWO, tmp_path / "out", model_dir=missing, **sft_call(rows, batch=4))
    message = str(err.value)
    assert "error-rank0" in message and "error-rank1" in message and "Traceback" in message
    assert str(missing) in message  # the rank's own exception, not the launcher's summary


def test_a_killed_task_stops_its_ranks_and_the_relaunch_resumes_from_the_checkpoint(tiny_policy, rows, tmp_path):
    """Only the task's process dies, as under an OOM kill. (A kill of the whole process group, launcher included, as
    `forge run` killed from the terminal: tests/flows/test_dist.py, inside a launched GRPO stage.)"""
    out = tmp_path / "out"
    call = {"model_dir": tiny_policy, **sft_call(rows, batch=4, save_steps=2, steps=40)}
    (tmp_path / "call.pkl").write_bytes(pickle.dumps((TWO, out, call)))
    script = ("import pickle, sys; from forge.training.launch import run_training; "
              "from forge.training.sft import run_sft_stage; "
              f"runtime, out, call = pickle.load(open({str(tmp_path / 'call.pkl')!r}, 'rb')); "
              "run_training(run_sft_stage, runtime, out, **call)")
    task = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    work = work_dir_for(out)
    deadline = time.monotonic() + 240
    # Watched without find_resume_checkpoint: it removes a checkpoint with no trainer_state.json, which is one a rank
    # is still writing while the stage runs (that deletion failed the rank's save of checkpoint-2 on 2026-11-27).
    while not any(int(p.parent.name.split("-")[-1]) >= 4 for p in work.glob("checkpoint-*/trainer_state.json")):
        assert task.poll() is None, "the launched stage ended before it was killed"
        assert time.monotonic() < deadline, "no checkpoint within 4 minutes"
        time.sleep(0.5)
    job = job_dir_for(out)
    ranks = processes_naming(str(job))
    assert len(ranks) >= 2
    # torch elastic puts each rank in a session of its own: the kill does not reach them directly.
    task.send_signal(signal.SIGKILL)
    task.wait()
    _, alive = psutil.wait_procs(ranks, timeout=60)
    assert not alive, f"ranks still running a minute after their task died: {alive}"
    assert not out.exists()

    result = run_training(run_sft_stage, TWO, out, **call)
    assert result.resumed_from_step is not None and result.resumed_from_step >= 4
    assert result.steps == 40 and (out / "config.json").exists()


def test_grpo_on_two_ranks_each_loading_the_reward_model_it_was_handed(tiny_policy, tmp_path):
    """A GRPO stage launched as 2 ranks: the reward (a frozen RM scorer) crosses to each rank as its directory and
    settings, not its weights, and each rank loads it; both ranks' rollouts are scored and the run trains."""
    from forge.config import GRPOSettings
    from forge.training.checkpoints import save_atomically
    from forge.training.grpo import PointwiseRMReward, run_grpo
    from forge.training.reward_model import RewardScorer, load_reward_model

    rm_dir = save_atomically(*load_reward_model(tiny_policy), tmp_path / "rm")  # a fresh score head: any RM will do
    scorer = RewardScorer(rm_dir, max_length=64)
    blob = pickle.dumps(scorer)
    assert len(blob) < 4096, "the scorer pickled its weights"
    history, answers = [[{"role": "user", "content": "Hi?"}]] * 2, ["Hello.", "Go away."]
    assert pickle.loads(blob).score(history, answers) == pytest.approx(scorer.score(history, answers))

    words = ["river", "stone", "cloud", "ember", "maple", "harbor", "violet", "copper"]
    prompts = [{"prompt": [{"role": "user", "content": f"Write a line about a {w}."}]} for w in words]
    settings = GRPOSettings(num_generations=4, max_completion_length=8, learning_rate=1e-4, max_steps=2,
                            per_device_batch_size=4, max_prompts=8, max_prompt_length=64, save_steps=1, beta=0.1)
    logged: list[dict] = []
    # With the FSDP config transformers loads zeros on rank 1 once the process group is up (cpu-RAM-efficient
    # loading) and TRL leaves a CPU rank's KL reference as loaded: the reference must be rank 0's.
    fsdp = TrainingRuntimeConfig(fused_lm_head=False, num_processes=2, accelerate_config="fsdp")
    result = run_training(run_grpo, fsdp, tmp_path / "policy", log_metrics=lambda m, s: logged.append(m),
                          policy_dir=tiny_policy, prompts=prompts, reward_funcs=[PointwiseRMReward(scorer, 8)],
                          settings=settings, stage="grpo-test")
    assert result.steps == 2 and [r["step"] for r in result.curve] == [1, 2]
    assert all("rm_score" in r and "reward" in r for r in result.curve)
    assert result.curve[0]["kl"] < 1e-4  # before any update the policy is its reference, on both ranks
    assert any("grpo-test/reward" in m for m in logged)  # rank 0's records reached the caller
    assert (tmp_path / "policy" / "config.json").exists()
