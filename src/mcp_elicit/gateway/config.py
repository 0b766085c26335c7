"""The gateway's configuration file (`gateway.toml`): `read_config(path)` gives a `GatewayConfig`, or a
`ConfigError` that names the file, the key path (`upstream[1].url`, tables counted from 0) and what was expected
there, every type problem at once, a line each; for a file that is not TOML, the line and column the parser
gives.

Strict on purpose: a key the model does not know is refused, so that a typo never becomes a default silently,
and values keep their TOML types (`timeout = "60"` is refused, not read as a number). The file holds the tables
the gateway reads, `[[upstream]]` (the servers relayed) and `[[gate]]` (approval gates per upstream tool,
`mcp_elicit.gateway.gates`); tables added later come as new optional ones, so that a file written now stays valid.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import ErrorDetails

from mcp_elicit.gateway.credentials import Credential
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.gateway.routing import PREFIX, PREFIX_RULE, SEPARATOR, clashing
from mcp_elicit.gateway.upstream import DEFAULT_TIMEOUT, HELD_SECRETS, Upstream, UpstreamEra

__all__ = ["CONFIG_ENV", "ConfigError", "GateTable", "GatewayConfig", "UpstreamTable", "parse_config", "read_config"]

CONFIG_ENV: Final = "MCP_ELICIT_GATEWAY_CONFIG"
_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOML_PLACE = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)$")


class ConfigError(ValueError):
    """A configuration file that cannot be used: the message names the file, where in it, and what was wanted."""


def _command(value: object) -> object:
    """A command line (a string) or an argv (an array of strings), as it is; anything else refused saying so."""
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(part, str) for part in value)):
        return value
    raise ValueError("expected a command line (a string) or an array of strings")


class UpstreamTable(BaseModel):
    """One `[[upstream]]` table: a server the gateway relays, under its prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=f"^{PREFIX.pattern}$")]
    """How errors and logs call it, unique in the file; the default prefix."""
    command: Annotated[str | list[str] | None, BeforeValidator(_command)] = None
    """A stdio server's command line, split as a POSIX shell splits it, or its argv as an array."""
    url: str | None = None
    """A streamable HTTP server's http(s) URL."""
    prefix: str | None = None
    """What its tool and prompt names and resource URIs carry (default: the name); `""` for the only upstream
    of a file, relayed without one."""
    era: UpstreamEra = "auto"
    timeout: Annotated[float, Field(ge=0)] = DEFAULT_TIMEOUT
    """Seconds a request may go without an answer or progress; 0 for no limit."""
    sessions: Annotated[int, Field(ge=1)] | None = None
    env: dict[str, str] | None = None
    """Variables a stdio server gets on top of what it inherits of the gateway's environment (`upstream.inherited`)."""
    pass_env: list[str] | None = None
    """Variables of the gateway's environment a stdio server inherits despite their `MCP_ELICIT_` names; none that
    holds a secret of the gateway."""
    cwd: str | None = None
    """The directory a stdio server starts in; a relative one is taken from the config file's directory."""
    credential: Credential | None = None
    """`[upstream.credential]`: what each signed-in person connects before their calls reach it."""

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.command is None) == (self.url is None):
            said = "not both" if self.command is not None else "and it has neither"
            raise ValueError(f"expected command (a command line) or url (an http(s) URL), {said}")
        return self

    def upstream(self, directory: Path, *, sole: bool) -> Upstream:
        """The upstream this table describes (`directory`: the config file's); `_Problem` naming a key if it
        cannot work."""
        if self.prefix == "" and not sole:
            raise _Problem("prefix", 'expected a prefix: "" (none) is for the only upstream of a file')
        if self.prefix and not PREFIX.fullmatch(self.prefix):
            raise _Problem("prefix", f"expected {PREFIX_RULE}")
        argv: tuple[str, ...] = ()
        if isinstance(self.command, str):
            try:
                argv = tuple(shlex.split(self.command))
            except ValueError as error:
                raise _Problem("command", f"expected a command line as a shell reads it ({error})") from None
        elif self.command is not None:
            argv = tuple(self.command)
        if self.command is not None and (not argv or not argv[0]):
            raise _Problem("command", "expected a command, not an empty one")
        if self.url is not None:
            scheme, sep, rest = self.url.partition("://")
            if scheme not in ("http", "https") or not sep or not rest:
                found = f", not one with the scheme {scheme!r}" if sep else ""
                raise _Problem("url", f"expected an http:// or https:// URL{found}")
            for key in ("env", "pass_env", "cwd"):
                if getattr(self, key) is not None:
                    raise _Problem(key, "expected with command only: an upstream given by url is not started here")
        if self.credential is not None:
            problem = self.credential.carried(command=self.command is not None)
            if problem is not None:
                key, _, expected = problem.partition(": ")
                raise _Problem(f"credential.{key}", expected)
        for position, name in enumerate(self.pass_env or ()):
            if not _VARIABLE.fullmatch(name):
                raise _Problem(f"pass_env[{position}]", f"{_VARIABLE_RULE}, not {name!r}")
            if name.upper() in HELD_SECRETS:
                raise _Problem(
                    f"pass_env[{position}]",
                    f"expected a variable the gateway holds no secret in; {name} holds one of its secrets, which no "
                    "upstream is given",
                )
        cwd = None
        if self.cwd is not None:
            place = directory / Path(self.cwd).expanduser()
            if not place.is_dir():
                raise _Problem("cwd", f"expected a directory, and {str(place)!r} is none")
            cwd = str(place)
        return Upstream(
            self.name,
            command=argv,
            url=self.url,
            era=self.era,
            timeout=self.timeout or None,
            sessions=self.sessions,
            env=self.env,
            pass_env=tuple(self.pass_env or ()),
            cwd=cwd,
            prefix=(self.name if self.prefix is None else self.prefix) or None,
            credential=self.credential,
        )


class GatewayConfig(BaseModel):
    """The whole file: its `[[upstream]]` tables (none: the upstream comes from the command line) and its `[[gate]]`
    tables."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    upstream: list[UpstreamTable] = Field(default_factory=list)
    gate: list[GateTable] = Field(default_factory=list)

    _upstreams: list[Upstream] = PrivateAttr(default_factory=list)

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """The upstreams of the tables, checked together: names unique, prefixes clashing with none."""
        return tuple(self._upstreams)


def read_config(path: Path) -> GatewayConfig:
    """The configuration in the file `path`; `ConfigError` naming the file for anything amiss."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, which a TOML file is") from None
    return parse_config(text, path)


def parse_config(text: str, source: Path) -> GatewayConfig:
    """The configuration in `text`, read from the file `source` (whose directory relative paths start from)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        said = str(error)
        place = _TOML_PLACE.search(said)
        where = f"{source}:{place[1]}:{place[2]}" if place and place[1] else str(source)
        said = _TOML_PLACE.sub("", said)
        raise ConfigError(f"{where}: not valid TOML: {said[:1].lower()}{said[1:]}") from None
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as invalid:
        raise ConfigError(
            "\n".join(f"{source}: {_said(error)}" for error in invalid.errors(include_url=False))
        ) from None
    directory = source.absolute().parent
    for index, table in enumerate(config.upstream):
        path = f"upstream[{index}]"
        try:
            upstream = table.upstream(directory, sole=len(config.upstream) == 1)
        except _Problem as problem:
            raise ConfigError(f"{source}: {path}.{problem.key}: {problem}") from None
        for other, earlier in enumerate(config.upstreams):
            if earlier.name == upstream.name:
                raise ConfigError(
                    f"{source}: {path}.name: expected a name of its own; upstream[{other}] is {upstream.name!r} too"
                )
            if earlier.prefix and upstream.prefix and clashing(earlier.prefix, upstream.prefix):
                raise ConfigError(
                    f"{source}: {path}.prefix: expected a prefix of its own; {upstream.prefix!r} and the prefix "
                    f"{earlier.prefix!r} of upstream[{other}] could both begin a name ({earlier.prefix}{SEPARATOR}…)"
                )
        config._upstreams.append(upstream)
    client_secrets = {
        table.credential.client_secret_env: index
        for index, table in enumerate(config.upstream)
        if table.credential is not None and table.credential.client_secret_env is not None
    }
    for index, table in enumerate(config.upstream):
        for position, name in enumerate(table.pass_env or ()):
            if name in client_secrets:
                raise ConfigError(
                    f"{source}: upstream[{index}].pass_env[{position}]: expected a variable the gateway holds no "
                    f"secret in; {name} holds the client secret of upstream[{client_secrets[name]}].credential "
                    "(client_secret_env), which no upstream is given"
                )
    return config


_VARIABLE_RULE: Final = "expected a variable's name: letters, digits and _, not starting with a digit"
_PATTERNS: Final = {
    "header": "expected a header's name: letters, digits and !#$%&'*+.^_`|~-",
    "env": _VARIABLE_RULE,
    "client_secret_env": _VARIABLE_RULE,
}
"""What a key of `[upstream.credential]` holds, said when its value does not fit (every other is a name or prefix)."""


class _Problem(Exception):
    """What is wrong with one key of an `[[upstream]]` table, found once its types were right."""

    def __init__(self, key: str, expected: str) -> None:
        super().__init__(expected)
        self.key = key


def _said(error: ErrorDetails) -> str:
    """One of pydantic's errors as a key path and what was expected there."""
    location: Sequence[int | str] = error["loc"]
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    kind = error["type"]
    kinds: dict[str, Any] = {"upstream": UpstreamTable, "gate": GateTable}
    table: Any = kinds.get(str(location[0]), GatewayConfig) if len(location) > 2 else GatewayConfig
    inner = table.model_fields.get(str(location[2])) if len(location) > 3 else None
    if inner is not None:  # a table inside a table: [upstream.credential], a gate's grants or approvers
        table = next(arg for arg in getattr(inner.annotation, "__args__", (inner.annotation,)) if arg is not type(None))
    if kind == "extra_forbidden" and table is Credential and location[-1] == "client_secret":
        return f"{path}: not a key: the secret stays out of the file; client_secret_env names the variable holding it"
    if kind == "extra_forbidden":
        return f"{path}: unknown key; expected one of: {', '.join(table.model_fields)}"
    if kind == "missing":
        if len(location) > 3:
            return f"{path}: missing; every [{location[0]}.{location[2]}] table has one"
        if location[:1] == ("upstream",):
            return f"{path}: missing; every [[upstream]] table has one ({PREFIX_RULE})"
        return f"{path}: missing; every [[{location[0]}]] table has one"
    if path in kinds and kind == "list_type":
        return f"{path}: expected [[{path}]] tables (an array of tables)"
    if kind in ("model_type", "dict_type") and len(location) == 2:
        return f"{path}: expected a table"
    message = str(error.get("ctx", {}).get("error", error["msg"]))
    if kind == "string_pattern_mismatch":
        message = _PATTERNS.get(str(location[-1]), f"expected {PREFIX_RULE}")
    elif kind == "greater_than_equal":
        message = f"expected a number of at least {error.get('ctx', {}).get('ge'):g}"
    elif location[:1] == ("gate",):
        message = message.removeprefix("Value error, ")
    elif not message.startswith("expected"):
        message = "expected " + message.removeprefix("Input should be ").removeprefix("Value error, ")
    return f"{path}: {message}"
