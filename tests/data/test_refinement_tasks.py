"""§2.1.1 SFT data construction as the data flow runs it: the cached Solution Refinement and CoT Reconstruction
tasks (``.fn``; the second writes the refined mix) on a draft mix, with the base model (a real tiny model taught its critiques,
tests/data/conftest.py) as critic, reviser and CoT writer; the mix written for SFT holds the refined rows in the
places of theirs, and its manifest counts what each step changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge.chat import count_chat_tokens
from forge.config import GenerationConfig, MixConfig, RefinementConfig
from forge.data.jsonl import read_jsonl, write_jsonl
from forge.data.mix import (
    REFINEMENT_PAIRS,
    DomainStats,
    Manifest,
    MixError,
    read_manifest,
    read_mix,
    read_refinement_pairs,
    write_refined_mix,
)
from forge.data.refinement import COT_MARK, REFINED_MARK
from forge.data.schemas import ChatSample, Message
from forge.stages import Base, Mix, Tokenizer
from forge.training.checkpoints import save_atomically
from tasks.refinement import cot_reconstruction_task, solution_refinement_task
from tests.data.conftest import taught_rows

SHARDS = ["train-0000-of-0002.jsonl", "train-0001-of-0002.jsonl"]


def _row(domain: str, question: str, answer: str) -> ChatSample:
    return ChatSample.build(domain=domain, source=f"test/{domain}", messages=[
        Message(role="user", content=question), Message(role="assistant", content=answer)])


def _draft_mix(out: Path, train: list[ChatSample], heldout: list[ChatSample], count) -> Mix:
    """A draft mix as ``build_mix`` lays it out (shards, held-out rows, manifest), with rows chosen here."""
    tokens = {d: sum(count(r) for r in train if r.domain == d) for d in ("general", "stem")}
    total = sum(tokens.values())
    domains = {d: DomainStats(rows=sum(r.domain == d for r in train), tokens=n, target_tokens=n,
                              target_share=n / total, actual_share=n / total, heldout_rows=1, pool_rows=0)
               for d, n in tokens.items()}
    manifest = Manifest(name="sft-test", total_tokens=total, target_total_tokens=total, domains=domains,
                        shards=SHARDS, heldout_file="heldout.jsonl", sources={}, config={})
    out.mkdir(parents=True)
    for i, name in enumerate(SHARDS):
        write_jsonl(out / name, train[i::2])
    write_jsonl(out / "heldout.jsonl", heldout)
    (out / "manifest.json").write_text(manifest.model_dump_json())
    return Mix(mix_dir=str(out), manifest=manifest.model_dump(mode="json"))


@pytest.fixture(scope="module")
def draft(tmp_path_factory, tokenizer, wiki_docs):
    """Five taught rows and three untaught ones in general (the refined domain), one stem row (not refined)."""
    others = [_row("general", f"Who or what is {d['title']}?", d["text"][:120]) for d in wiki_docs[:3]]
    stem = _row("stem", "What is 2 + 2?", "4")
    train = [*taught_rows(), *others, stem]
    heldout = [_row("general", "Held out?", "Yes."), _row("stem", "3 + 3?", "6")]
    out = tmp_path_factory.mktemp("home") / "mix-drafts" / "sft-test"
    return _draft_mix(out, train, heldout, lambda r: count_chat_tokens(tokenizer, r))


def test_refined_rows_replace_theirs_in_the_mix_written_for_sft(draft, taught_model, tokenizer, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("FORGE_ROOT", str(tmp_path))  # the refined mix goes to <root>/data/mixes/, versioned there
    model_dir = save_atomically(taught_model, tokenizer, tmp_path / "base")
    base = Base(model_dir=str(model_dir), tokenizer_dir=str(model_dir), model_name="forge-base", version="1")
    cfg = RefinementConfig(items=100, domains=["general"], max_new_tokens=48, max_prompt_length=256)
    generation = GenerationConfig()  # no teacher endpoint: the base model generates

    refined = solution_refinement_task.fn(cfg=cfg, iterations=1, generation=generation, seed=0, base=base, mix=draft)
    mix = cot_reconstruction_task.fn(cfg=cfg, generation=generation, seed=0, base=base, refined=refined,
                                     mix_cfg=MixConfig(name="sft-test"), draft=draft,
                                     tokenizer=Tokenizer(tokenizer_dir=str(model_dir)))

    out = Path(mix.mix_dir)
    assert out == tmp_path / "data" / "mixes" / "sft-test"
    before, held_before = read_mix(draft.mix_dir)
    after, held_after = read_mix(out)
    assert len(after) == len(before) and held_after == held_before
    for name in SHARDS:  # every row stays in its shard, at its place
        assert len(read_jsonl(out / name, ChatSample).rows) == len(read_jsonl(Path(draft.mix_dir) / name,
                                                                              ChatSample).rows)
    replaced = {r.parents[0]: r for r in after if r.parents}
    assert not replaced.keys() & {r.id for r in after}  # the originals are gone
    for old, new in zip(before, after, strict=True):
        assert new.id == old.id or replaced[old.id] is new
    # The two flagged and revised answers replaced theirs, marked and with the drafts' history.
    taught = taught_rows()
    for source, answer in ((taught[0], "It is 42."), (taught[1], "13")):
        row = replaced[source.id]
        assert row.messages[-1].content == answer and row.messages[:-1] == source.messages[:-1]
        assert row.source.startswith(f"test/taught{REFINED_MARK}")
    # Passed answers (and the one whose revision came back empty) are kept; at most their reasoning was rebuilt.
    for source in (taught[2], taught[3], taught[4]):
        row = replaced.get(source.id, source)
        assert row.messages[-1].content == source.messages[-1].content and REFINED_MARK not in row.source
    stem = next(r for r in before if r.domain == "stem")
    assert stem in after  # not a refined domain

    traces = [json.loads(line) for line in Path(refined.traces_path).read_text().splitlines()]
    assert [t["flagged"] for t in traces if t["source"]["source"] == "test/taught"].count(True) == 3
    manifest = read_manifest(out)
    assert manifest.refinement == {
        "items": 8,  # every general train row
        "flagged": sum(t["flagged"] for t in traces),
        "answers_changed": sum(REFINED_MARK in r.source for r in after),
        "cot_rebuilt": sum(r.source.endswith(COT_MARK) for r in after),
        "rows_refined": len(replaced),
        "pairs": sum(REFINED_MARK in r.source for r in after),
        "pairs_file": REFINEMENT_PAIRS,
    }
    assert manifest.refinement["answers_changed"] >= 2 and mix.manifest == manifest.model_dump(mode="json")
    for domain, stats in manifest.domains.items():  # token counts of the rows written
        assert stats.tokens == sum(count_chat_tokens(tokenizer, r) for r in after if r.domain == domain)
    assert sum(s.actual_share for s in manifest.domains.values()) == pytest.approx(1.0)
    pairs = read_refinement_pairs(out)
    assert len(pairs) == manifest.refinement["pairs"]
    assert ("It is 42.", "It is 41.") in {(p.chosen, p.rejected) for p in pairs}


def test_a_refined_row_must_replace_a_train_row(draft, tmp_path):
    stray = ChatSample.build(domain="general", source="test", parents=["cs-not-in-the-mix"], messages=[
        Message(role="user", content="Never in the mix?"), Message(role="assistant", content="No.")])
    with pytest.raises(MixError, match="not a train row"):
        write_refined_mix(Path(draft.mix_dir), tmp_path / "out", [stray], [], lambda row: 0, {})
    assert not (tmp_path / "out").exists()
