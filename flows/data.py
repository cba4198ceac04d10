"""Data flow: per-domain pools from corpora/, the SFT mix in target token shares, then DVC versioning."""

from __future__ import annotations

import mlflow
from prefect import flow

from flows._progress import run_stage
from flows.search import synthesize_search
from forge.config import RecipeConfig
from forge.hashing import value_digest
from registry.tracking import DATA_MD5_TAG, STAGE_TAG, start_stage_run
from tasks.data import build_mix_task, build_pools_task, digest_corpora, version_data_task


@flow(name="data")
def data_flow(
    config: RecipeConfig, tokenizer_dir: str, parent_run_id: str | None = None, lineage: dict | None = None
) -> dict:
    corpora = digest_corpora()
    pools = run_stage("pools", build_pools_task, config.pools, corpora)
    pools_digest = value_digest(config.pools, corpora)
    review = None  # what reviewers' verdicts changed in the pools (recorded in the mix's manifest)
    if config.deep_search.enabled:  # forge.search replaces the pools' FB15k-237 stand-ins (issue 3)
        search = synthesize_search(config.deep_search, pools, pools_digest, parent_run_id=parent_run_id, lineage=lineage)
        review = search["stats"].get("review")
        pools = {**pools, **search["pools"]}
        pools_digest = value_digest(config.pools, corpora, config.deep_search, review)  # new verdicts → new mix
    mix = run_stage(
        "mix",
        build_mix_task,
        config.mix,
        pools,
        pools_digest,
        tokenizer_dir,
        config.eval.heldout_rows,
        review,
    )
    md5 = run_stage("dvc", version_data_task)
    with start_stage_run(
        "data", parent_run_id=parent_run_id, tags={**(lineage or {}), STAGE_TAG: "data", DATA_MD5_TAG: md5}
    ):
        mlflow.log_param("mix", config.mix.name)
        for domain, row in mix["manifest"]["domains"].items():
            mlflow.log_metrics({f"{domain}_tokens": row["tokens"], f"{domain}_share": row["actual_share"]})
        mlflow.log_dict(mix["manifest"], "manifest.json")
        if review:
            mlflow.log_metrics({f"review_{k}": v for k, v in review.items() if isinstance(v, int | float)})
    return {"mix_dir": mix["mix_dir"], "data_md5": md5, "manifest": mix["manifest"]}
