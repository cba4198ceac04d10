"""Checkpoint plumbing shared by the trainers: work dirs, resume points, atomic final writes, metric callbacks.

A training call writes its HF ``Trainer`` checkpoints under a work dir next to its output
(``<out>.work/``), so a killed run resumes from the last checkpoint instead of restarting; the finished
model is written to a temp dir next to ``out_dir`` and renamed into place, so ``out_dir`` either holds a
complete model or does not exist. :class:`ResumableTraining` takes those steps for every Forge trainer:

    run = ResumableTraining(out_dir, runtime)                  # work dir ready, resume point found
    trainer = SomeTrainer(..., args=TrainingArguments(**common_trainer_args(run.work_dir, runtime, ...)))
    before = run.once("eval_loss_before", lambda: evaluate(trainer))  # measured once, kept across a resume
    run.train(trainer, "sft ctx-256")                          # continues from the last complete checkpoint
    run.finish(trainer, tokenizer)                             # out_dir appears whole, the work dir goes
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.utils import DistributedType
from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from forge.attention import use_fast_decoding
from forge.config import TrainingRuntimeConfig
from forge.hardware import keep_freed_memory
from forge.training.launch import assert_replicas_agree, barrier, beside, is_main_process

logger = logging.getLogger(__name__)

MetricsLogger = Callable[[dict[str, float], int], None]


def work_dir_for(out_dir: Path) -> Path:
    """The trainer's scratch dir for ``out_dir``: a sibling, so a rename never crosses filesystems."""
    return beside(out_dir, "work")


def find_resume_checkpoint(work_dir: Path) -> str | None:
    """The newest *complete* ``checkpoint-N`` under ``work_dir``, or None when there is nothing to resume.

    The Trainer writes a checkpoint in place (weights, optimizer, RNG, then ``trainer_state.json`` last), so a
    run killed while saving leaves a newer but incomplete folder. It is removed, and the previous checkpoint,
    which the Trainer deletes only after a new one is complete, is used instead.
    """
    if not work_dir.is_dir():
        return None
    checkpoints = sorted(
        (p for p in work_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
        reverse=True,
    )
    for ckpt in checkpoints:
        try:
            json.loads((ckpt / "trainer_state.json").read_text())
        except (OSError, ValueError):
            logger.warning("removing incomplete checkpoint %s (the run was killed while saving it)", ckpt)
            shutil.rmtree(ckpt, ignore_errors=True)
            continue
        return str(ckpt)
    return None


def checkpoint_step(checkpoint: str | None) -> int | None:
    """The step of a ``checkpoint-N`` folder (None for None)."""
    return int(Path(checkpoint).name.split("-")[-1]) if checkpoint else None


STATE_FILE = "forge_state.json"


class ResumableTraining:
    """One training call's checkpoint, resume and atomic-save steps (see the module docstring).

    Args:
        out_dir: where the finished model goes; its sibling ``.<name>.work`` holds the Trainer's checkpoints.
        runtime: process-wide settings applied before the trainer is built (CPU threads).
    """

    def __init__(self, out_dir: Path, runtime: TrainingRuntimeConfig) -> None:
        self.started = time.monotonic()
        apply_runtime(runtime)
        self.out_dir = Path(out_dir)
        self.work_dir = work_dir_for(self.out_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.resume = find_resume_checkpoint(self.work_dir)
        self.resumed_from_step = checkpoint_step(self.resume)
        self._kept: dict[str, float] = {}

    def saved(self, key: str) -> float | None:
        """A figure this run kept, or the run it resumes had kept in its work dir (else None)."""
        if key in self._kept:
            return self._kept[key]
        path = self.work_dir / STATE_FILE
        return json.loads(path.read_text()).get(key) if self.resume and path.exists() else None

    def keep(self, key: str, value: float) -> float:
        """Keep ``value`` as ``key`` in the work dir (rank 0 writes), for a resumed run to read back."""
        self._kept[key] = float(value)
        if is_main_process():
            path = self.work_dir / STATE_FILE
            saved = json.loads(path.read_text()) if path.exists() else {}
            path.write_text(json.dumps({**saved, key: self._kept[key]}))
        return self._kept[key]

    def once(self, key: str, measure: Callable[[], float]) -> float:
        """``measure()`` the first time; the value kept in the work dir when this call resumes a killed run (whose
        model has already moved on, so measuring again would not give the "before" figure). Not for a measure that
        calls ``trainer.evaluate()`` of a trainer that will train under a launch: see :meth:`evaluate_at_start`."""
        kept = self.saved(key)
        return kept if kept is not None else self.keep(key, measure())

    def evaluate_at_start(self, trainer: Trainer, key: str, counting: Callable[[bool], None] | None = None) -> None:
        """Have ``trainer.train()`` measure the held-out loss as it starts, once the model is wrapped for training,
        and keep it as ``key`` (read it back with :meth:`saved`); a resumed run keeps the figure it had.

        Not ``trainer.evaluate()`` before ``train()``: under ``accelerate launch`` that marks the model prepared
        without a DistributedDataParallel wrapper, ``train()`` then leaves it unwrapped, and each rank steps on its
        own gradients (the ranks' weights drift apart; tests/training/test_launch.py caught it). ``counting(False)``
        / ``counting(True)`` bracket that evaluation (SFT's padding counter skips its batches)."""
        if self.saved(key) is not None:
            return
        trainer.args.eval_on_start = True
        trainer.add_callback(_KeepFirstEvaluation(self, key, counting))

    def train(self, trainer: Trainer, label: str) -> None:
        """``trainer.train()`` from the resume point; Forge logs progress itself (no PrinterCallback dicts)."""
        trainer.remove_callback(PrinterCallback)
        accelerator = trainer.accelerator
        # Which engine actually trains (FSDP, DeepSpeed, DDP or one process) as the Trainer set it up from the launch:
        # a profile that names fsdp on a machine without GPUs gets plain data parallelism (forge/training/launch.py).
        engine = accelerator.distributed_type.value
        logger.info("%s: %s, %d process(es), %s, mixed precision %s", label,
                    "single process" if engine == "NO" else engine, accelerator.num_processes, accelerator.device,
                    accelerator.mixed_precision)
        if self.resume:
            logger.info("%s: resuming from %s", label, self.resume)
        trainer.train(resume_from_checkpoint=self.resume)

    def finish(self, trainer: Trainer, tokenizer: PreTrainedTokenizerBase) -> Path:
        """Write the trained model atomically to ``out_dir`` and remove the work dir; returns ``out_dir``. Under a
        launch only rank 0 writes, once every rank has finished training and the ranks' weights are known to agree.

        Under FSDP or DeepSpeed ZeRO-3 each rank holds a shard of every weight: all ranks gather the full state dict
        (rank 0 receives it, on the CPU) and rank 0 writes an ordinary checkpoint from it. Without the gather the
        model's own tensors are shards whose storage FSDP has freed (on an H200, 2026-11-27: safetensors' "invalid
        python storage" at the final save)."""
        model, accelerator = _unwrapped(trainer.model), trainer.accelerator
        state_dict = None
        if accelerator.distributed_type == DistributedType.DEEPSPEED:
            state_dict = accelerator.get_state_dict(trainer.model_wrapped)  # collective: every rank takes part
        elif accelerator.distributed_type == DistributedType.FSDP:
            state_dict = accelerator.get_state_dict(trainer.model)
        else:
            assert_replicas_agree(model)  # replicated engines only: sharded ranks hold different parts by design
        if is_main_process():
            save_atomically(model, tokenizer, self.out_dir, state_dict=state_dict)
            shutil.rmtree(self.work_dir, ignore_errors=True)
        barrier()
        return self.out_dir

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


class _KeepFirstEvaluation(TrainerCallback):
    """The first evaluation of a ``train()`` (``eval_on_start``), kept by ``ResumableTraining.evaluate_at_start``."""

    def __init__(self, run: ResumableTraining, key: str, counting: Callable[[bool], None] | None) -> None:
        self.run, self.key, self.counting, self.done = run, key, counting, False

    def on_train_begin(self, args, state, control, **kwargs):
        if self.counting and not self.done:
            self.counting(False)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not self.done and metrics and "eval_loss" in metrics:
            self.done = True
            self.run.keep(self.key, metrics["eval_loss"])
            if self.counting:
                self.counting(True)


def _unwrapped(model: torch.nn.Module) -> PreTrainedModel:
    """The model itself, not a DistributedDataParallel wrapper around it."""
    return getattr(model, "module", model)


def save_atomically(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: Path, *,
                    state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write model + tokenizer to ``out_dir`` so that readers never see a half-written directory. ``state_dict``:
    the weights to write instead of the model's own (the full weights gathered from sharded ranks).

    ``os.replace`` cannot swap a non-empty directory, so an existing ``out_dir`` is first renamed aside; the
    window where ``out_dir`` is missing is two renames long, never a partial write.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state_dict)
    tokenizer.save_pretrained(tmp)
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


def common_trainer_args(work_dir: Path, runtime: TrainingRuntimeConfig, *, seed: int, save_steps: int) -> dict:
    """TrainingArguments shared by every Forge trainer: resumable checkpoints in ``work_dir`` (the last two
    kept), cosine schedule, runtime precision, no reporting (the flow layer logs to MLflow), no progress bars."""
    return {
        "output_dir": str(work_dir),
        "lr_scheduler_type": "cosine",
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 2,
        "report_to": "none",
        "bf16": runtime.bf16,
        "gradient_checkpointing": runtime.gradient_checkpointing,
        "seed": seed,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": torch.cuda.is_available(),
        # Without CUDA the Trainer must be told it is on CPUs, or under `accelerate launch` each rank would train
        # alone instead of joining the others over gloo (forge/training/launch.py).
        "use_cpu": not torch.cuda.is_available(),
        "disable_tqdm": True,
    }


def training_device() -> torch.device:
    """Where this process trains: its GPU when there is one (under ``accelerate launch`` the rank's
    ``LOCAL_RANK``-th, as transformers' Trainer chooses), else the CPU. Frozen models beside a trainer (reward
    models, the agentic reference policy) go there too, so a rollout is never scored on the CPU while the policy
    trains on the GPU, and eight ranks do not all score on GPU 0."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def apply_runtime(runtime: TrainingRuntimeConfig) -> None:
    """Process-wide runtime settings: CPU threads; freed memory kept for reuse (forge/hardware.py
    ``keep_freed_memory``); a sampled token's attention as two matrix products on a CPU
    (forge/attention.py); on CUDA in bf16, attention without cuDNN's fused kernel.

    On an H200 (torch 2.11.0+cu130, 2026-11-27) GRPO in bf16 went NaN at step 36 of 40: anomaly detection named
    ``ScaledDotProductCudnnAttentionBackward0`` as the op returning NaN gradients (the forward was finite), and with
    eager attention the same run trained all 40 steps. PyTorch picks cuDNN's attention for half precision on Hopper
    when it can; with it off, SDPA takes its flash or memory-efficient kernels (tests/training/test_gpu.py)."""
    if runtime.threads > 0:
        torch.set_num_threads(runtime.threads)
    keep_freed_memory()
    use_fast_decoding()
    if runtime.bf16 and torch.cuda.is_available():
        torch.backends.cuda.enable_cudnn_sdp(False)


class ForwardMetrics(TrainerCallback):
    """Forward every Trainer log record (train loss, lr, eval loss) to ``log_metrics(metrics, step)``.

    The flow layer passes a function that calls ``mlflow.log_metrics``; ``forge`` itself stays MLflow-free.
    """

    def __init__(self, log_metrics: MetricsLogger | None, prefix: str = "", label: str | None = None) -> None:
        self.log_metrics = log_metrics
        self.prefix = prefix  # of the metric keys
        self.label = prefix if label is None else label  # of the progress lines
        self.first: tuple[int, float] | None = None  # (step, time) of the first step of this process's training

    def on_step_end(self, args, state, control, **kwargs):
        if self.first is None:
            self.first = (state.global_step, time.monotonic())

    def eta(self, step: int, max_steps: int) -> str:
        """Time left at the pace since this process's first step (a resumed run does not count the steps it
        skipped), as ``m:ss``; ``?`` before two steps."""
        if self.first is None or step <= self.first[0]:
            return "?"
        left = (time.monotonic() - self.first[1]) / (step - self.first[0]) * (max_steps - step)
        return f"{int(left // 60)}:{int(left % 60):02d}"

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        numeric = {
            f"{self.prefix}{k}": float(v)
            for k, v in logs.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        # One progress line per logging step: loss (held-out at an evaluation), reward for RL, time left.
        shown = {"held-out loss": logs.get("eval_loss")} if "eval_loss" in logs else {
            "loss": logs.get("loss"), "reward": logs.get("reward")}
        shown = {k: v for k, v in shown.items() if isinstance(v, int | float)}
        if shown:
            figures = " ".join(f"{k} {v:.4f}" for k, v in shown.items())
            logger.info("%sstep %d/%d %s · ETA %s", self.label, state.global_step, state.max_steps, figures,
                        self.eta(state.global_step, state.max_steps))
        if self.log_metrics and numeric:
            self.log_metrics(numeric, state.global_step)


def loss_curve(log_history: list[dict]) -> list[tuple[int, float | None, float]]:
    """``(step, latest train loss, held-out loss)`` at every evaluation found in a Trainer's log history."""
    curve: list[tuple[int, float | None, float]] = []
    last_train: float | None = None
    for record in log_history:
        if "loss" in record:
            last_train = float(record["loss"])
        if "eval_loss" in record:
            curve.append((int(record["step"]), last_train, float(record["eval_loss"])))
    return curve
