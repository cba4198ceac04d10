"""Fixtures for the data-layer tests: pools built once per session from the real corpora into a scratch
checkout, and a real byte-level BPE tokenizer trained on that pool text (no fake token counters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from forge.config import PoolsConfig
from forge.data.jsonl import read_jsonl
from forge.data.pools import build_pools, chat_text
from forge.data.schemas import ChatSample
from forge.workspace import REPO_ROOT, Workspace

POOL_CAP = 300


@pytest.fixture(scope="session")
def pool_workspace(tmp_path_factory) -> Workspace:
    root = tmp_path_factory.mktemp("checkout")
    (root / "corpora").symlink_to(REPO_ROOT / "corpora")
    return Workspace(root=root, home=tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def pool_paths(pool_workspace) -> dict[str, Path]:
    return build_pools(pool_workspace, PoolsConfig(max_rows_per_source=POOL_CAP, seed=0))


@pytest.fixture(scope="session")
def chat_pools(pool_paths) -> dict[str, list[ChatSample]]:
    domains = ("code", "deep_search", "stem", "tool_use", "general")
    return {d: read_jsonl(pool_paths[d], ChatSample, max_bad_ratio=0.0).rows for d in domains}


@pytest.fixture(scope="session")
def bpe_count_tokens(chat_pools):
    """Token counter backed by a byte-level BPE trained here on the pools' own text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [chat_text(r) for rows in chat_pools.values() for r in rows[:150]]
    tok.train_from_iterator(texts, trainer=trainer)

    def count(sample: ChatSample) -> int:
        return len(tok.encode(chat_text(sample)).ids) + 4 * len(sample.messages)  # + role/turn markers

    return count


# Questions with a draft answer, the critique a critic gives it, and the revision a reviser writes from that critique
# (None: the critique passes the answer, so there is no revision; "": the reviser ends its turn at once).
TAUGHT = [
    ("What is 6 times 7?", "It is 41.", "Six times seven is 42.\nVERDICT: REVISE", "It is 42."),
    ("Name a prime above 10.", "12", "12 is even.\nVERDICT: REVISE", "13"),
    ("What colour is a clear sky?", "Blue.", "Right.\nVERDICT: OK", None),
    ("How many legs has a spider?", "Eight.", "Correct.\nVERDICT: OK", None),
    ("Spell cat backwards.", "tac.", "Drop the full stop.\nVERDICT: REVISE", ""),
]


def taught_rows() -> list[ChatSample]:
    from forge.data.schemas import Message

    return [ChatSample.build(domain="general", source="test/taught", messages=[
        Message(role="user", content=q), Message(role="assistant", content=a, reasoning="An old thought.")])
        for q, a, _, _ in TAUGHT]


@pytest.fixture(scope="session")
def taught_model(tokenizer):
    """A real tiny Llama trained (greedy decoding, a few seconds) to write :data:`TAUGHT`'s critiques for the
    critique prompts of its drafts, and its revisions for the revision prompts: a critic and reviser whose every
    answer is known, through the same prompts and chat template the refinement code uses."""
    import torch

    from forge.chat import IM_END
    from forge.config import BaseModelConfig
    from forge.data.refinement import critique_body, critique_prompt, revision_prompt
    from forge.training.base_model import build_model

    examples = []
    for q, draft, critique, revision in TAUGHT:
        history = [{"role": "user", "content": q}]
        examples.append((critique_prompt(history, draft), critique))
        if revision is not None:
            examples.append((revision_prompt(history, draft, critique_body(critique)), revision))
    ids, labels = [], []
    for prompt, target in examples:
        head = tokenizer(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False),
                         add_special_tokens=False)["input_ids"]
        tail = tokenizer(target + IM_END, add_special_tokens=False)["input_ids"]
        ids.append(head + tail)
        labels.append([-100] * len(head) + tail)
    width = max(map(len, ids))
    input_ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in ids])
    label_ids = torch.tensor([x + [-100] * (width - len(x)) for x in labels])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
    model = build_model(BaseModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2,
                                        intermediate_size=128, seed=0), tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(400):
        loss = model(input_ids=input_ids, attention_mask=mask, labels=label_ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    return model.eval()
