"""build_mix: token shares on target, deterministic, held-out rows disjoint from train, clear errors."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from forge.config import MixConfig
from forge.data.jsonl import read_jsonl, write_jsonl
from forge.data.mix import MixError, build_mix, read_manifest
from forge.data.pools import chat_text
from forge.data.schemas import ChatSample, Message

CFG = MixConfig(name="test-mix", total_tokens=60_000, num_shards=3, seed=7)


@pytest.fixture(scope="module")
def mix(tmp_path_factory, pool_paths, bpe_count_tokens):
    out = tmp_path_factory.mktemp("mixes") / CFG.name
    domains = ("code", "deep_search", "stem", "tool_use", "general")
    manifest = build_mix({d: pool_paths[d] for d in domains}, CFG, bpe_count_tokens, out, heldout_rows=10)
    return out, manifest


def test_shares_within_tolerance_of_normalized_targets(mix, bpe_count_tokens):
    out, manifest = mix
    targets = CFG.shares.normalized()
    train = [r for name in manifest.shards for r in read_jsonl(out / name, ChatSample, max_bad_ratio=0.0).rows]
    by_domain: dict[str, int] = {}
    for r in train:  # recount from the written shards, not from the manifest's own numbers
        by_domain[r.domain] = by_domain.get(r.domain, 0) + bpe_count_tokens(r)
    total = sum(by_domain.values())
    assert abs(total - CFG.total_tokens) / CFG.total_tokens < 0.02
    for domain, target in targets.items():
        assert abs(by_domain[domain] / total - target) <= 0.015, domain
        assert manifest.domains[domain].tokens == by_domain[domain]
    assert len({r.id for r in train}) == len(train)  # no row repeated


def test_heldout_disjoint_and_manifest_complete(mix):
    out, manifest = mix
    train_ids = {r.id for name in manifest.shards for r in read_jsonl(out / name, ChatSample).rows}
    held = read_jsonl(out / "heldout.jsonl", ChatSample, max_bad_ratio=0.0).rows
    assert len(held) == 10 and {r.domain for r in held} == set(CFG.shares.normalized())
    assert not train_ids & {r.id for r in held}
    on_disk = json.loads((out / "manifest.json").read_text())
    assert set(on_disk["sources"]) == set(manifest.domains) and all(len(h) == 64 for h in on_disk["sources"].values())
    assert on_disk["config"]["seed"] == 7 and read_manifest(out) == manifest
    assert sorted(p.name for p in out.iterdir()) == sorted([*manifest.shards, "heldout.jsonl", "manifest.json"])


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path, chat_pools, bpe_count_tokens, mix):
    out, manifest = mix
    again = build_mix(chat_pools, CFG, bpe_count_tokens, tmp_path / "again", heldout_rows=10)
    assert again.domains == manifest.domains
    for name in [*manifest.shards, "heldout.jsonl"]:
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes()
    other = build_mix(chat_pools, CFG.model_copy(update={"seed": 8}), bpe_count_tokens, tmp_path / "o", heldout_rows=10)
    assert (tmp_path / "o" / manifest.shards[0]).read_bytes() != (out / manifest.shards[0]).read_bytes()
    assert other.max_share_error() <= 0.015


def test_too_small_pool_names_domain_and_tokens(tmp_path, chat_pools, bpe_count_tokens):
    pools = dict(chat_pools, general=chat_pools["general"][:5])
    with pytest.raises(MixError, match=r"'general' is too small: the mix needs \d+ tokens .* only \d+ tokens"):
        build_mix(pools, CFG, bpe_count_tokens, tmp_path / "small", heldout_rows=10)
    assert not (tmp_path / "small").exists()  # nothing half-written


def test_a_mix_builds_in_memory_bounded_by_rows_not_text(tmp_path, chat_pools):
    """Pools of ~24 MB of text: the mix streams them (an id and an offset per row; only rows it takes are parsed),
    so its peak Python allocation stays far below the pools' size. Reading the pools whole (as build_mix did
    before) peaks above their size: pydantic rows take more memory than their JSON."""
    rng = random.Random(0)
    words = [w for rows in chat_pools.values() for r in rows[:20] for w in chat_text(r).split()]
    paths = {}
    for domain in ("code", "deep_search", "stem", "tool_use", "general"):
        rows = (ChatSample.build(domain=domain, source="test", messages=[
            Message(role="user", content=" ".join(rng.choices(words, k=60))),
            Message(role="assistant", content=" ".join(rng.choices(words, k=600)))]) for _ in range(1200))
        write_jsonl(paths.setdefault(domain, tmp_path / f"{domain}.jsonl"), rows)
    pool_bytes = sum(p.stat().st_size for p in paths.values())
    cfg = CFG.model_copy(update={"total_tokens": 200_000})
    words_in = lambda s: sum(len(m.content.split()) for m in s.messages)
    tracemalloc.start()
    try:
        manifest = build_mix(paths, cfg, words_in, tmp_path / "mix", heldout_rows=10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pool_bytes > 20 * 2**20
    assert manifest.total_tokens >= 0.98 * cfg.total_tokens and manifest.max_share_error() <= cfg.tolerance
    assert peak < pool_bytes / 8, f"peak {peak / 2**20:.1f} MB for {pool_bytes / 2**20:.1f} MB of pools"
