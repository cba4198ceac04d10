"""Your own data (forge/data/sources.py): external sources in three formats join the pools of their domains, mapped
onto chat rows by the profile's field mapping; a bad record is reported by file, record and field and quarantined
while the rest of its source is kept; an eval leak is refused as from corpora/; licences are recorded."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from forge.config import ConfigError, PoolsConfig, SourceConfig, load_profile
from forge.data.jsonl import read_jsonl
from forge.data.pools import build_pool_rows, build_pools
from forge.data.schemas import ChatSample
from forge.data.sources import SourceError, iter_records


@pytest.fixture()
def sources(tmp_path, wiki_docs):
    docs = wiki_docs[:60]
    # JSON Lines, gzipped, ShareGPT-style turns; record 3 is broken JSON, record 5 has no assistant turn.
    lines = [json.dumps({"conversation": [{"from": "human", "value": f"Who is {d['title']}?"},
                                          {"from": "gpt", "value": d["text"][:200]}]}) for d in docs[:20]]
    lines[2] = "{not json"
    lines[4] = json.dumps({"conversation": [{"from": "human", "value": "hello"}]})
    chats = tmp_path / "chats.jsonl.gz"
    chats.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    # Parquet with prompt / response columns; record 2 has an empty response.
    table = pa.table({"instruction": [f"Summarize: {d['title']}" for d in docs[20:40]],
                      "output": ["" if i == 1 else d["text"][:150] for i, d in enumerate(docs[20:40])]})
    parquet = tmp_path / "sft.parquet"
    pq.write_table(table, parquet)
    # A datasets folder (save_to_disk).
    disk = tmp_path / "hf"
    Dataset.from_dict({"q": [f"Tell me about {d['title']}." for d in docs[40:60]],
                       "a": [d["text"][:180] for d in docs[40:60]]}).save_to_disk(str(disk))
    return {
        "general": [SourceConfig(path=str(chats), fields={"messages": "conversation"}, licence="CC-BY-SA-4.0",
                                 name="wiki-chats")],
        "stem": [SourceConfig(path=str(parquet), fields={"prompt": "instruction", "response": "output"},
                              licence="CC-BY-SA-4.0")],
        "deep_search": [SourceConfig(path=str(disk), format="hf_disk", fields={"prompt": "q", "response": "a"},
                                     licence="CC-BY-SA-4.0", max_rows=15)],
    }


def test_three_formats_join_their_domains_and_bad_records_are_named_not_fatal(workspace, sources, tmp_path):
    plain, _ = build_pool_rows(workspace.corpora, PoolsConfig(max_rows_per_source=10), tmp_path / "plain")
    built, _ = build_pool_rows(workspace.corpora, PoolsConfig(max_rows_per_source=10, sources=sources), tmp_path / "b")

    def added(domain: str, source: str) -> list:
        rows = read_jsonl(tmp_path / "b" / f"{domain}.jsonl", ChatSample, max_bad_ratio=0.0).rows
        return [r for r in rows if r.source == source]

    assert len(added("general", "wiki-chats")) == 18  # 20 records, 2 bad
    assert len(added("stem", str(sources["stem"][0].path))) == 19  # 20, 1 empty response
    assert len(added("deep_search", sources["deep_search"][0].path)) == 15  # max_rows
    for domain in ("general", "stem", "deep_search"):  # corpora/'s rows are still there
        assert plain[domain].ids <= built[domain].ids
    row = added("general", "wiki-chats")[0]
    assert [m.role for m in row.messages] == ["user", "assistant"] and row.parents[0].endswith("chats.jsonl.gz:1")
    bad = {b["where"]: " ".join(b["reason"]) for b in built["general"].bad + built["stem"].bad
           if "chats" in b["where"] or "sft.parquet" in b["where"]}
    chats, parquet = str(sources["general"][0].path), str(sources["stem"][0].path)
    assert "not JSON" in bad[f"{chats}:3"]
    assert f"{chats}:5" in bad  # a conversation with no assistant turn does not validate
    assert "'response'" in bad[f"{parquet}:2"] and "'output'" in bad[f"{parquet}:2"]


def test_a_missing_column_names_the_field_and_the_columns_there_are(workspace, sources, tmp_path):
    wrong = {"stem": [sources["stem"][0].model_copy(update={"fields": {"prompt": "question", "response": "output"}})]}
    built, _ = build_pool_rows(workspace.corpora, PoolsConfig(max_rows_per_source=10, sources=wrong), tmp_path / "p")
    reasons = [" ".join(b["reason"]) for b in built["stem"].bad if "sft.parquet" in b["where"]]
    assert len(reasons) == 20 and "column 'question' missing" in reasons[0] and "instruction" in reasons[0]


def test_an_eval_leak_in_a_source_is_refused(workspace, tmp_path):
    from forge.data import corpora as C

    item = C.load_gsm8k(workspace.corpora, "test")[0]
    leak = tmp_path / "leak.jsonl"
    leak.write_text(json.dumps({"p": item["question"], "r": "42"}) + "\n")
    src = SourceConfig(path=str(leak), fields={"prompt": "p", "response": "r"}, licence="test")
    cfg = PoolsConfig(max_rows_per_source=10, sources={"stem": [src]})
    built, _ = build_pool_rows(workspace.corpora, cfg, tmp_path / "pools")
    assert not [r for r in read_jsonl(tmp_path / "pools" / "stem.jsonl", ChatSample).rows if r.source == str(leak)]
    assert any("evaluation item" in " ".join(b["reason"]) for b in built["stem"].bad)


def test_licences_and_counts_are_written_with_the_pools(workspace, sources, tmp_path, monkeypatch):
    from forge.workspace import Workspace

    ws = Workspace(root=workspace.root, home=tmp_path / "home")
    monkeypatch.setattr(Workspace, "pools", property(lambda self: tmp_path / "pools"))
    build_pools(ws, PoolsConfig(max_rows_per_source=10, sources=sources))
    manifest = json.loads((tmp_path / "pools" / "sources.json").read_text())
    by_name = {s["name"]: s for s in manifest}
    assert by_name["wiki-chats"] == {**by_name["wiki-chats"], "domain": "general", "licence": "CC-BY-SA-4.0",
                                     "rows": 18, "bad": 2}


def test_source_settings_are_checked_when_the_profile_loads(tmp_path):
    with pytest.raises(ConfigError, match="licence"):
        load_profile("tiny", {"pools.sources": {"code": [{"path": "x.jsonl", "fields": {"messages": "m"}}]}})
    with pytest.raises(ConfigError, match="prompt and response"):
        load_profile("tiny", {"pools.sources": {"code": [{"path": "x.jsonl", "fields": {"prompt": "p"},
                                                          "licence": "MIT"}]}})
    with pytest.raises(ConfigError, match="pools.sources.cooking"):
        load_profile("tiny", {"pools.sources": {"cooking": []}})
    with pytest.raises(SourceError, match="no such file"):
        list(iter_records(SourceConfig(path=str(tmp_path / "none.jsonl"), fields={"messages": "m"}, licence="MIT")))


def test_a_hub_source_needs_a_profile_that_allows_the_hub(tmp_path):
    """hf:// paths are read from huggingface.co: refused, with the way to allow it, unless the profile says so."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("profile: mine\npools:\n  sources:\n    stem:\n      - path: hf://datasets/org/name/data\n"
                       "        format: parquet\n        fields: {messages: messages}\n        licence: MIT\n")
    with pytest.raises(ConfigError) as err:
        load_profile(profile)
    message = str(err.value)
    assert f"{profile}:2: pools:" in message and "sources.stem[0].path" in message
    assert "pools.allow_hub_download: true" in message
    allowed = load_profile(profile, {"pools.allow_hub_download": True})
    assert allowed.pools.sources["stem"][0].path == "hf://datasets/org/name/data"
