"""``forge data ...`` commands (a typer app mounted by forge/cli.py).

    forge data validate data/pools/stem.jsonl --schema chat [--quarantine .forge/quarantine]
    python -m forge.data.cli validate FILE --schema NAME       # the same, without the top-level CLI

Exit status: 0 when every row is valid, 1 when any row is bad, 2 for a usage error (unknown schema, no file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from forge.data.jsonl import read_jsonl
from forge.data.schemas import SCHEMAS

app = typer.Typer(help="Data files: validate, inspect.", no_args_is_help=True)
console = Console()


@app.callback()
def _main() -> None:
    """Data commands (a callback keeps `validate` a named subcommand even while it is the only one)."""


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="A .jsonl or .jsonl.gz file.")],
    schema: Annotated[str, typer.Option("--schema", "-s", help=f"Row schema: {', '.join(SCHEMAS)}.")],
    quarantine: Annotated[Path | None, typer.Option("--quarantine", "-q", help="Write bad lines here.")] = None,
    show: Annotated[int, typer.Option(help="Bad lines to print at most.")] = 20,
) -> None:
    """Validate every line of FILE against a row schema; print a report; exit 1 if any line is bad."""
    if schema not in SCHEMAS:
        console.print(f"[red]unknown schema {schema!r}[/red]; known schemas: {', '.join(sorted(SCHEMAS))}")
        raise typer.Exit(2)
    if not file.exists():
        console.print(Text(f"{file}: no such file", style="red"), soft_wrap=True)
        raise typer.Exit(2)
    res = read_jsonl(file, SCHEMAS[schema], quarantine_dir=quarantine)
    if not res.n_total:
        console.print(Text(f"{file}: no rows (the file is empty or blank)", style="red"), soft_wrap=True)
        raise typer.Exit(1)
    table = Table(title=f"{file.name} ({schema})")
    for col in ("lines", "good", "bad", "bad share"):
        table.add_column(col, justify="right")
    table.add_row(str(res.n_total), str(res.n_good), str(res.n_bad), f"{res.bad_ratio:.2%}")
    console.print(table)
    for b in res.bad[:show]:
        # One line per problem, never wrapped: `file:line: field: reason` stays greppable.
        console.print(Text(str(b), style="yellow"), soft_wrap=True)
    if len(res.bad) > show:
        console.print(f"... and {len(res.bad) - show} more problems")
    if res.quarantine_file:
        console.print(f"bad lines quarantined to {res.quarantine_file}", soft_wrap=True)
    raise typer.Exit(1 if res.n_bad else 0)


if __name__ == "__main__":
    app()
