"""Training stages under ``accelerate launch``: several processes (torch distributed) as a child of the Prefect task.

When the profile's ``runtime.num_processes`` is above 1 or it names ``runtime.accelerate_config`` (FSDP, DeepSpeed
ZeRO-3: ``infra/accelerate/``), :func:`run_training` does not call the training function in this process. It writes
the call (function, keyword arguments) to a job folder beside the stage's output, starts ``accelerate launch -m
forge.training.launch <job>``, and every rank runs the same function; the transformers ``Trainer`` inside finds the
process group (NCCL on GPUs, gloo on CPUs) and shards the batches (a loop without a Trainer, agentic RL's, joins it
with :func:`join_process_group` and shards its own work). Otherwise the function runs here, as before.

What the parent sees (docs/scale.md, "Launched stages"):

* **logs**: every rank's output is read line by line and logged by the task (rank 0 at INFO; other ranks only
  warnings and errors), so Prefect's run page shows one progress stream;
* **metrics**: rank 0 appends ``(metrics, step)`` records to ``metrics.jsonl``; the parent forwards them to its own
  ``log_metrics`` (the task's MLflow run) while the stage runs;
* **the result**: rank 0 pickles the function's return value; the parent returns it;
* **failure**: a rank that raises writes its traceback to ``error-rank<N>.txt`` and the launcher exits non-zero; the
  parent raises :class:`LaunchError` with that traceback (not the launcher's summary of it);
* **kill**: the launcher gets SIGTERM when the task's process dies, and each rank SIGKILL when the launcher dies
  (Linux's parent-death signal), so no rank trains on behind a killed task, whichever part was killed first;
* **resume**: nothing here: the function's own ``ResumableTraining`` finds the last complete checkpoint, so a killed
  launch is resumed by launching again. Only rank 0 writes the final model (``ResumableTraining.finish``).

    result = run_training(run_sft_stage, runtime, out, log_metrics=metrics_logger(), model_dir=..., ...)
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge.config import TrainingRuntimeConfig

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


class LaunchError(RuntimeError):
    """A launched training stage failed: the message holds the failing rank's traceback."""


def is_launched(runtime: TrainingRuntimeConfig) -> bool:
    """Whether stages of this profile run under ``accelerate launch`` rather than in the task's process."""
    return runtime.num_processes > 1 or runtime.accelerate_config is not None


def rank() -> int:
    """This process's global rank (0 outside a launch)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """Rank 0, or no launch at all: the process that writes results, checkpoints' final copies and metrics."""
    return rank() == 0


def world_size() -> int:
    """How many ranks the launch started (1 outside a launch)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def join_process_group() -> None:
    """Join the launch's process group (NCCL on GPUs, gloo on CPUs) for a stage that trains without transformers'
    Trainer, which otherwise does it (the agentic RL loop). Nothing outside a launch or when already joined."""
    import torch
    import torch.distributed as dist

    if world_size() == 1 or dist.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def broadcast_from_rank0(model) -> None:
    """Give every rank rank 0's weights (nothing outside a process group). Needed by a loop without a Trainer:
    under an FSDP accelerate config with ``fsdp_cpu_ram_efficient_loading`` (infra/accelerate/fsdp.yaml),
    transformers' ``from_pretrained`` on every rank but each node's first, once the process group is up, fills the
    weights with zeros and leaves FSDP to broadcast rank 0's; the agentic loop is not wrapped by FSDP and would
    train a zero model on those ranks (tests/flows/test_dist.py found it through :func:`assert_replicas_agree`)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    for tensor in [*model.parameters(), *model.buffers()]:
        if type(tensor.data).__name__ != "DTensor":  # FSDP's shards are FSDP's to synchronise
            dist.broadcast(tensor.data, src=0)


def gather_objects(items: list) -> list:
    """Every rank's ``items``, concatenated in rank order, on every rank (``items`` itself outside a process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return list(items)
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, list(items))
    return [x for part in every for x in part]


def sum_gradients(model) -> None:
    """Add up every parameter's gradient over the ranks (a parameter a rank did not reach counts as 0), so each
    rank steps on the whole batch's gradient. For a loop that divides its loss by the batch's global token count
    and may run a different number of micro-batches per rank, which DDP's hooks do not allow."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    for p in model.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)


def barrier() -> None:
    """Wait for every rank (nothing outside a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def sum_over_ranks(*values: float) -> list[float]:
    """Each value summed over all ranks (the values themselves outside a process group): per-rank counts such as the
    tokens a rank trained on become the stage's totals."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


class RanksDisagree(RuntimeError):
    """Data-parallel ranks finished training with different weights: their gradients were not being averaged."""


def assert_replicas_agree(model) -> None:
    """Under data parallelism every rank holds the same weights after a step; compare one checksum per rank and
    raise :class:`RanksDisagree` if they differ (nothing outside a process group). Sharded parameters (FSDP's
    DTensors) differ by design and are not compared."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    params = [p for p in model.parameters() if type(p.data).__name__ != "DTensor"]
    device = params[0].device if params else "cpu"
    local = sum((p.detach().double().sum() for p in params), torch.zeros((), dtype=torch.float64, device=device))
    local = local.reshape(1)
    every = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(every, local)
    sums = [float(t) for t in every]
    if max(sums) - min(sums) > 1e-6 * max(1.0, max(abs(x) for x in sums)):
        raise RanksDisagree(f"the ranks' weights differ after training (parameter sums {sums}): each rank stepped "
                            "on its own gradients, the model was not wrapped for data-parallel training")


def accelerate_config_path(name: str) -> Path:
    """``runtime.accelerate_config`` as a file: a path, or a name under ``infra/accelerate/`` (fsdp → fsdp.yaml)."""
    path = Path(name)
    if not path.suffix:
        path = REPO_ROOT / "infra" / "accelerate" / f"{name}.yaml"
    elif not path.is_absolute():
        path = REPO_ROOT / path
    if not path.exists():
        known = sorted(p.stem for p in (REPO_ROOT / "infra" / "accelerate").glob("*.yaml"))
        raise LaunchError(f"runtime.accelerate_config: {path} does not exist (shipped: {', '.join(known)})")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(runtime: TrainingRuntimeConfig, job_dir: Path) -> list[str]:
    """The ``accelerate launch`` command line for one job (every setting explicit, so accelerate warns of none)."""
    n = runtime.num_processes
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(n), "--num_machines", "1",
           "--main_process_port", str(free_port()), "--dynamo_backend", "no",
           "--mixed_precision", "bf16" if runtime.bf16 else "no"]
    if runtime.accelerate_config:
        cmd += ["--config_file", str(accelerate_config_path(runtime.accelerate_config))]
    elif n > 1:
        # torch elastic's launcher for N processes; without CUDA the Trainer (use_cpu) joins them over gloo.
        cmd += ["--multi_gpu"]
    if not _cuda():
        # Split the cores between the ranks instead of letting each take them all.
        cmd += ["--num_cpu_threads_per_process", str(max(1, (os.cpu_count() or 1) // n))]
    return [*cmd, "-m", "forge.training.launch", str(job_dir)]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def beside(out_dir: Path, kind: str) -> Path:
    """A stage's hidden folder for one kind of scratch next to its output, ``.<name>.<kind>``: a sibling, so a
    rename into ``out_dir`` never crosses filesystems and a glob of the stages' outputs never sees it."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.{kind}"


def job_dir_for(out_dir: Path) -> Path:
    return beside(out_dir, "launch")


def run_training(
    fn: Callable[..., Any],
    runtime: TrainingRuntimeConfig,
    out_dir: Path,
    *,
    log_metrics: Callable[[dict[str, float], int], None] | None = None,
    **kwargs: Any,
) -> Any:
    """``fn(**kwargs, runtime=runtime, out_dir=out_dir, log_metrics=...)`` here, or on every rank of an ``accelerate
    launch`` when :func:`is_launched`; returns rank 0's result either way. ``fn`` must be a module-level function and
    the arguments picklable (paths, configs, rows)."""
    if not is_launched(runtime):
        return fn(**kwargs, runtime=runtime, out_dir=out_dir, log_metrics=log_metrics)
    job = job_dir_for(out_dir)
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    with open(job / "job.pkl", "wb") as f:
        pickle.dump({"fn": f"{fn.__module__}:{fn.__qualname__}", "kwargs": {**kwargs, "runtime": runtime,
                                                                             "out_dir": Path(out_dir)}}, f)
    cmd = launch_command(runtime, job)
    if runtime.accelerate_config and not _cuda():
        # Measured: with infra/accelerate/fsdp.yaml on 2 CPU ranks the Trainer (use_cpu) builds a MULTI_CPU
        # accelerator and wraps the model in DDP; the sharding settings are not applied.
        logger.warning("%s: no GPU here, so the ranks run plain data parallelism over gloo; the sharding of %s "
                       "applies on GPUs only", fn.__name__, runtime.accelerate_config)
    logger.info("%s: launching %d process(es): %s", fn.__name__, runtime.num_processes, " ".join(cmd[1:]))
    forwarded = 0

    def forward_metrics() -> None:
        nonlocal forwarded
        path = job / "metrics.jsonl"
        if log_metrics is None or not path.exists():
            return
        lines = path.read_text().splitlines()
        for line in lines[forwarded:]:
            try:
                record = json.loads(line)
            except ValueError:
                break  # a line rank 0 is still writing: read it next time
            log_metrics(record["metrics"], record["step"])
            forwarded += 1

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    # The launcher dies with this process (SIGTERM makes torch elastic stop its workers), so a killed task leaves
    # no ranks training on behind it; the relaunch resumes from their last checkpoint. A small shim asks for the
    # signal and then execs the launcher (a preexec_fn is unsafe here: Prefect runs tasks in threads).
    shim = [sys.executable, "-m", "forge.training.launch", "--exec-with-parent-death-signal"]
    # The ranks start in the task's working directory: a relative path among the arguments (a profile's
    # base.local_path, a source file) means there what it meant here.
    proc = subprocess.Popen([*shim, *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=os.getcwd())
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            # The ranks' own log records (rank 0's progress, any rank's warnings) as the task's; the rest (library
            # prints, launcher chatter) only with --verbose. A failure's traceback comes from the error files.
            logger.log(logging.INFO if line.startswith("[rank ") else logging.DEBUG, "%s", line)
            tail = [*tail[-40:], line]
        forward_metrics()
    code = proc.wait()
    forward_metrics()
    if code != 0:
        errors = sorted(job.glob("error-rank*.txt"))
        detail = "\n".join(f"--- {p.stem} ---\n{p.read_text()}" for p in errors) or "\n".join(tail)
        raise LaunchError(f"{fn.__name__} failed under accelerate launch (exit {code}):\n{detail}")
    with open(job / "result.pkl", "rb") as f:
        result = pickle.load(f)
    shutil.rmtree(job, ignore_errors=True)
    return result


def _die_with_parent(sig: signal.Signals) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (PR_SET_PDEATHSIG; it survives exec). Where it
    cannot be asked (not Linux) nothing happens."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))
    except (OSError, AttributeError):
        pass


def _exec_with_parent_death_signal(cmd: list[str]) -> None:
    """Replace this process with ``cmd``, which receives SIGTERM when the task that started it dies."""
    _die_with_parent(signal.SIGTERM)
    os.execv(cmd[0], cmd)


def _rank_metrics_writer(job: Path) -> Callable[[dict[str, float], int], None] | None:
    """Rank 0's ``log_metrics``: a JSON line per record (the parent forwards them); other ranks log nothing."""
    if not is_main_process():
        return None

    def write(metrics: dict[str, float], step: int) -> None:
        with open(job / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"metrics": {k: float(v) for k, v in metrics.items()}, "step": int(step)}) + "\n")

    return write


def main(job_dir: str) -> None:
    """One rank of a launched job: run the pickled call; rank 0 writes the result, a failing rank its traceback."""
    job = Path(job_dir)
    # torch elastic starts each rank in a session of its own, so a kill of the task's process group (an OOM kill, a
    # cancelled flow run) would not reach it and it would train on, orphaned. A rank dies with its launcher instead.
    parent = os.getppid()
    _die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the launcher was already gone before the request took effect
        raise SystemExit(f"rank {rank()}: the launcher is gone")
    logging.basicConfig(level=logging.WARNING, format=f"[rank {rank()}] %(message)s", stream=sys.stdout, force=True)
    logging.getLogger("forge").setLevel(logging.INFO if is_main_process() else logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # as `forge run` does (forge/cli.py): Forge's progress lines, not the libraries'
    hf_logging.disable_progress_bar()
    with open(job / "job.pkl", "rb") as f:
        spec = pickle.load(f)
    module, _, name = spec["fn"].partition(":")
    fn = getattr(importlib.import_module(module), name)
    try:
        result = fn(**spec["kwargs"], log_metrics=_rank_metrics_writer(job))
    except BaseException:
        (job / f"error-rank{rank()}.txt").write_text(traceback.format_exc())
        raise
    if is_main_process():
        tmp = job / "result.pkl.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(result, f)
        os.replace(tmp, job / "result.pkl")


if __name__ == "__main__":
    if sys.argv[1] == "--exec-with-parent-death-signal":
        _exec_with_parent_death_signal(sys.argv[2:])
    main(sys.argv[1])
