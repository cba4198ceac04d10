"""Fuzzing what reads untrusted input (Hypothesis): the JSONL reader keeps every good row and names every bad line,
whatever bytes sit between them (CRLF, a byte-order mark, no final newline, bytes that are not UTF-8); the parser of
generated assistant text never raises, and gives back exactly the parts that were written."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge.chat import format_assistant_text, parse_assistant_text
from forge.data.jsonl import read_jsonl
from forge.data.schemas import ChatSample, Message, ToolCall

# Derandomized: the same 150 cases each run, so CI cannot fail by a draw; the tags below are among them.
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
rows = st.builds(
    lambda q, a, domain: ChatSample.build(source="fuzz", domain=domain, messages=[
        Message(role="user", content=q), Message(role="assistant", content=a)]),
    texts, texts.filter(str.strip), st.sampled_from(["code", "stem", "general", "tool_use", "deep_search"]),
)
BOM = b"\xef\xbb\xbf"
garbage = st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" "))  # one line of anything


def _blank(data: bytes) -> bool:
    return not data.rstrip(b"\r\n").decode("utf-8", errors="replace").strip()


@FUZZ
@given(lines=st.lists(st.one_of(rows, garbage), max_size=12), crlf=st.booleans(), bom=st.booleans(),
       final_newline=st.booleans())
def test_jsonl_reader_keeps_every_good_row_and_names_every_bad_line(tmp_path, lines, crlf, bom, final_newline):
    encoded = [json.dumps(x.model_dump(mode="json"), ensure_ascii=False).encode() if isinstance(x, ChatSample)
               else x for x in lines]
    end = b"\r\n" if crlf else b"\n"
    data = (BOM if bom else b"") + end.join(encoded) + (end if final_newline and encoded else b"")
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)

    result = read_jsonl(path, ChatSample)  # never raises: max_bad_ratio defaults to 1

    good = [(i, x) for i, x in enumerate(lines, start=1) if isinstance(x, ChatSample)]
    # A file that starts with a byte-order mark has it read as one, whether we wrote it or a garbage line began so.
    first_bom = not bom and bool(lines) and isinstance(lines[0], bytes) and lines[0].startswith(BOM)
    bad = {i for i, x in enumerate(lines, start=1)
           if not isinstance(x, ChatSample) and not _blank(x[len(BOM):] if i == 1 and first_bom else x)}
    assert result.rows == [x for _, x in good]
    assert result.line_nos == [i for i, _ in good]
    assert {b.line_no for b in result.bad} == bad
    assert all(b.path == str(path) and b.field and b.reason for b in result.bad)
    assert result.n_total == len(good) + len(bad)


@FUZZ
@given(text=st.text(max_size=300) | st.sampled_from([
    *TAGS, '<tool_call>{"name": 1}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>', "<tool_call>\n[]\n</tool_call>"]).flatmap(
    lambda tag: st.text(max_size=80).map(lambda t: t + tag + t)))
def test_assistant_text_parser_never_raises(text):
    parts = parse_assistant_text(text)
    assert isinstance(parts.content, str) and all(isinstance(c, ToolCall) for c in parts.tool_calls)
    assert parse_assistant_text(text, tool_names=set()).tool_calls == []


plain = st.text(alphabet=string.ascii_letters + string.digits + " .,?!'\n", min_size=1, max_size=60).map(str.strip)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.sampled_from(TAGS),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                       max_size=3), max_leaves=6)
calls = st.builds(ToolCall, name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
                  arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4))


@FUZZ
@given(content=plain, reasoning=st.none() | plain.filter(bool), tool_calls=st.lists(calls, max_size=3))
def test_assistant_text_round_trips(content, reasoning, tool_calls):
    text = format_assistant_text(content, reasoning, tool_calls)
    assert parse_assistant_text(text) == (content, reasoning, tool_calls)
