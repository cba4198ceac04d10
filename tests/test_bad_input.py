"""Bad input at every file argument of the CLI, as a user would hand it over: missing, empty, binary, the wrong
schema, CRLF line ends, a byte-order mark, a truncated last line, one 50 MB line. Each gets one message naming the
file (and the line, where there is one) and an exit status; the good rows beside the bad ones are kept. Profiles
too: unknown or misspelled keys, wrong types, broken YAML, bytes that are not UTF-8, an empty file."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge.config import ConfigError, load_profile

FORGE = str(Path(sys.executable).parent / "forge")
ROWS = [{"id": f"cs-{i}", "source": "t", "domain": "general",
         "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
        for i in range(3)]
PREDICTIONS = [{"id": f"m{i}", "answer": str(i), "prediction": f"The answer is \\boxed{{{i}}}."} for i in range(3)]
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe" * 50


def lines(rows: list[dict]) -> list[str]:
    return [json.dumps(r) for r in rows]


def files(tmp: Path, rows: list[dict]) -> dict[str, Path]:
    good = lines(rows)
    wrong = {k: v for k, v in rows[0].items() if k not in ("messages", "prediction")}
    made = {
        "empty": b"",
        "binary": BINARY,
        "wrong schema": "\n".join([*good[:2], json.dumps(wrong)]).encode() + b"\n",
        "CRLF": ("\r\n".join(good) + "\r\n").encode(),
        "BOM": b"\xef\xbb\xbf" + ("\n".join(good) + "\n").encode(),
        "truncated last line": ("\n".join(good) + "\n" + good[0][:30]).encode(),
        "50 MB line": ("\n".join(good) + "\n").encode() + b'{"id": "' + b"x" * 50_000_000 + b"\n",
    }
    out = {"missing": tmp / "missing.jsonl"}
    for name, data in made.items():
        path = tmp / (name.replace(" ", "_") + ".jsonl")
        path.write_bytes(data)
        out[name] = path
    return out


def forge(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "HF_HUB_OFFLINE": "1"}  # a narrow terminal must not wrap a message
    return subprocess.run([FORGE, *args], capture_output=True, text=True, timeout=300, env=env, check=False)


def reported(done: subprocess.CompletedProcess, status: int, message: str | None, path: Path) -> str:
    """The command's output, after checking its exit status, its one-line message about ``path`` (a regex with
    ``{path}``), and that it printed no stack trace and never echoed a huge line."""
    out = done.stdout + done.stderr
    assert done.returncode == status, out[-2000:]
    if message:
        assert re.search(message.format(path=re.escape(str(path))), out), out[-2000:]
    assert "Traceback" not in out and len(out) < 20_000
    return out


# input: ((exit status, message, good rows in the report) of `forge data validate`,
#         (exit status, message, rows scored and written) of `forge eval score --suite math`)
EXPECTED = {
    "missing": ((2, r"{path}: no such file", None), (2, r"{path}: no such file", None)),
    "empty": ((1, r"{path}: no rows", None), (2, r"{path}: no row could be scored", None)),
    "binary": ((1, r"{path}:1: <encoding>: not UTF-8: byte 0x89 at column 1", 0),
               (2, r"{path}:1: <encoding>: not UTF-8", None)),
    "wrong schema": ((1, r"{path}:3: messages: Field required", 2), (0, r"{path}:3: prediction: Field required", 2)),
    "CRLF": ((0, None, 3), (0, None, 3)),
    "BOM": ((0, None, 3), (0, None, 3)),
    "truncated last line": ((1, r"{path}:4: <json>: ", 3), (0, r"{path}:4: <json>: ", 3)),
    "50 MB line": ((1, r"{path}:4: <json>: Unterminated string starting at \(column 8\)", 3),
                   (0, r"{path}:4: <json>: Unterminated string", 3)),
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_data_validate(tmp_path, case):
    path = files(tmp_path, ROWS)[case]
    status, message, good = EXPECTED[case][0]
    done = forge("data", "validate", str(path), "--schema", "chat", "--quarantine", str(tmp_path / "q"))
    out = reported(done, status, message, path)
    if good is not None:  # the report's table: lines │ good │ bad │ share
        table = [line for line in out.splitlines() if line.startswith("│")][-1].split("│")
        assert int(table[2]) == good, out[-2000:]


@pytest.mark.parametrize("case", list(EXPECTED))
def test_eval_score(tmp_path, case):
    path = files(tmp_path, PREDICTIONS)[case]
    status, message, kept = EXPECTED[case][1]
    target = tmp_path / "verdicts.jsonl"
    reported(forge("eval", "score", "--suite", "math", str(path), "--out", str(target)), status, message, path)
    if kept is not None:  # the good rows were scored and written, the bad ones named
        verdicts = [json.loads(line) for line in target.read_text().splitlines()]
        assert len(verdicts) == kept and all(v["correct"] for v in verdicts)


def test_sandbox_exec_names_a_file_that_is_not_text(tmp_path):
    program = tmp_path / "prog.py"
    program.write_bytes(b"print('ok')\n" + BINARY)
    done = forge("sandbox", "exec", str(program))
    assert done.returncode == 2 and f"{program}:2:1: not UTF-8 text (byte 0x89)" in done.stderr, done.stderr
    missing = forge("sandbox", "exec", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and f"{tmp_path / 'nope.py'}: no such file" in missing.stderr, missing.stderr


PROFILES = {  # input: (file content, what load_profile says; None: it loads)
    "missing": (None, r"{path}: no such profile"),
    "empty": (b"", r"{path}: the profile is empty"),
    "binary": (BINARY, r"{path}:1:1: not UTF-8 text \(byte 0x89\)"),
    "a list": (b"- base\n- sft\n", r"{path}: a profile is a mapping of sections, got list"),
    "misspelled key": (b"profile: p\nbase:\n  hidden_sise: 64\n",
                       r"{path}:3: base.hidden_sise: unknown key: did you mean 'hidden_size'\?"),
    "wrong type": (b"profile: p\nbase:\n  hidden_size: many\n",
                   r"{path}:3: base.hidden_size: Input should be a valid integer.*\(got 'many'\)"),
    "truncated YAML": (b"profile: p\nbase: {hidden_size: 64\n", r"{path}:3:1: not valid YAML: expected ',' or '}}'"),
    "CRLF": (b"profile: p\r\nbase:\r\n  hidden_size: 64\r\n", None),
    "BOM": (b"\xef\xbb\xbfprofile: p\nbase:\n  hidden_size: 64\n", None),
}


@pytest.mark.parametrize("case", list(PROFILES))
def test_profile(tmp_path, case):
    data, message = PROFILES[case]
    path = tmp_path / "profile.yaml"
    if data is not None:
        path.write_bytes(data)
    if message is None:
        assert load_profile(path).base.hidden_size == 64
        return
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert re.search(message.format(path=re.escape(str(path))), str(err.value)), str(err.value)


def test_forge_run_reports_a_bad_profile_without_a_traceback(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_bytes(PROFILES["misspelled key"][0])
    done = forge("run", "--profile", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{path}:3: base.hidden_sise: unknown key: did you mean 'hidden_size'?" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_forge_run_names_a_damaged_corpus_file_without_a_traceback(tmp_path):
    """A recipe stage that meets a damaged corpus file (here GSM8K's train set with a broken line 7, read by the
    tokenizer stage) stops the run with the file and line, exit status 2, and no stack trace on the console."""
    from forge.workspace import REPO_ROOT
    from tests.flows.checkout import forge_env, make_checkout

    corpora = tmp_path / "corpora"
    corpora.mkdir()
    for src in (REPO_ROOT / "corpora").iterdir():
        if src.name != "gsm8k":
            (corpora / src.name).symlink_to(src)
    (corpora / "gsm8k").mkdir()
    for src in (REPO_ROOT / "corpora" / "gsm8k").iterdir():
        (corpora / "gsm8k" / src.name).symlink_to(src)
    train = corpora / "gsm8k" / "train.jsonl.gz"
    with gzip.open(train) as f:
        rows = f.read().splitlines(keepends=True)
    train.unlink()
    with gzip.open(train, "wb") as f:
        f.write(b"".join(rows[:6]) + b'{"question": "cut off\n' + b"".join(rows[6:]))
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "corpora").symlink_to(corpora, target_is_directory=True)
    make_checkout(root, corpora=False)
    done = subprocess.run([FORGE, "run", "--profile", "ci"], env={**forge_env(root), "COLUMNS": "200"}, cwd=root,
                          capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert f"{root / 'corpora/gsm8k/train.jsonl.gz'}:7: not JSON" in out.replace("\n", "")
    assert "Traceback" not in out and len(out.splitlines()) < 40, out[-3000:]
    status = subprocess.run([FORGE, "status", "--json"], env=forge_env(root), cwd=root, capture_output=True,
                            text=True, timeout=120, check=True)
    summary = json.loads(status.stdout)
    stage = summary["stages"]["tokenizer"]
    assert summary["state"] == "failed" and stage["state"] == "failed", stage
    assert stage["error"].startswith("BadDataError: ") and "train.jsonl.gz:7: not JSON" in stage["error"]
