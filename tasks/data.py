"""Prefect tasks for the data phase: pools from corpora/, the token-share SFT mix, DVC versioning (the §2.1.1
refinement steps between the mix and DVC are in tasks/refinement.py)."""

from __future__ import annotations

from pathlib import Path

import mlflow

from forge.config import DOMAINS, MixConfig, PoolsConfig
from forge.hashing import files_digest, tree_digest
from forge.stages import DataMix, Mix, Pools, Tokenizer
from forge.workspace import Workspace
from registry.tracking import DATA_MD5_TAG, STAGE_TAG, StageContext
from tasks._cache import cached_task, uncached_task


@uncached_task(name="digest-corpora")
def digest_corpora() -> str:
    """Content digest of corpora/: the cache key of everything built from it."""
    return tree_digest(Workspace.from_env().corpora)


@uncached_task(name="digest-sources")
def digest_sources(cfg: PoolsConfig) -> str:
    """A digest of the profile's own sources (file sizes and times, forge/data/sources.py): with the corpora's, the
    cache key of the pools. Empty without sources."""
    from forge.data.sources import sources_digest

    return sources_digest(cfg.sources) if cfg.sources else ""


@cached_task(name="build-pools", modules=("forge.data.pools", "forge.data.corpora", "forge.data.schemas",
                                          "forge.data.sources"))
def build_pools_task(*, cfg: PoolsConfig, corpora: str, sources: str = "") -> Pools:
    """Per-domain pools (and the side sets: preferences, code problems, multi-hop questions) from corpora/, with the
    profile's own sources (``pools.sources``) added to their domains."""
    from forge.data.pools import build_pools

    files = {name: str(path) for name, path in build_pools(Workspace.from_env(), cfg).items()}
    return Pools(files=files, digest=files_digest(files))


@cached_task(name="build-mix", modules=("forge.data.mix", "forge.data.jsonl", "forge.chat"))
def build_mix_task(
    *, cfg: MixConfig, pools: Pools, tokenizer: Tokenizer, heldout_rows: int, draft: bool = False
) -> Mix:
    """Sample the SFT mix in target token shares from ``pools``; what reviewers changed in the pools
    (``pools.review``) is recorded in the manifest. A ``draft`` (the mix §2.1.1's refinement starts from) is written
    under the home, not data/: the refined mix is the one versioned."""
    from transformers import AutoTokenizer

    from forge.chat import count_chat_tokens
    from forge.data.mix import build_mix

    ws = Workspace.from_env()
    tok = AutoTokenizer.from_pretrained(tokenizer.tokenizer_dir)
    out_dir = (ws.home / "mix-drafts" if draft else ws.mixes) / cfg.name
    manifest = build_mix({d: Path(pools.files[d]) for d in DOMAINS}, cfg, lambda s: count_chat_tokens(tok, s),
                         out_dir, heldout_rows, review=pools.review)
    return Mix(mix_dir=str(out_dir), manifest=manifest.model_dump(mode="json"))


@uncached_task(name="version-data")
def version_data_task(*, ctx: StageContext, mix: Mix) -> DataMix:
    """``dvc add data`` + ``dvc push`` to the local remote; the ``data`` MLflow run records the md5 DVC gave
    ``data/``, the mix's token shares per domain, what review and refinement changed, and its manifest."""
    from forge.data.versioning import ensure_dvc, version_data

    ws = Workspace.from_env()
    ensure_dvc(ws.root, ws.dvc_remote_url)
    md5 = version_data(ws.root)
    manifest = mix.manifest
    metrics = {}
    for domain, row in manifest["domains"].items():
        metrics |= {f"{domain}_tokens": row["tokens"], f"{domain}_share": row["actual_share"]}
    for step in ("review", "refinement"):
        metrics |= {f"{step}_{k}": v for k, v in (manifest.get(step) or {}).items() if isinstance(v, int | float)}
    with ctx.start_run("data", {STAGE_TAG: "data", DATA_MD5_TAG: md5}) as run:
        mlflow.log_param("mix", Path(mix.mix_dir).name)
        mlflow.log_metrics(metrics)
        mlflow.log_dict(manifest, "manifest.json")
    return DataMix(mix_dir=mix.mix_dir, data_md5=md5, manifest=manifest, run_id=run.info.run_id, metrics=metrics)
