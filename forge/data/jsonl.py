"""JSON Lines I/O with validation and quarantine: bad lines are reported and set aside, good rows are kept.

Every bad line is named as ``file:line: field: reason`` (``<json>`` for a syntax error, the dotted pydantic
location such as ``messages.2.role`` for a schema error), copied verbatim to
``<quarantine_dir>/<stem>.bad.jsonl`` with its reasons in ``<stem>.bad.reasons.txt``, and counted. Only when
the bad share exceeds ``max_bad_ratio`` does reading fail, with a :class:`BadDataError` naming the file,
the counts and the first bad lines.

    from forge.data.jsonl import read_jsonl, write_jsonl
    res = read_jsonl("data/pools/stem.jsonl", ChatSample, quarantine_dir=ws.quarantine, max_bad_ratio=0.01)
    res.rows, res.bad, res.n_total
    write_jsonl("out.jsonl", res.rows)       # atomic; ``.gz`` suffix compresses
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from forge.atomic import atomic_open, atomic_write_text
from forge.errors import InputError

T = TypeVar("T", bound=BaseModel)
SHOW_FIRST = 5


class BadDataError(InputError):
    """Too many bad lines in a data file; the message names the file, the counts and the first bad lines."""


@dataclass(frozen=True)
class BadLine:
    path: str
    line_no: int
    field: str
    reason: str
    raw: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_no}: {self.field}: {self.reason}"


@dataclass
class ReadResult(Generic[T]):
    path: Path
    rows: list[T] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)  # the 1-based line of each good row, parallel to rows
    bad: list[BadLine] = field(default_factory=list)
    n_total: int = 0
    quarantine_file: Path | None = None

    @property
    def n_good(self) -> int:
        return len(self.rows)

    @property
    def n_bad(self) -> int:
        # One line may have several errors; count lines, not errors.
        return len({b.line_no for b in self.bad})

    @property
    def bad_ratio(self) -> float:
        return self.n_bad / self.n_total if self.n_total else 0.0


def open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


class _NotUTF8(str):
    """A line whose bytes are not UTF-8, kept as a readable stand-in (undecodable bytes replaced) with the reason."""

    reason: str


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def _validate(raw: str, schema: type[T], path: str, line_no: int) -> tuple[T | None, list[BadLine]]:
    if isinstance(raw, _NotUTF8):
        return None, [BadLine(path, line_no, "<encoding>", raw.reason, raw)]
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as err:
        return None, [BadLine(path, line_no, "<json>", f"{err.msg} (column {err.colno})", raw)]
    if not isinstance(obj, dict):
        return None, [BadLine(path, line_no, "<json>", f"expected an object, got {type(obj).__name__}", raw)]
    try:
        return schema.model_validate(obj), []
    except ValidationError as err:
        return None, [BadLine(path, line_no, _loc(e["loc"]), e["msg"], raw) for e in err.errors()]


def iter_raw_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline) for every non-blank line; gz or plain.

    Each line is decoded on its own, so bytes that are not UTF-8 spoil only their line (it comes back as a
    :class:`_NotUTF8` that validation reports as ``<encoding>``); a byte-order mark opening the file is dropped.
    """
    for line_no, _, line in _lines_at(path):
        yield line_no, line


def _lines_at(path: Path) -> Iterator[tuple[int, int, str]]:
    """:func:`iter_raw_lines` with each line's byte offset in the (decompressed) file, for :func:`read_row_at`."""
    offset = 0
    with open_bytes(path) as fh:
        for i, data in enumerate(fh, start=1):
            start, offset = offset, offset + len(data)
            if i == 1 and data.startswith(b"\xef\xbb\xbf"):
                data, start = data[3:], start + 3
            data = data.rstrip(b"\r\n")
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as err:
                line = _NotUTF8(data.decode("utf-8", errors="replace"))
                line.reason = f"not UTF-8: byte 0x{data[err.start]:02x} at column {err.start + 1}"
            if line.strip():
                yield i, start, line


def scan_jsonl(path: str | os.PathLike, schema: type[T], *, max_bad_ratio: float = 1.0
               ) -> Iterator[tuple[int, T]]:
    """``(byte offset, row)`` for every good line of ``path``, one at a time (memory bounded by the longest line):
    the streaming form of :func:`read_jsonl`, for files too large to hold. Bad lines are skipped and counted; once
    the file is read, more than ``max_bad_ratio`` of them raise :class:`BadDataError` as read_jsonl does. Read a
    row again with :func:`read_row_at`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such data file")
    n_total, bad_lines, first_bad = 0, 0, []
    for line_no, offset, raw in _lines_at(path):
        n_total += 1
        row, errors = _validate(raw, schema, str(path), line_no)
        if row is not None:
            yield offset, row
            continue
        bad_lines += 1
        if len(first_bad) < SHOW_FIRST:
            first_bad.append(errors[0])
    _refuse_if_too_bad(path, bad_lines, n_total, first_bad, max_bad_ratio)


def read_row_at(fh: IO[bytes], offset: int, schema: type[T]) -> T:
    """The row whose line starts at ``offset`` of the open binary file ``fh`` (an offset from :func:`scan_jsonl`)."""
    fh.seek(offset)
    return schema.model_validate(json.loads(fh.readline()))


def read_jsonl(
    path: str | os.PathLike,
    schema: type[T],
    *,
    quarantine_dir: str | os.PathLike | None = None,
    max_bad_ratio: float = 1.0,
) -> ReadResult[T]:
    """Read and validate every line of ``path`` (.jsonl or .jsonl.gz) against ``schema``.

    Bad lines never stop the read; they are collected (and quarantined when ``quarantine_dir`` is given).
    Raises :class:`BadDataError` when bad lines / all lines > ``max_bad_ratio``; FileNotFoundError when the
    file does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such data file")
    result: ReadResult[T] = ReadResult(path=path)
    for line_no, raw in iter_raw_lines(path):
        result.n_total += 1
        row, errors = _validate(raw, schema, str(path), line_no)
        if row is not None:
            result.rows.append(row)
            result.line_nos.append(line_no)
        result.bad.extend(errors)
    if quarantine_dir is not None and result.bad:
        result.quarantine_file = quarantine_lines(result.bad, Path(quarantine_dir), path)
    _refuse_if_too_bad(path, result.n_bad, result.n_total, result.bad, max_bad_ratio, result.quarantine_file)
    return result


def _refuse_if_too_bad(path: Path, n_bad: int, n_total: int, bad: list[BadLine], max_bad_ratio: float,
                       quarantined: Path | None = None) -> None:
    ratio = n_bad / n_total if n_total else 0.0
    if ratio > max_bad_ratio:
        first = "\n".join(f"  {b}" for b in bad[:SHOW_FIRST])
        where = f"; quarantined to {quarantined}" if quarantined else ""
        raise BadDataError(f"{path}: {n_bad} of {n_total} lines are bad ({ratio:.1%} > allowed "
                           f"{max_bad_ratio:.1%}){where}. First bad lines:\n{first}")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def quarantine_lines(bad: list[BadLine], quarantine_dir: Path, source: Path) -> Path:
    """Write bad lines verbatim (one per line, each once) plus a reasons file; returns the .bad.jsonl path."""
    stem = _stem(source)
    seen: dict[int, str] = {}
    for b in bad:
        seen.setdefault(b.line_no, b.raw)
    target = quarantine_dir / f"{stem}.bad.jsonl"
    atomic_write_text(target, "".join(raw + "\n" for raw in seen.values()))
    atomic_write_text(quarantine_dir / f"{stem}.bad.reasons.txt", "".join(f"{b}\n" for b in bad))
    return target


def dump_row(row: BaseModel | dict) -> str:
    obj = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_jsonl(path: str | os.PathLike, rows: Iterable[BaseModel | dict]) -> int:
    """Write rows atomically, one JSON object per line (gzip when the name ends in .gz); returns the count."""
    path = Path(path)
    n = 0
    if path.name.endswith(".gz"):
        with atomic_open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            for row in rows:
                gz.write((dump_row(row) + "\n").encode("utf-8"))
                n += 1
        return n
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(dump_row(row) + "\n")
            n += 1
    return n
