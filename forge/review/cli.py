"""``forge review ...``: accounts, migrations and agreement of the review store (a typer app mounted by forge/cli.py).

    forge review add-user alice --role admin          # asks for the password twice (or --password-stdin)
    forge review migrate                              # upgrade the store to the newest schema (open_store does too)
    forge review assign alice bob --overlap 0.2       # spread unassigned trajectories; 20% to two reviewers
    forge review agreement                            # critic-vs-human per dimension, human-vs-human kappa

The store is ``$FORGE_REVIEW_DB_URL`` when set (PostgreSQL: ``postgresql+psycopg2://user@host/db``), else SQLite
under ``$FORGE_HOME/review/``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from forge.review.repository import open_workspace_store, session_scope

app = typer.Typer(help="Review store: users, migrations, assignments, agreement.", no_args_is_help=True)
console = Console()


@app.callback()
def _main() -> None:
    """Review store commands."""


@app.command("add-user")
def add_user(
    name: Annotated[str, typer.Argument(help="Login name.")],
    role: Annotated[str, typer.Option(help="reviewer or admin (only admins promote models).")] = "reviewer",
    email: Annotated[str | None, typer.Option(help="E-mail an OIDC login (st.login) is matched by.")] = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
    replace: Annotated[bool, typer.Option(help="Change the password/role of an existing user.")] = False,
) -> None:
    """Create a login (argon2-hashed password) for the review dashboard."""
    from forge.review.auth import UserError, create_user

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    engine = open_workspace_store()
    try:
        with session_scope(engine) as s:
            user = create_user(s, name, password=password, role=role, email=email, replace=replace, actor="cli")
            console.print(f"user [bold]{user.name}[/] ({user.role}) saved in {engine.url.render_as_string()}")
    except UserError as err:
        console.print(f"[red]error:[/] {err}")
        raise typer.Exit(2) from err
    finally:
        engine.dispose()


@app.command("migrate")
def migrate_cmd() -> None:
    """Upgrade the review store's schema to the newest migration (every open does this too; this says where)."""
    from alembic.runtime.migration import MigrationContext

    engine = open_workspace_store()
    with engine.connect() as conn:
        revision = MigrationContext.configure(conn).get_current_revision()
    console.print(f"review store at revision {revision} ({engine.url.render_as_string()})")
    engine.dispose()


@app.command("assign")
def assign(
    reviewers: Annotated[list[str], typer.Argument(help="Reviewers to spread the unassigned trajectories over.")],
    overlap: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share judged by two reviewers.")] = 0.2,
    seed: Annotated[int, typer.Option(help="Which trajectories get the overlap.")] = 0,
) -> None:
    """Assign every unassigned trajectory to a reviewer; a share OVERLAP to two (for human-vs-human agreement)."""
    from forge.review.views import assign_overlap

    engine = open_workspace_store()
    with session_scope(engine) as s:
        made = assign_overlap(s, reviewers, overlap=overlap, seed=seed, actor="cli")
    console.print(f"{made} assignments made")
    engine.dispose()


@app.command("agreement")
def agreement() -> None:
    """Critic-vs-human agreement per dimension and human-vs-human Cohen's kappa."""
    from forge.review.agreement import critic_agreement, human_agreement, human_pair_agreement

    engine = open_workspace_store()
    with session_scope(engine) as s:
        table = Table("comparison", "n", "agreement", "Cohen's κ")
        rows = [(f"critic vs human: {d}", st) for d, st in critic_agreement(s).items()]
        rows.append(("human vs human (pooled)", human_agreement(s)))
        rows += [(f"{a} vs {b}", st) for (a, b), st in human_pair_agreement(s).items()]
        for label, st in rows:
            table.add_row(label, str(st.n), "—" if st.n == 0 else f"{st.agreement:.1%}",
                          "—" if st.kappa is None else f"{st.kappa:.3f}")
    console.print(table)
    engine.dispose()


LOOPBACK_NAMES = ("localhost",)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command("serve")
def serve(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless --allow-remote).")] = "127.0.0.1",
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote",
        help="Bind a non-loopback address. Off by default: the dashboard speaks plain HTTP, so passwords and "
             "verdicts would cross the network unencrypted; put it behind a TLS proxy (or use SSH port "
             "forwarding) instead of exposing it.")] = False,
) -> None:
    """Start the review dashboard (Streamlit) on HOST:PORT; Ctrl-C stops it."""
    import os

    from forge.workspace import REPO_ROOT, configure_environment

    if not _is_loopback(host) and not allow_remote:
        console.print(f"[red]error:[/] {host} is not a loopback address; the dashboard serves plain HTTP, so it "
                      "binds 127.0.0.1 unless you pass --allow-remote (see --help)")
        raise typer.Exit(2)
    configure_environment()
    # The app imports this checkout's packages (`streamlit run` only puts dashboards/ on sys.path).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                                      if p)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "dashboards" / "app.py"),
           "--server.address", host, "--server.port", str(port), "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--client.toolbarMode", "minimal"]
    console.print(f"review dashboard on http://{host}:{port} (store: {_store_label()})", soft_wrap=True)
    sys.stdout.flush()
    os.chdir(REPO_ROOT)
    os.execve(sys.executable, cmd, env)  # Streamlit takes over this process: Ctrl-C and SIGTERM reach it directly


def _store_label() -> str:
    import os

    url = os.environ.get("FORGE_REVIEW_DB_URL")
    if url:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    from forge.workspace import Workspace

    return str(Workspace.from_env().home / "review" / "review.db")
