"""Reviewers' verdicts flow back into the training data: a turn a reviewer rejects gets loss mask 0 in the next
mix's SFT sample, a trajectory a reviewer rejects leaves the pool, and the mix's manifest counts what changed.
The merged pools are the corpus pool rows plus the synthesized samples."""

from __future__ import annotations

import pytest

from forge.chat import count_chat_tokens
from forge.config import DeepSearchConfig, DomainShares, MixConfig
from forge.data.jsonl import read_jsonl, write_jsonl
from forge.data.mix import build_mix
from forge.data.schemas import ChatSample, Message
from forge.review import open_store, record_trajectory_verdict, record_verdict, session_scope
from forge.review.feedback import apply_reviews
from forge.review.models import TurnRecord
from forge.search.synthesize import merge_shards, run_agents
from forge.training.tokenizer import encode_chat
from forge.workspace import Workspace


@pytest.fixture
def shard(qas, tools, tmp_path, workspace, monkeypatch):
    monkeypatch.delenv("FORGE_REVIEW_DB_URL", raising=False)
    root = tmp_path / "root"
    root.mkdir()
    (root / "corpora").symlink_to(workspace.corpora)
    ws = Workspace(root=root, home=root / ".forge")
    picked = [q for q in qas if len(q.gold_relations) == 2][:16]
    trajs = run_agents(picked, tools, ["planner"])
    base = tmp_path / "shard-0000"
    write_jsonl(base.with_suffix(".qa.jsonl"), picked)
    write_jsonl(base.with_suffix(".traj.jsonl"), trajs)
    return ws, [{"qa_path": str(base.with_suffix(".qa.jsonl")), "traj_path": str(base.with_suffix(".traj.jsonl"))}]


def _merge(ws, cfg, shards, pools=None):
    """The merge as tasks/search.py runs it: the review step is the store's feedback (forge.review.feedback)."""
    return merge_shards(ws, cfg, shards, pools, review=lambda trajs, qas: apply_reviews(trajs, qas, home=ws.home))


def _pool(merged) -> dict[str, ChatSample]:
    rows = read_jsonl(merged["pools"]["deep_search"], ChatSample).rows
    return {r.parents[1]: r for r in rows}  # parents = [qa id, trajectory id]


def _mix(tokenizer, merged, out, review) -> list[ChatSample]:
    """The next mix, built from the whole pool: its training rows and its held-out row."""
    pool = {"deep_search": merged["pools"]["deep_search"]}

    def build(total: int):
        cfg = MixConfig(name="fb", shares=DomainShares(code=0, deep_search=1.0, stem=0, tool_use=0, general=0),
                        total_tokens=total, num_shards=1)
        return build_mix(pool, cfg, lambda s: count_chat_tokens(tokenizer, s), out, heldout_rows=0, review=review)

    heldout = read_jsonl(out / build(1000).heldout_file, ChatSample).rows  # which row is held out depends on ids only
    rest = [r for r in read_jsonl(pool["deep_search"], ChatSample).rows if r.id not in {h.id for h in heldout}]
    manifest = build(sum(count_chat_tokens(tokenizer, r) for r in rest))  # every other row trains
    assert manifest.review == review
    return read_jsonl(out / manifest.shards[0], ChatSample).rows + heldout


def test_rejected_turn_is_masked_and_rejected_trajectory_leaves(shard, tokenizer, tmp_path):
    ws, shards = shard
    cfg = DeepSearchConfig()
    first = _merge(ws, cfg, shards)
    assert first["stats"]["review"] | {"digest": ""} == {"turns_masked": 0, "turns_unmasked": 0,
                                                        "trajectories_rejected": 0, "items_changed": 0, "digest": ""}
    before = _pool(first)
    turn_traj, gone_traj = sorted(before)[:2]
    sample = before[turn_traj]
    trained = [i for i, m in enumerate(sample.messages) if m.role == "assistant" and m.loss]
    assert len(trained) >= 2
    target = trained[0]  # a turn the critic passed

    engine = open_store(home=ws.home)
    with session_scope(engine) as s:
        turn = s.query(TurnRecord).filter_by(trajectory_id=turn_traj, message_index=target).one()
        record_verdict(s, turn.id, "rita", passed=False, note="the search query leaks the answer",
                       dimensions={"logical": False})
        record_trajectory_verdict(s, gone_traj, "rita", accepted=False, note="answer right by luck")
    engine.dispose()

    second = _merge(ws, cfg, shards)
    review = second["stats"]["review"]
    assert (review["turns_masked"], review["trajectories_rejected"], review["items_changed"]) == (1, 1, 2)
    after = _pool(second)
    assert gone_traj not in after and len(after) == len(before) - 1
    assert after[turn_traj].messages[target].loss is False

    mixed = {r.parents[1]: r for r in _mix(tokenizer, second, tmp_path / "mix", review)}
    assert gone_traj not in mixed
    row = mixed[turn_traj]
    assert row.messages[target].loss is False
    masked = sum(encode_chat(tokenizer, row, 8192)["completion_mask"])
    unmasked = sum(encode_chat(tokenizer, sample, 8192)["completion_mask"])
    assert 0 < masked < unmasked  # the rejected turn's tokens carry no loss, the others still do


def test_merged_pools_keep_every_corpus_row_and_add_the_samples(shard, tmp_path):
    ws, shards = shard
    corpus_row = ChatSample.build(domain="deep_search", source="hipporag_musique_hotpotqa/musique_train.json.gz",
                                  messages=[Message(role="user", content="Who wrote it?"),
                                            Message(role="assistant", content="Someone")])
    write_jsonl(tmp_path / "deep_search.jsonl", [corpus_row])
    merged = _merge(ws, DeepSearchConfig(), shards, {"deep_search": str(tmp_path / "deep_search.jsonl")})
    rows = read_jsonl(merged["pools"]["deep_search"], ChatSample).rows
    assert rows[0] == corpus_row and len(rows) == 1 + merged["stats"]["samples"]["deep_search"]
