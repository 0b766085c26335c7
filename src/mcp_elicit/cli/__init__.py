"""The `mcp-elicit` command line.

Each command's module is imported only when that command runs (or when help lists them all): `--version`
and `decisions ls` must not pay for the MCP SDK, the web layer, telemetry or the PostgreSQL driver that
`serve`, `call` and `demo` need.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from importlib.metadata import version
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click import Command  # the click typer builds on (its own copy in recent versions)

_COMMANDS = ("serve", "gateway", "call", "login", "demo", "doctor", "decisions", "grants", "audit", "install")
"""Each command's name, that of its module in `mcp_elicit.cli` and of its function there (`decisions` is the
module's `app`, a group of its own, and so are `grants` and `audit`), in the order help lists them."""


def _load(name: str) -> Command:
    module = importlib.import_module(f"mcp_elicit.cli.{name}")
    holder = typer.Typer()
    if name in ("decisions", "grants", "audit"):
        holder.add_typer(module.app, name=name)
    else:
        holder.command(name)(getattr(module, name))
    return typer.main.get_group(holder).commands[name]


class _Commands(MutableMapping[str, "Command"]):
    """The group's commands by name: every name known from the start, each command built on first use."""

    def __init__(self) -> None:
        self._built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            if name not in _COMMANDS:
                raise KeyError(name)
            self._built[name] = _load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_COMMANDS, *self._built]))

    def __len__(self) -> int:
        return len(set(_COMMANDS) | set(self._built))


class _LazyGroup(TyperGroup):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()


app = typer.Typer(
    name="mcp-elicit",
    help="Durable, bound and audited MCP elicitation.",
    cls=_LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


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
