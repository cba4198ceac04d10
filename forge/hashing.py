"""Stable digests of files, folders and config objects (cache keys, lineage, output folder names)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """sha256 over every file's relative path and content under ``root`` (sorted, so order-independent)."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(file_sha256(path).encode())
    return h.hexdigest()


def files_digest(files: dict[str, str | Path]) -> str:
    """sha256 over named files' names and contents (sorted by name): changes exactly when a file's content does."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode())
        h.update(file_sha256(Path(files[name])).encode())
    return h.hexdigest()


def value_digest(*values: Any, length: int = 16) -> str:
    """Digest of JSON-able values and pydantic models, e.g. to name a stage's output folder."""

    def plain(v: Any) -> Any:
        if isinstance(v, BaseModel):
            return v.model_dump(mode="json")
        if isinstance(v, Path):
            return str(v)
        return v

    blob = json.dumps([plain(v) for v in values], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
