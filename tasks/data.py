"""Prefect tasks for the data phase: pools from corpora/, the token-share SFT mix, DVC versioning."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from forge.config import MixConfig, PoolsConfig
from forge.hashing import tree_digest
from forge.workspace import Workspace
from tasks._cache import cached_task


@task(name="digest-corpora")
def digest_corpora() -> str:
    """Content digest of corpora/: the cache key of everything built from it."""
    return tree_digest(Workspace.from_env().corpora)


@cached_task(name="build-pools", modules=("forge.data.pools", "forge.data.corpora", "forge.data.schemas"))
def build_pools_task(cfg: PoolsConfig, corpora_digest: str) -> dict[str, str]:
    from forge.data.pools import build_pools

    paths = build_pools(Workspace.from_env(), cfg)
    return {name: str(path) for name, path in paths.items()}


@cached_task(name="build-mix", modules=("forge.data.mix", "forge.data.jsonl", "forge.chat"))
def build_mix_task(
    cfg: MixConfig, pool_paths: dict[str, str], pools_digest: str, tokenizer_dir: str, heldout_rows: int,
    review: dict | None = None,
) -> dict:
    """Sample the SFT mix in target token shares; returns the mix folder and its manifest (``review``: what human
    verdicts changed in the pools, recorded in the manifest)."""
    from transformers import AutoTokenizer

    from forge.chat import count_chat_tokens
    from forge.config import DOMAINS
    from forge.data.mix import build_mix

    ws = Workspace.from_env()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    out_dir = ws.mixes / cfg.name
    pools = {d: Path(pool_paths[d]) for d in DOMAINS}
    manifest = build_mix(pools, cfg, lambda s: count_chat_tokens(tokenizer, s), out_dir, heldout_rows, review=review)
    return {"mix_dir": str(out_dir), "manifest": manifest.model_dump(mode="json")}


@task(name="version-data")
def version_data_task() -> str:
    """``dvc add data`` + ``dvc push`` to the local remote; returns the md5 recorded in data.dvc."""
    from forge.data.versioning import ensure_dvc, version_data

    ws = Workspace.from_env()
    ensure_dvc(ws.root, ws.dvc_remote)
    return version_data(ws.root)
