"""The vLLM server a GRPO stage starts in TRL's server mode (forge/training/vllm_server.py), on a machine without
vLLM: the real ``trl vllm-serve`` command runs and exits, and the stage fails at once with its log, not when TRL gives
up on the URL minutes later. That the server serves and is stopped is tests/training/test_gpu.py's (``-m gpu``)."""

from __future__ import annotations

import importlib.util
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from forge.config import ConfigError, GenerationConfig, GRPOSettings, VLLMConfig, load_profile
from forge.training.grpo import build_grpo_config
from forge.training.launch import free_port
from forge.training.vllm_server import LOG_NAME, VLLMServerError, rollout_server, serve_command

SETTINGS = GRPOSettings(num_generations=2, max_completion_length=8, max_steps=1, per_device_batch_size=2,
                        use_vllm=True)


def _server_mode(port: int) -> GenerationConfig:
    return GenerationConfig(vllm=VLLMConfig(trl_mode="server", server_gpus=[1], server_port=port,
                                            max_model_len=2048, gpu_memory_utilization=0.4))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: the server would start")
def test_a_server_that_cannot_start_fails_the_stage_with_its_command_and_log(tmp_path):
    generation = _server_mode(free_port())
    with pytest.raises(VLLMServerError) as err, rollout_server(SETTINGS, generation, "/models/policy", tmp_path):
        pytest.fail("the body must not run without a server")
    message = str(err.value)
    assert "exited with status" in message and "GPU(s) 1" in message
    assert "--model /models/policy" in message and "--max_model_len 2048" in message  # the profile's settings
    assert "No module named 'vllm'" in message  # the end of the server's own log
    assert (tmp_path / LOG_NAME).exists()


def test_a_port_already_answering_is_refused_before_anything_starts(tmp_path):
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        generation = _server_mode(other.server_address[1])
        with pytest.raises(VLLMServerError, match="already answers"), \
                rollout_server(SETTINGS, generation, "/models/policy", tmp_path):
            pytest.fail("the body must not run against someone else's server")
    finally:
        other.shutdown()
    assert not (tmp_path / LOG_NAME).exists()  # nothing was started


def test_colocate_mode_and_no_vllm_start_no_server(tmp_path):
    for settings, generation in [(SETTINGS, GenerationConfig()),
                                 (SETTINGS.model_copy(update={"use_vllm": False}), _server_mode(8000))]:
        with rollout_server(settings, generation, "/models/policy", tmp_path) as url:
            assert url is None
    assert not (tmp_path / LOG_NAME).exists()


def test_server_mode_reaches_trl_and_needs_its_gpus(tmp_path):
    generation = _server_mode(8123)
    cmd = serve_command("/m", generation.vllm)
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--gpu_memory_utilization") + 1] == "0.4"
    args = build_grpo_config(SETTINGS, load_profile("tiny").runtime, tmp_path, generation,
                             vllm_server_url="http://127.0.0.1:8123")
    assert args.vllm_mode == "server" and args.vllm_server_base_url == "http://127.0.0.1:8123"
    with pytest.raises(ValueError, match="train_grpo"):  # server mode without the stage's server
        build_grpo_config(SETTINGS, load_profile("tiny").runtime, tmp_path, generation)
    with pytest.raises(ConfigError, match=r"generation\.vllm.*server_gpus"):
        load_profile("nanbeige-4.1-3b", {"generation.vllm.trl_mode": "server"})
