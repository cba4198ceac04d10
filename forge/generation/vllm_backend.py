"""vLLM generation backend for the GPU profile (rollouts, synthesis and evals at scale).

``vllm`` is imported inside the class, never at module import, so the CPU install (and CI) never needs it;
:func:`forge.generation.get_backend` refuses with an install hint before that when it is missing.

    backend = VLLMBackend("Nanbeige/Nanbeige4.1-3B", tensor_parallel_size=1, max_model_len=32768)
"""

from __future__ import annotations

from pathlib import Path

from forge.chat import IM_END
from forge.generation.base import ChatTemplateBackend

INSTALL_HINT = "the 'vllm' backend needs vLLM: install the GPU extra (pip install -e '.[gpu]') on a CUDA machine"


class VLLMBackend(ChatTemplateBackend):
    """Generation with a vLLM engine (``LLM`` + ``SamplingParams``).

    Args:
        model: hub id or local directory.
        tensor_parallel_size, gpu_memory_utilization, max_model_len, dtype: passed to ``vllm.LLM``
            (``VLLMConfig`` carries the profile's values).
    """

    def __init__(
        self,
        model: str | Path,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "bfloat16",
        seed: int = 0,
    ) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        self._sampling_params = SamplingParams
        self.llm = LLM(
            model=str(model),
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            seed=seed,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def _params(self, max_new_tokens: int, temperature: float, top_p: float, seed: int):
        stop_ids = [
            i
            for i in (self.tokenizer.convert_tokens_to_ids(IM_END), self.tokenizer.eos_token_id)
            if isinstance(i, int) and i >= 0
        ]
        return self._sampling_params(
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p if temperature > 0 else 1.0,
            seed=seed,
            stop_token_ids=stop_ids,
            # Keep <think>/<tool_call> markers: they are ordinary added tokens, not special ones.
            skip_special_tokens=True,
        )

    def generate_text(
        self,
        raw_prompts: list[str],
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[str]:
        """See :meth:`forge.generation.base.GenerationBackend.generate_text`."""
        params = self._params(max_new_tokens, temperature, top_p, seed)
        outputs = self.llm.generate(raw_prompts, params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]

    def close(self) -> None:
        """Shut the engine down and give its GPU memory back (weights and the KV cache it reserved:
        ``gpu_memory_utilization`` of the card), so the next engine or the trainer finds the memory free. vLLM's own
        ``cleanup_dist_env_and_memory`` tears down its model-parallel groups, collects and empties the CUDA cache;
        generation runs in a Prefect task's process, never inside a launched rank's process group."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):  # V1 engine: the engine core runs in its own process
            core.shutdown()
        del llm, core
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
