"""``forge sandbox ...`` commands (a typer app mounted by forge/cli.py).

    forge sandbox exec --lang cpp --time-limit 2 --memory-mb 256 --stdin in.txt prog.cpp    # one JSON object
    forge sandbox report                                                                   # what the host allows

Exit status of ``exec``: 0 when the run's status is ``ok``, 1 for any other status, 2 when the sandbox refuses
(no isolation on this host and no ``--allow-weak-isolation``) or the arguments are wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from forge.code.sandbox import SandboxUnavailable, execute, isolation_report

app = typer.Typer(help="Run untrusted code in the sandbox.", no_args_is_help=True)


@app.callback()
def _main() -> None:
    """Sandbox commands."""


def _text(path: Path) -> str:
    """The file as UTF-8 text, or exit 2 naming the file (missing, a folder), or the line and column of the first
    byte that is not UTF-8."""
    from forge.text import NotUTF8Error, decode_utf8

    if not path.is_file():
        typer.echo(f"{path}: {'a folder, not a file' if path.is_dir() else 'no such file'}", err=True)
        raise typer.Exit(2)
    try:
        return decode_utf8(path.read_bytes(), path)
    except NotUTF8Error as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None


@app.command("exec")
def exec_file(
    file: Annotated[Path, typer.Argument(help="Source file to run.")],
    lang: Annotated[str, typer.Option("--lang", help="python or cpp.")] = "python",
    time_limit: Annotated[float, typer.Option("--time-limit", min=0.01, help="Wall-clock seconds.")] = 2.0,
    memory_mb: Annotated[int, typer.Option("--memory-mb", min=16, help="Address-space limit per process.")] = 256,
    stdin: Annotated[Path | None, typer.Option("--stdin", help="A file to give the program as standard input.")] = None,
    max_output_bytes: Annotated[int, typer.Option(help="Cap on stdout and on stderr.")] = 65536,
    allow_weak_isolation: Annotated[bool, typer.Option("--allow-weak-isolation")] = False,
) -> None:
    """Run FILE once in the sandbox and print one JSON object (status, exit_code, stdout, stderr, wall_s,
    cpu_s, max_rss_mb)."""
    if lang not in ("python", "cpp"):
        typer.echo(f"unknown --lang {lang!r}: expected python or cpp", err=True)
        raise typer.Exit(2)
    source, stdin_text = _text(file), _text(stdin) if stdin else None
    try:
        result = execute(
            lang,  # type: ignore[arg-type]
            source,
            time_limit_s=time_limit,
            memory_mb=memory_mb,
            stdin=stdin_text,
            max_output_bytes=max_output_bytes,
            allow_weak_isolation=allow_weak_isolation,
        )
    except SandboxUnavailable as err:
        typer.echo(json.dumps({"status": "refused", "error": str(err)}))
        raise typer.Exit(2) from None
    sys.stdout.write(json.dumps(result.as_dict()) + "\n")
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def report() -> None:
    """Print what isolation this host allows, as JSON."""
    typer.echo(json.dumps(isolation_report().as_dict(), indent=2))


if __name__ == "__main__":
    app()
