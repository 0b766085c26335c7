"""The `mcp-elicit` command line."""

from importlib.metadata import version
from typing import Annotated

import typer

from mcp_elicit.cli import call, decisions, demo, doctor, login, serve

app = typer.Typer(
    name="mcp-elicit",
    help="Durable, bound and audited MCP elicitation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(decisions.app, name="decisions")
app.command("serve")(serve.serve)
app.command("call")(call.call)
app.command("login")(login.login)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"mcp-elicit {version('mcp-elicit')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Durable, bound and audited MCP elicitation."""


def main() -> None:
    app()


__all__ = ["app", "main"]
