"""The vLLM server a GRPO stage rolls out on in TRL's server mode (``generation.vllm.trl_mode: server``).

In colocate mode each training rank carries its own vLLM engine; in server mode rollouts run on GPUs of their own
(``generation.vllm.server_gpus``) in one ``trl vllm-serve`` process, and the trainer pushes its weights to it over
NCCL after every optimiser step (TRL's ``VLLMClient``). The stage owns that process: :func:`rollout_server` starts it
on the starting checkpoint before training, waits until it answers ``/health``, hands TRL its URL and stops it
(the whole process group: vLLM's workers too) when training ends, fails or is killed. A server that exits or never
becomes healthy fails the stage with the command and the end of its log (``vllm-server.log`` beside the stage's
output), not with TRL's "can't be reached" four minutes later.

    with rollout_server(settings, generation, policy_dir, log_dir) as url:   # None unless server mode
        run_grpo(..., vllm_server_url=url)
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forge.config import GenerationConfig, GRPOSettings, VLLMConfig

logger = logging.getLogger(__name__)

LOG_NAME = "vllm-server.log"
LOG_TAIL_LINES = 30
STOP_GRACE_S = 30.0


class VLLMServerError(RuntimeError):
    """The stage's vLLM server did not start (it exited, or did not answer in time)."""


def uses_server(settings: GRPOSettings, generation: GenerationConfig | None) -> bool:
    """Whether a GRPO stage with these settings rolls out on a server of its own."""
    return settings.use_vllm and generation is not None and generation.vllm.trl_mode == "server"


def serve_command(model_dir: Path | str, v: VLLMConfig) -> list[str]:
    """``trl vllm-serve`` for ``model_dir`` with every ``generation.vllm`` setting (TRL adds the weight-transfer
    and logprob flags its client needs, then runs ``vllm serve``)."""
    return [sys.executable, "-m", "trl.scripts.vllm_serve", "--model", str(model_dir),
            "--tensor_parallel_size", str(v.tensor_parallel_size),
            "--gpu_memory_utilization", str(v.gpu_memory_utilization),
            "--max_model_len", str(v.max_model_len), "--dtype", v.dtype,
            "--host", v.server_host, "--port", str(v.server_port)]


def _log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(the log is empty)"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (vLLM's engine and workers are its children), SIGKILL after a grace."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


@contextmanager
def rollout_server(settings: GRPOSettings, generation: GenerationConfig | None, model_dir: Path | str,
                   log_dir: Path, *, poll_s: float = 2.0) -> Iterator[str | None]:
    """Yield the URL of a ``trl vllm-serve`` serving ``model_dir`` on ``generation.vllm.server_gpus``, started here
    and stopped on leaving; yield None (and start nothing) unless the stage uses server mode."""
    if not uses_server(settings, generation):
        yield None
        return
    assert generation is not None
    v = generation.vllm
    cmd = serve_command(model_dir, v)
    gpus = ",".join(map(str, v.server_gpus))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / LOG_NAME
    url = f"http://{v.server_host}:{v.server_port}"
    if _healthy(url):
        raise VLLMServerError(f"something already answers at {url}: a server left by another run, or another "
                              "service on generation.vllm.server_port; stop it or choose another port")
    logger.info("vLLM server on GPU(s) %s for %s: %s (log %s)", gpus, model_dir, " ".join(cmd[1:]), log_path)
    started = time.monotonic()
    with open(log_path, "w") as log:
        # Its own session, so stopping it reaches vLLM's worker processes too.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": gpus})
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                raise VLLMServerError(f"the vLLM server exited with status {proc.returncode} before answering "
                                      f"(GPU(s) {gpus}): {' '.join(cmd)}\n--- {log_path} ---\n{_log_tail(log_path)}")
            if time.monotonic() - started > v.server_start_timeout_s:
                raise VLLMServerError(f"the vLLM server did not answer {url}/health within "
                                      f"{v.server_start_timeout_s:.0f} s (generation.vllm.server_start_timeout_s): "
                                      f"{' '.join(cmd)}\n--- {log_path} ---\n{_log_tail(log_path)}")
            time.sleep(poll_s)
        logger.info("vLLM server up at %s after %.0f s", url, time.monotonic() - started)
        yield url
    finally:
        _stop(proc)
