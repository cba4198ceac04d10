"""read_jsonl / write_jsonl / quarantine and the `forge data validate` command (chat rows and trajectories)."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from forge.data.cli import app
from forge.data.jsonl import BadDataError, read_jsonl, write_jsonl
from forge.data.schemas import ChatSample, Message, SearchTrajectory, ToolCall, ToolFunction, ToolSpec, TurnVerdict

GOOD = ChatSample.build(domain="stem", source="test", messages=[
    Message(role="user", content="What is 2+2?"), Message(role="assistant", content="4")])


def _lines(good_count: int = 3) -> list[str]:
    good = [json.dumps(ChatSample.build(domain="stem", source="test", messages=[
        Message(role="user", content=f"What is {i}+{i}?"), Message(role="assistant", content=str(2 * i))]
    ).model_dump(mode="json")) for i in range(good_count)]
    bad_syntax = '{"id": "x", "source": '  # truncated JSON
    missing = json.dumps({"id": "cs-1", "source": "t", "messages": GOOD.model_dump(mode="json")["messages"]})
    wrong_type = GOOD.model_dump(mode="json")
    wrong_type["messages"][1]["role"] = "robot"
    return [good[0], bad_syntax, good[1], missing, json.dumps(wrong_type), *good[2:]]


@pytest.fixture
def mixed_file(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(_lines()) + "\n")
    return path


def test_bad_lines_are_named_kept_apart_and_good_rows_kept(mixed_file, tmp_path):
    res = read_jsonl(mixed_file, ChatSample, quarantine_dir=tmp_path / "q")
    assert res.n_total == 6 and res.n_good == 3 and res.n_bad == 3
    reports = [str(b) for b in res.bad]
    assert any(r.startswith(f"{mixed_file}:2: <json>: ") for r in reports)
    assert f"{mixed_file}:4: domain: Field required" in reports
    assert any(r.startswith(f"{mixed_file}:5: messages.1.role: ") for r in reports)
    quarantined = (tmp_path / "q" / "mixed.bad.jsonl").read_text().splitlines()
    originals = mixed_file.read_text().splitlines()
    assert quarantined == [originals[1], originals[3], originals[4]]  # verbatim, in file order
    assert "mixed.jsonl:5: messages.1.role" in (tmp_path / "q" / "mixed.bad.reasons.txt").read_text()


def test_ratio_threshold_raises_with_file_counts_and_first_lines(mixed_file):
    with pytest.raises(BadDataError) as err:
        read_jsonl(mixed_file, ChatSample, max_bad_ratio=0.4)
    msg = str(err.value)
    assert str(mixed_file) in msg and "3 of 6 lines" in msg and ":2: <json>" in msg
    assert read_jsonl(mixed_file, ChatSample, max_bad_ratio=0.5).n_good == 3  # exactly at the limit is allowed


def test_write_then_read_roundtrip_plain_and_gz(tmp_path):
    rows = [GOOD]
    for name in ("a.jsonl", "a.jsonl.gz"):
        assert write_jsonl(tmp_path / name, rows) == 1
        assert read_jsonl(tmp_path / name, ChatSample, max_bad_ratio=0.0).rows == rows
    with gzip.open(tmp_path / "a.jsonl.gz", "rt") as fh:
        assert json.loads(fh.readline())["id"] == GOOD.id
    assert not list(tmp_path.glob(".*.tmp"))  # no temp files left behind


def test_validate_cli_exit_codes(mixed_file, tmp_path):
    runner = CliRunner()
    bad = runner.invoke(app, ["validate", str(mixed_file), "--schema", "chat", "--quarantine", str(tmp_path / "q")])
    assert bad.exit_code == 1, bad.output
    assert "messages.1.role" in bad.output and (tmp_path / "q" / "mixed.bad.jsonl").exists()
    clean = tmp_path / "clean.jsonl"
    write_jsonl(clean, [GOOD])
    ok = runner.invoke(app, ["validate", str(clean), "--schema", "chat"])
    assert ok.exit_code == 0, ok.output
    unknown = runner.invoke(app, ["validate", str(clean), "--schema", "nope"])
    assert unknown.exit_code == 2 and "chat" in unknown.output and "search_qa" in unknown.output


def _trajectory(tools: list[ToolSpec]) -> SearchTrajectory:
    msgs = [Message(role="user", content="What is the music of The Holiday?"),
            Message(role="assistant", reasoning="Search first.",
                    tool_calls=[ToolCall(name="search", arguments={"query": "The Holiday"})]),
            Message(role="tool", name="search", content="[1] The Holiday\n    The Holiday is a 2006 film."),
            Message(role="assistant", reasoning="So the answer is Hans Zimmer.", content="Hans Zimmer")]
    return SearchTrajectory.build(source="test:planner", qa_id="qa-1", agent="planner", question=msgs[0].content,
                                  gold_answer="Hans Zimmer", messages=msgs, tools=tools, final_answer="Hans Zimmer",
                                  correct=True)


def test_trajectory_rows_carry_their_tools_and_validate(tmp_path):
    search = ToolSpec(function=ToolFunction(name="search"))
    traj = _trajectory([search]).model_copy(update={"verdicts": [
        TurnVerdict(message_index=1, logical=True, tool_call=True, info_gain=False),
        TurnVerdict(message_index=3, logical=True, tool_call=True, info_gain=True)]})
    sample = traj.to_chat_sample()
    assert sample.tools == [search] and sample.parents == ["qa-1", traj.id] and sample.domain == "deep_search"
    assert [m.loss for m in sample.messages if m.role == "assistant"] == [False, True]
    assert traj.turn_rewards() == [-1.0, 1.0]
    with pytest.raises(ValueError, match="not among the trajectory's tools"):
        _trajectory([])
    good, bad = tmp_path / "traj.jsonl", tmp_path / "bad.jsonl"
    write_jsonl(good, [traj])
    row = traj.model_dump(mode="json")
    row["tools"] = []
    bad.write_text(json.dumps(row) + "\n")
    runner = CliRunner()
    assert runner.invoke(app, ["validate", str(good), "--schema", "trajectory"]).exit_code == 0
    refused = runner.invoke(app, ["validate", str(bad), "--schema", "trajectory"])
    assert refused.exit_code == 1 and "search" in refused.output


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_bytes_that_are_not_utf8_spoil_only_their_line(tmp_path, suffix):
    good = ChatSample.build(domain="general", source="t", messages=[
        Message(role="user", content="hi"), Message(role="assistant", content="héllo")])
    body = (b"\xef\xbb\xbf" + good.model_dump_json().encode() + b"\n"  # a byte-order mark opens the file
            + b'{"id": "\xff\xfe", "broken": true}\n'  # Latin-1 bytes: not UTF-8
            + good.model_dump_json().encode() + b"\r\n")  # CRLF line end
    path = tmp_path / f"mixed{suffix}"
    path.write_bytes(gzip.compress(body) if suffix.endswith(".gz") else body)
    res = read_jsonl(path, ChatSample)
    assert res.rows == [good, good] and res.line_nos == [1, 3]
    assert [str(b) for b in res.bad] == [f"{path}:2: <encoding>: not UTF-8: byte 0xff at column 9"]
