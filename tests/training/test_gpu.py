"""On a CUDA device (``pytest -m gpu``; CI has none, so these skip there and say so): the frozen reward models score
on the policy's device and in bf16 as they do on the CPU, colocated GRPO raises the RM's score with both on the
GPU (in fp32 and in bf16), SFT trains in bf16 there, in this process and launched under FSDP, agentic RL samples
its episodes and updates the policy there, and (with vLLM installed) the vLLM backend answers greedily and frees its
memory on release and a GRPO stage trains against its own vLLM server.

    pytest -m gpu tests/training/test_gpu.py -o addopts=""     # addopts deselect the gpu marker

Where JAX is installed beside us (an image with it), set ``JAX_PLATFORMS=cpu``: bm25s imports JAX, which aborts
the process when it tries to take the GPU after torch has."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from forge.config import AgenticRLConfig, SFTConfig, SFTStageConfig, TrainingRuntimeConfig
from forge.training.checkpoints import save_atomically, training_device
from forge.training.pairwise_rm import PairwiseScorer
from forge.training.reward_model import RewardScorer, load_reward_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

HISTORIES = [[{"role": "user", "content": f"What is {i} plus {i + 1}?"}] for i in range(6)]
ANSWERS = [f"It is {2 * i + 1}." if i % 2 else "I do not know." for i in range(6)]


@pytest.fixture(scope="module")
def rm_dir(tiny_policy, tmp_path_factory):
    torch.manual_seed(0)  # the new score head's initialisation
    model, tokenizer = load_reward_model(tiny_policy)
    return save_atomically(model, tokenizer, tmp_path_factory.mktemp("gpu") / "rm")


def test_reward_scorers_score_on_the_policys_device_as_on_the_cpu(rm_dir):
    assert training_device().type == "cuda"
    on_cpu = RewardScorer(rm_dir, device="cpu").score(HISTORIES, ANSWERS)
    on_gpu = RewardScorer(rm_dir)  # default: the training device
    assert next(on_gpu.model.parameters()).device.type == "cuda"
    assert on_gpu.score(HISTORIES, ANSWERS) == pytest.approx(on_cpu, abs=1e-4)
    in_bf16 = RewardScorer(rm_dir, bf16=True)
    assert next(in_bf16.model.parameters()).dtype == torch.bfloat16
    assert in_bf16.score(HISTORIES, ANSWERS) == pytest.approx(on_cpu, rel=0.05, abs=0.02)  # bf16: ~3 digits
    pairwise = PairwiseScorer(rm_dir, bf16=True)
    margins = pairwise.margins(HISTORIES, ANSWERS, ANSWERS[::-1])
    assert margins == pytest.approx([-m for m in pairwise.margins(HISTORIES, ANSWERS[::-1], ANSWERS)], abs=1e-6)


# bf16: on an H200 (2026-11-26/27) this run went NaN at step 36-37 while cuDNN's fused attention took the backward
# (forge.training.checkpoints.apply_runtime turns it off).
@pytest.mark.parametrize("bf16", [False, True])
def test_grpo_raises_a_reward_models_score_with_both_on_the_gpu(hh_chats, rm_dir, tiny_policy, tokenizer, tmp_path,
                                                                 bf16):
    """Colocated GRPO (TRL samples with the policy itself; vLLM is not installed here), the reward model on the
    policy's device: the mean score of the (frozen, randomly headed) RM over the rollouts rises."""
    from forge.config import GRPOSettings
    from forge.training.grpo import PointwiseRMReward, run_grpo
    from forge.training.pairs import build_rl_prompts

    prompts = build_rl_prompts(hh_chats, tokenizer, max_prompts=64, max_prompt_tokens=96, seed=0)
    scorer = RewardScorer(rm_dir, max_length=256, bf16=bf16)
    reward = PointwiseRMReward(scorer, 32, [tokenizer.eos_token_id])
    settings = GRPOSettings(num_generations=8, max_completion_length=32, learning_rate=3e-3, max_steps=40,
                            per_device_batch_size=16, temperature=1.0, save_steps=100)
    result = run_grpo(tiny_policy, prompts, [reward], settings, TrainingRuntimeConfig(bf16=bf16), tmp_path / "grpo")
    assert next(scorer.model.parameters()).device.type == "cuda"
    steps, rewards = result.series("reward")
    assert steps == list(range(1, 41))
    first, last = result.window_mean("reward", 0.0, 0.2), result.window_mean("reward", 0.8, 1.0)
    print(f"GRPO on {torch.cuda.get_device_name(0)}: RM score {first:.3f} -> {last:.3f} (first/last 20% of steps)")
    assert last > first, rewards
    assert (result.out_dir / "model.safetensors").exists()


def test_sft_trains_in_bf16_on_the_gpu(tiny_policy, tool_sample, tmp_path):
    from forge.training.sft import run_sft_stage

    rows = [tool_sample() for _ in range(64)]
    stage = SFTStageConfig(name="gpu-bf16", max_length=1024, max_steps=30, learning_rate=2e-3, per_device_batch_size=8)
    torch.cuda.reset_peak_memory_stats()
    result = run_sft_stage(tiny_policy, rows, rows[:8], stage, SFTConfig(packing=False, save_steps=1000),
                           TrainingRuntimeConfig(bf16=True), tmp_path / "sft")
    assert torch.cuda.max_memory_allocated() > 0  # the trainer put the model on the GPU
    assert result.eval_loss_after < result.eval_loss_before - 0.5, result
    assert (tmp_path / "sft" / "config.json").exists()


def test_sft_trains_in_bf16_under_fsdp_on_one_gpu(tiny_policy, tool_sample, tmp_path, caplog):
    """``runtime.accelerate_config: fsdp`` on a GPU: the stage runs under ``accelerate launch`` with
    infra/accelerate/fsdp.yaml, the Trainer shards with FSDP (rank 0 says so), trains in bf16, and the full state
    dict gathered at the end is an ordinary checkpoint that loads (what the MLflow registry would hold)."""
    import logging

    from transformers import AutoModelForCausalLM

    from forge.training.launch import run_training
    from forge.training.sft import run_sft_stage

    rows = [tool_sample() for _ in range(64)]
    stage = SFTStageConfig(name="gpu-fsdp", max_length=1024, max_steps=30, learning_rate=2e-3, per_device_batch_size=8)
    runtime = TrainingRuntimeConfig(bf16=True, accelerate_config="fsdp", num_processes=1)
    with caplog.at_level(logging.INFO, logger="forge"):
        result = run_training(run_sft_stage, runtime, tmp_path / "sft", model_dir=tiny_policy, train_rows=rows,
                              eval_rows=rows[:8], stage=stage, sft=SFTConfig(packing=False, save_steps=1000))
    assert "[rank 0] sft gpu-fsdp: FSDP, 1 process(es), cuda:0, mixed precision bf16" in caplog.text, caplog.text
    assert result.eval_loss_after < result.eval_loss_before - 0.5, result
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_agentic_rl_samples_and_updates_on_the_gpu(workspace, tiny_policy, tmp_path):
    from safetensors.torch import load_file

    from forge.search.lookups import build_lookup_qas
    from forge.search.rollout import SearchEnvironment
    from forge.search.tools import SearchTools
    from forge.training.agentic import train_agentic

    tools = SearchTools.load(workspace)
    qas = build_lookup_qas(tools.graph, 4, seed=5)
    # A random policy answers nothing right; the critic rejects its turns, and with negative_reward those turns
    # carry -turn_weight, so every step has tokens to train on.
    cfg = AgenticRLConfig(questions=4, num_generations=4, questions_per_step=2, max_steps=2, learning_rate=1e-3,
                          max_tool_calls=2, max_new_tokens=32, context_tokens=2048, micro_batch_size=8, save_steps=1,
                          rejected_turns="negative_reward")
    torch.cuda.reset_peak_memory_stats()
    result = train_agentic(tiny_policy, SearchEnvironment.from_config(tools, qas, cfg), cfg, TrainingRuntimeConfig(),
                           tmp_path / "rl", seed=0)
    assert torch.cuda.max_memory_allocated() > 0  # rollouts and updates ran on the GPU
    assert [r["step"] for r in result.curve] == [1, 2]
    assert all(r["trained_tokens"] > 0 and r["loss"] == r["loss"] for r in result.curve)  # trained, loss not NaN
    before, after = load_file(tiny_policy / "model.safetensors"), load_file(tmp_path / "rl" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k].to(before[k].dtype)) for k in before)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (make setup-gpu)")
def test_vllm_backend_answers_greedily_and_gives_its_memory_back(tiny_policy):
    """The profile's vLLM settings reach the engine (it reserves its memory share), greedy answers repeat, and
    leaving the ``with`` gives the GPU memory back, so the next engine or the trainer finds it free. (Not compared
    with the transformers backend word for word: vLLM runs a float32 checkpoint in half precision under ``auto``.)"""
    from forge.config import GenerationConfig, VLLMConfig
    from forge.generation import local_backend

    prompts = [[{"role": "user", "content": f"What is {i} plus {i + 1}?"}] for i in range(8)]
    free_before, total = torch.cuda.mem_get_info()
    generation = GenerationConfig(backend="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.3, max_model_len=1024,
                                                                  dtype="auto"))
    with local_backend(generation, str(tiny_policy)) as engine:
        reserved = free_before - torch.cuda.mem_get_info()[0]
        first, again = (engine.generate(prompts, max_new_tokens=16, temperature=0.0) for _ in range(2))
    assert reserved > 0.2 * total, f"the engine took {reserved / 2**30:.1f} GiB, not its 30% share"
    assert len(first) == 8 and all(isinstance(t, str) for t in first) and first == again
    assert torch.cuda.mem_get_info()[0] > free_before - 2**30, "the engine kept its memory after the with"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (make setup-gpu)")
def test_grpo_in_trl_server_mode_trains_against_the_stages_own_vllm_server(hh_chats, rm_dir, tiny_policy, tokenizer,
                                                                          tmp_path):
    """TRL's server mode as a stage runs it (forge.training.grpo.train_grpo): the stage starts ``trl vllm-serve``
    on the starting checkpoint (here on the training GPU too, at a third of its memory: one device is lent), the
    rollouts come from it with the weights pushed after each step, and the server is gone when training ends."""
    from forge.config import GenerationConfig, GRPOSettings, VLLMConfig
    from forge.training.grpo import PointwiseRMReward, train_grpo
    from forge.training.pairs import build_rl_prompts
    from forge.training.vllm_server import _healthy

    prompts = build_rl_prompts(hh_chats, tokenizer, max_prompts=32, max_prompt_tokens=96, seed=0)
    reward = PointwiseRMReward(RewardScorer(rm_dir, max_length=256), 32, [tokenizer.eos_token_id])
    settings = GRPOSettings(num_generations=8, max_completion_length=32, learning_rate=1e-3, max_steps=4,
                            per_device_batch_size=16, temperature=1.0, save_steps=100, use_vllm=True)
    generation = GenerationConfig(vllm=VLLMConfig(trl_mode="server", server_gpus=[0], gpu_memory_utilization=0.3,
                                                  max_model_len=1024, dtype="auto", server_port=8765))
    result = train_grpo(TrainingRuntimeConfig(), tmp_path / "grpo", policy_dir=tiny_policy, prompts=prompts,
                        reward_funcs=[reward], settings=settings, generation=generation)
    assert result.series("reward")[0] == [1, 2, 3, 4]
    assert (result.out_dir / "model.safetensors").exists()
    assert not _healthy("http://127.0.0.1:8765"), "the stage left its vLLM server running"
