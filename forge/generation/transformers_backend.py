"""Default generation backend: HF transformers ``generate`` on CPU or one GPU.

Batched with left padding (every row's last prompt token sits at the same position, so new tokens are
appended in step), KV cache on, stops at ``<|im_end|>`` (end of turn) or ``<|endoftext|>``; greedy when
``temperature == 0``.

    backend = TransformersBackend(".forge/models/sft/ctx-1024")
    backend.generate([[{"role": "user", "content": "Hi"}]], max_new_tokens=32)
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from forge.attention import use_fast_decoding
from forge.chat import ENDOFTEXT, IM_END
from forge.generation.base import ChatTemplateBackend


class TransformersBackend(ChatTemplateBackend):
    """Generation with a local model.

    Args:
        model: a directory (loaded with ``AutoModelForCausalLM``) or an already loaded model.
        tokenizer: required when ``model`` is an object; loaded from the directory otherwise.
        batch_size: prompts per ``generate`` call.
        device: torch device; default CUDA when available, else CPU.
    """

    def __init__(
        self,
        model: str | Path | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        batch_size: int = 16,
        device: str | None = None,
    ) -> None:
        if isinstance(model, str | Path):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("TransformersBackend needs a tokenizer when given a model object")
        use_fast_decoding()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        vocab = tokenizer.get_vocab()
        self.stop_ids = [vocab[t] for t in (IM_END, ENDOFTEXT) if t in vocab] or [tokenizer.eos_token_id]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]

    @torch.inference_mode()
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
        if self.model is None:
            raise RuntimeError("this backend was closed (its model released); build another to generate")
        torch.manual_seed(seed)
        sampling = temperature > 0
        outputs: list[str] = []
        for start in range(0, len(raw_prompts), self.batch_size):
            chunk = raw_prompts[start : start + self.batch_size]
            encoded = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in chunk]
            width = max(len(ids) for ids in encoded)
            # Left padding: (batch, width) with pads first, so position -1 is every row's last prompt token.
            input_ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, ids in enumerate(encoded):
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention_mask[row, width - len(ids) :] = 1
            kwargs: dict[str, Any] = {"do_sample": sampling}
            if sampling:
                kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
            else:
                # The model's generation_config may carry sampling defaults; greedy must not inherit them.
                kwargs.update(temperature=None, top_p=None, top_k=None)
            generated = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                max_new_tokens=max_new_tokens,
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id,
                use_cache=True,
                **kwargs,
            )
            new_tokens = generated[:, width:]  # (batch, <= max_new_tokens)
            outputs.extend(self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
        return outputs

    def close(self) -> None:
        """Drop the model (its memory goes back once nothing else holds it; a GPU's cache is emptied too)."""
        if self.model is None:
            return
        on_gpu = self.device.type == "cuda"
        self.model = None
        gc.collect()
        if on_gpu:
            torch.cuda.empty_cache()
