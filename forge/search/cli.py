"""Command-line access to the deep-search engine.

    forge tools search "Hans Zimmer film composer" [-k 5]
    forge tools visit "The Holiday" [--goal music]
    forge synth search --n 200 [--profile tiny]        # QAs, trajectories, review store, pools under data/search/
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from forge.workspace import configure_environment

tools_app = typer.Typer(no_args_is_help=True, add_completion=False, help="The offline search tools.")
synth_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Synthesize training data.")
console = Console()


@tools_app.command("search")
def search_cmd(query: str, k: int = typer.Option(5, "-k", help="Number of results."),
               dense: bool = typer.Option(False, help="Re-rank with all-MiniLM-L6-v2.")) -> None:
    """Top-k pages for QUERY (BM25 over every entity page)."""
    from forge.search.tools import SearchTools

    tools = SearchTools.load(configure_environment(), dense=dense)
    console.print(tools.call("search", {"query": query, "k": k}), markup=False, highlight=False)


@tools_app.command("visit")
def visit_cmd(title: str, goal: str = typer.Option(None, help="Only the lines relevant to this.")) -> None:
    """The page titled TITLE."""
    from forge.search.tools import SearchTools

    tools = SearchTools.load(configure_environment())
    args = {"page": title, **({"goal": goal} if goal else {})}
    out = tools.call("visit", args)
    console.print(out, markup=False, highlight=False)
    if out.startswith("Error"):
        raise typer.Exit(1)


@synth_app.command("search")
def synth_search(n: int = typer.Option(200, "--n", help="QA pairs to synthesize."),
                 profile: str = typer.Option("tiny", help="Profile whose deep_search settings apply."),
                 shards: int = typer.Option(None, help="Head-entity shards (default: the profile's)."),
                 agents: str = typer.Option(None, help="Comma-separated scripted agents (default: the profile's).")
                 ) -> None:
    """Deep-search QAs with gold paths, agent trajectories with critic verdicts, review store, SFT pools."""
    ws = configure_environment()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from forge.config import load_profile
    from forge.review.feedback import apply_reviews
    from forge.search.synthesize import merge_shards, synthesize_shard

    cfg = load_profile(profile).deep_search
    update: dict = {"num_questions": n}
    if shards:
        update["num_shards"] = shards
    if agents:
        update["agents"] = [a.strip() for a in agents.split(",") if a.strip()]
    cfg = type(cfg).model_validate({**cfg.model_dump(), **update})  # validated: a typo in --agents is refused
    shard_results = [synthesize_shard(ws, cfg, i) for i in range(cfg.num_shards)]
    out = merge_shards(ws, cfg, shard_results, review=lambda trajs, qas: apply_reviews(trajs, qas,
                                                                                       url=cfg.review_db_url))
    console.print_json(json.dumps(out))
    if out["stats"]["qas"] < n:
        console.print(f"[red]only {out['stats']['qas']} QAs for --n {n}[/red]")
        raise typer.Exit(1)
