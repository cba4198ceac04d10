"""``forge eval ...`` commands (a typer app mounted by forge/cli.py).

    forge eval score --suite math preds.jsonl                  # verdicts to preds.scored.jsonl, summary printed
    forge eval score --suite tool_use preds.jsonl --out verdicts.jsonl
    python -m forge.evals.cli score --suite science FILE       # the same, without the top-level CLI

Row formats per suite: forge/evals/scoring.py. Writes one JSON line per scored row (``{"line", "correct",
"reason", "extracted"}``). Exit status: 0 when the file was scored, whatever the accuracy (a bad line is reported
and skipped); 2 when the suite is unknown, the file is missing, or no line of it could be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from forge.data.jsonl import write_jsonl
from forge.evals.math import DEFAULT_TIME_LIMIT
from forge.evals.scoring import SCORERS, score_file

app = typer.Typer(help="Evaluation: score predictions.", no_args_is_help=True)
console = Console()
SHOW_BAD = 20  # bad lines printed at most; the count is always in the summary


@app.callback()
def _main() -> None:
    """Evaluation commands (a callback keeps `score` a named subcommand while it is the only one)."""


def default_out(file: Path) -> Path:
    """``preds.jsonl`` → ``preds.scored.jsonl`` (``.jsonl.gz`` too), beside the input."""
    name = file.name
    for suffix in (".jsonl.gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            return file.with_name(name.removesuffix(suffix) + ".scored.jsonl")
    return file.with_name(name + ".scored.jsonl")


@app.command()
def score(
    file: Annotated[Path, typer.Argument(help="A .jsonl file of predictions (rows: forge/evals/scoring.py).")],
    suite: Annotated[str, typer.Option("--suite", "-s", help=f"Scorer: {', '.join(SCORERS)}.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Verdicts (default: FILE.scored.jsonl).")] = None,
    time_limit: Annotated[
        float, typer.Option(help="Seconds per math row before it is a timeout.")
    ] = DEFAULT_TIME_LIMIT,
) -> None:
    """Score a file of predictions: one verdict per row to --out, the summary printed."""
    if suite not in SCORERS:
        console.print(f"[red]unknown suite {suite!r}[/red]; suites: {', '.join(SCORERS)}")
        raise typer.Exit(2)
    if not file.is_file():
        console.print(f"[red]{file}: no such file[/red]")
        raise typer.Exit(2)
    rows, summary = score_file(suite, file, time_limit=time_limit)
    for line in summary["bad_lines"][:SHOW_BAD]:
        # One line per problem, never wrapped: `file:line: field: reason` stays greppable.
        console.print(Text(line, style="yellow"), soft_wrap=True)
    if len(summary["bad_lines"]) > SHOW_BAD:
        console.print(f"... and {len(summary['bad_lines']) - SHOW_BAD} more problems")
    if not rows:
        console.print(Text(f"{file}: no row could be scored", style="red"), soft_wrap=True)
        raise typer.Exit(2)
    target = out or default_out(file)
    write_jsonl(target, rows)
    table = Table(title=f"{file} ({suite})")
    for col in ("rows", "correct", "accuracy", "bad lines"):
        table.add_column(col, justify="right")
    table.add_row(str(summary["n"]), str(summary["correct"]), f"{summary['accuracy']:.2%}", str(summary["bad_rows"]))
    console.print(table)
    console.print(f"verdicts written to {target}", soft_wrap=True)


if __name__ == "__main__":
    app()
