"""Your own SFT data: external datasets mapped onto Forge's chat rows, next to (or instead of) ``corpora/``.

A profile lists sources per domain under ``pools.sources`` (forge/config.py, ``SourceConfig``):

    pools:
      allow_hub_download: true            # only for hf:// paths; refused when the profile loads otherwise
      sources:
        code:
          - {path: /data/code-sft.parquet, fields: {prompt: instruction, response: output}, licence: "Apache-2.0"}
        general:
          - {path: s3://bucket/chats/, format: jsonl, fields: {messages: conversation}, licence: "CC-BY-4.0"}
          - {path: /data/hf-dataset, format: hf_disk, fields: {prompt: question, response: answer}, licence: MIT}
        stem:
          - {path: "hf://datasets/ORG/NAME/data", format: parquet, fields: {messages: messages}, licence: MIT}

Formats: JSON Lines (``.jsonl``, ``.jsonl.gz``), Parquet (read a row group at a time), a folder written by
``datasets.Dataset.save_to_disk``, each a file or a folder of such files, local or behind any fsspec URL (``s3://``
needs ``s3fs``, ``gs://`` ``gcsfs``, ``hf://`` huggingface_hub, installed with Forge). The sources join corpora/'s
rows in their domains' pools. ``fields`` maps Forge's chat schema onto the source's columns: either
``messages`` (a list of ``{role, content}``; ``from``/``value`` as ShareGPT writes them is read too), or ``prompt`` and
``response`` (one user turn, one assistant turn), each with an optional ``system``. Records are read one at a time
(:func:`iter_records`): memory holds one record (one row group for Parquet), not the file.

A record that does not map or does not validate is reported by file, record number and field and quarantined, as
``forge data validate`` does; the rest of the source is kept.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from forge.config import SourceConfig
from forge.data.schemas import ChatSample, Message
from forge.errors import InputError
from forge.workspace import hub_online

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
         "system": "system", "tool": "tool"}


class SourceError(InputError):
    """A source that cannot be read at all (missing, unknown format): names the path and what to do."""


SUFFIXES = {"jsonl": (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson"), "parquet": (".parquet",)}


def _format(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    name = path.rstrip("/").lower()
    for known, suffixes in SUFFIXES.items():
        if name.endswith(suffixes):
            return known
    raise SourceError(f"{path}: cannot tell its format from the name; set format: jsonl, parquet or hf_disk")


def _files(fs, path: str, fmt: str) -> list[str]:
    """The files a source path stands for: the path itself, or the data files under a folder, sorted."""
    if not fs.exists(path):
        raise SourceError(f"{path}: no such file or folder")
    if not fs.isdir(path):
        return [path]
    suffixes = SUFFIXES[fmt]
    found = sorted(p for p in fs.find(path) if p.lower().endswith(suffixes))
    if not found:
        raise SourceError(f"{path}: a folder with no {' / '.join(suffixes)} files")
    return found


def _online_for(path: str):
    """The hub online while an ``hf://`` source is read (the profile allowed it: ``pools.allow_hub_download``, checked
    when it loads); every other path reads as it is."""
    return hub_online() if path.startswith("hf://") else nullcontext()


def iter_records(src: SourceConfig) -> Iterator[tuple[str, int, dict[str, Any] | Exception]]:
    """``(file, record number from 1, record)`` for every record of ``src``, one at a time; a line that is not JSON
    comes as the exception in place of the record (it is reported, the rest is read). ``hf://`` paths go through
    huggingface_hub's fsspec file system (``hf://datasets/ORG/NAME/FILES``)."""
    with _online_for(src.path):
        yield from _records(src)


def _records(src: SourceConfig) -> Iterator[tuple[str, int, dict[str, Any] | Exception]]:
    import fsspec

    if src.format == "hf_disk":
        from datasets import load_from_disk

        for i, record in enumerate(load_from_disk(src.path), 1):
            yield src.path, i, record
        return
    fmt = _format(src.path, src.format)
    fs, root = fsspec.core.url_to_fs(src.path)
    for file in _files(fs, root, fmt):
        shown = file if "://" not in src.path else f"{src.path.split('://')[0]}://{file}"
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with fs.open(file, "rb") as f:
                n = 0
                for batch in pq.ParquetFile(f).iter_batches(batch_size=1024):
                    for record in batch.to_pylist():
                        n += 1
                        yield shown, n, record
            continue
        with fs.open(file, "rb") as raw, (gzip.open(raw) if file.lower().endswith(".gz") else nullcontext(raw)) as f:
            for n, line in enumerate(io.TextIOWrapper(f, encoding="utf-8"), 1):
                if not line.strip():
                    continue
                try:
                    yield shown, n, json.loads(line)
                except ValueError as err:
                    yield shown, n, ValueError(f"not JSON: {err}")


def _column(record: dict, column: str, field: str) -> Any:
    if column not in record:
        raise ValueError(f"field {field!r}: column {column!r} missing (the record has {', '.join(sorted(record))})")
    return record[column]


def _messages(record: dict, fields: dict[str, str]) -> list[Message]:
    out: list[Message] = []
    if "system" in fields:
        out.append(Message(role="system", content=str(_column(record, fields["system"], "system"))))
    if "messages" in fields:
        turns = _column(record, fields["messages"], "messages")
        if not isinstance(turns, list) or not turns:
            raise ValueError(f"field 'messages': column {fields['messages']!r} is not a non-empty list of turns")
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                # ValueError, as every record that does not map: the pool quarantines it (forge/data/pools.py)
                raise ValueError(f"field 'messages': turn {i} is {type(turn).__name__}, not an object")  # noqa: TRY004
            role = ROLES.get(str(turn.get("role", turn.get("from", ""))).lower())
            content = turn.get("content", turn.get("value"))
            if role is None or not isinstance(content, str):
                raise ValueError(f"field 'messages': turn {i} needs a role (user/assistant/system/tool) and a text "
                                 f"content, got {json.dumps(turn, ensure_ascii=False)[:120]}")
            out.append(Message(role=role, content=content))
        return out
    for field, role in (("prompt", "user"), ("response", "assistant")):
        value = _column(record, fields[field], field)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"field {field!r}: column {fields[field]!r} is empty or not text")
        out.append(Message(role=role, content=value))
    return out


def to_chat_sample(record: dict[str, Any], src: SourceConfig, domain: str, where: str) -> ChatSample:
    """One record as a chat row of ``domain`` (``ValueError`` naming the field when it does not map)."""
    return ChatSample.build(domain=domain, source=src.name or src.path, parents=[where],
                            messages=_messages(record, src.fields))


def sources_digest(sources: dict[str, list[SourceConfig]]) -> str:
    """What the profile's own sources hold, for the pools' cache key: per file its size and modification time (what
    the store reports for a URL: mtime, or its ETag), so an edited or added file rebuilds the pools. Reading every
    byte of a 2B-token mix on each run would cost minutes; a rewrite that keeps size and mtime goes unseen."""
    import hashlib

    import fsspec

    h = hashlib.sha256()
    for domain, listed in sorted(sources.items()):
        for src in listed:
            with _online_for(src.path):
                fs, root = fsspec.core.url_to_fs(src.path)
                files = (sorted(fs.find(root)) if fs.isdir(root) else [root]) if fs.exists(root) else []
                infos = [fs.info(file) for file in files]
            for file, info in zip(files, infos, strict=True):
                stamp = (info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("etag")
                         or info.get("blob_id"))  # the hub's: the file's git blob
                h.update(json.dumps([domain, src.path, file, info.get("size"), stamp], default=str).encode())
            if not files:
                h.update(f"{src.path}: missing".encode())  # the pools task names it when it reads the source
    return h.hexdigest()[:16]
