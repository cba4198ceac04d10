"""Generation backends behind one interface, chosen by name and imported only when chosen.

    from forge.generation import get_backend
    backend = get_backend("transformers", model=".forge/models/sft/ctx-1024")
    backend = endpoint_backend("http://127.0.0.1:8000/v1", "teacher")     # answers kept under the home
    backend = get_backend("vllm", model="Nanbeige/Nanbeige4.1-3B")    # GPU extra only

The registry maps names to dotted paths (as verl's rollout registry does), so importing this package never
imports vLLM or an HTTP client; a backend whose packages are missing is refused with an install hint.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from forge.config import GenerationConfig
from forge.generation.base import GenerationBackend

BACKENDS: dict[str, str] = {
    "transformers": "forge.generation.transformers_backend:TransformersBackend",
    "vllm": "forge.generation.vllm_backend:VLLMBackend",
    "openai": "forge.generation.openai_backend:OpenAIBackend",
}
# Third-party packages each backend needs, checked before the backend is constructed.
REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "transformers": ("torch", "transformers"),
    "vllm": ("vllm",),
    "openai": ("openai",),
}
INSTALL_HINTS: dict[str, str] = {
    "vllm": "install the GPU extra on a CUDA machine: pip install -e '.[gpu]'",
}


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Construct the backend registered as ``name`` with ``kwargs``.

    Raises:
        ValueError: unknown name.
        ImportError: a package the backend needs is not installed (the message says how to install it).
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown generation backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    missing = [pkg for pkg in REQUIREMENTS[name] if importlib.util.find_spec(pkg) is None]
    if missing:
        hint = INSTALL_HINTS.get(name, f"pip install {' '.join(missing)}")
        raise ImportError(f"generation backend {name!r} needs {', '.join(missing)}, which is not installed: {hint}")
    module_path, class_name = BACKENDS[name].split(":")
    cls = getattr(importlib.import_module(module_path), class_name)
    return cls(**kwargs)


def backend_choice(generation: GenerationConfig, use: str = "local") -> tuple[str, str]:
    """The backend :func:`local_backend` (``use='local'``) or :func:`teacher_or_local` (``'teacher'``) builds under
    these settings, and its settings in words (what ``forge plan`` shows)."""
    if use == "teacher" and generation.openai_base_url:
        return "openai", f"{generation.openai_model} at {generation.openai_base_url}"
    if generation.backend == "vllm":
        v = generation.vllm
        return "vllm", f"tp {v.tensor_parallel_size}, {v.gpu_memory_utilization:.0%} memory, {v.max_model_len:,} tok"
    return "transformers", ""


def local_backend(generation: GenerationConfig, model_dir: str, batch_size: int | None = None) -> GenerationBackend:
    """A local checkpoint's backend under the profile's ``generation`` settings: vLLM, sized by every
    ``generation.vllm`` setting, when the profile generates with vLLM; else transformers, ``batch_size`` prompts at a
    time where given, else ``generation.batch_size`` (vLLM schedules its own batches; an HTTP endpoint serves its
    own model, not this checkpoint)."""
    if backend_choice(generation)[0] == "vllm":
        v = generation.vllm
        return get_backend("vllm", model=model_dir, tensor_parallel_size=v.tensor_parallel_size,
                           gpu_memory_utilization=v.gpu_memory_utilization, max_model_len=v.max_model_len,
                           dtype=v.dtype)
    return get_backend("transformers", model=model_dir, batch_size=batch_size or generation.batch_size)


def endpoint_backend(base_url: str, model: str) -> GenerationBackend:
    """An OpenAI-compatible endpoint serving ``model`` (teacher, judge), with retries and backoff, its answers kept
    under the home (``endpoint-cache/``) so a stage re-run after the endpoint failed asks only what was not answered.
    Delete that folder when the endpoint starts serving other weights under the same name."""
    from forge.workspace import Workspace

    return get_backend("openai", base_url=base_url, model=model, cache_dir=Workspace.from_env().home / "endpoint-cache")


def teacher_or_local(generation: GenerationConfig, model_dir: str) -> GenerationBackend:
    """The teacher endpoint when the profile names one (``generation.openai_base_url``), else the checkpoint in
    ``model_dir`` through :func:`local_backend`: the strong side of §2.1.3's pairs and §2.1.1's refinement."""
    if generation.openai_base_url:
        return endpoint_backend(generation.openai_base_url, generation.openai_model)
    return local_backend(generation, model_dir)


__all__ = ["BACKENDS", "GenerationBackend", "backend_choice", "endpoint_backend", "get_backend", "local_backend",
           "teacher_or_local"]
