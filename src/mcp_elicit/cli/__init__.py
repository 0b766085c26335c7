"""The `mcp-elicit` command line."""

import typer

from mcp_elicit.cli import call, decisions, demo, doctor, serve

app = typer.Typer(
    name="mcp-elicit",
    help="Durable, bound and audited MCP elicitation.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(decisions.app, name="decisions")
app.command("serve")(serve.serve)
app.command("call")(call.call)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)


def main() -> None:
    app()


__all__ = ["app", "main"]
