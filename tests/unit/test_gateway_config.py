"""`gateway.toml`: what a good file gives, and every problem refused with the file, the key path and what was
expected (a syntax error with the parser's line and column); and the rules for prefixes a gateway checks itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_elicit.gateway import DEFAULT_TIMEOUT, Gateway, Upstream
from mcp_elicit.gateway.config import ConfigError, parse_config, read_config

GOOD = """
[[upstream]]
name = "everything"
command = "npx -y '@modelcontextprotocol/server-everything'"
env = { API_KEY = "k-123" }
cwd = "servers"

[[upstream]]
name = "billing"
url = "https://billing.example/mcp"
prefix = "bill"
era = "2026-07-28"
timeout = 0
sessions = 4

[[upstream]]
name = "files"
command = ["node", "files server.js", "--root", "/srv"]
timeout = 12.5
pass_env = ["MCP_ELICIT_STORE", "MCP_ELICIT_LOG_FORMAT"]
"""


def test_a_good_file_gives_its_upstreams_each_under_its_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "servers").mkdir()
    (tmp_path / "gateway.toml").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    everything, billing, files = read_config(Path("gateway.toml")).upstreams
    assert everything == Upstream(
        "everything",
        command=("npx", "-y", "@modelcontextprotocol/server-everything"),
        env={"API_KEY": "k-123"},
        cwd=str(tmp_path / "servers"),  # relative to the file, and absolute: the same wherever the upstream starts
        prefix="everything",  # the name, by default
    )
    assert billing == Upstream(
        "billing", url="https://billing.example/mcp", prefix="bill", era="2026-07-28", timeout=None, sessions=4
    )
    assert (files.command, files.timeout, files.prefix, files.pass_env) == (
        ("node", "files server.js", "--root", "/srv"),
        12.5,
        "files",
        ("MCP_ELICIT_STORE", "MCP_ELICIT_LOG_FORMAT"),
    )
    assert everything.timeout == DEFAULT_TIMEOUT


def test_the_only_upstream_may_go_without_a_prefix_and_a_file_may_have_none() -> None:
    alone = parse_config('[[upstream]]\nname = "a"\nurl = "http://127.0.0.1:8000/mcp"\nprefix = ""\n', Path("g.toml"))
    assert [upstream.prefix for upstream in alone.upstreams] == [None]
    assert parse_config("# the upstream comes from --upstream\n", Path("g.toml")).upstreams == ()


TABLE = '[[upstream]]\nname = "a"\n'
COMMAND = TABLE + 'command = "node server.js"\n'
SECOND = '[[upstream]]\nname = "b"\nurl = "http://127.0.0.1:8000/mcp"\n'
CREDENTIAL = SECOND + "[upstream.credential]\n"
OAUTH = (
    CREDENTIAL
    + 'kind = "oauth"\nauthorize_url = "https://id.example/authorize"\ntoken_url = "https://id.example/token"\n'
    + 'client_id = "gateway"\n'
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            COMMAND + 'comand = "x"\n',
            "upstream[0].comand: unknown key; expected one of: name, command, url, prefix, era, timeout, sessions, "
            "env, pass_env, cwd, credential",
        ),
        ('servers = ["a"]\n', "servers: unknown key; expected one of: upstream, gate"),
        (
            '[[gate]]\ntool = "get-sum"\nwhne = "a > 1"\n',
            "gate[0].whne: unknown key; expected one of: tool, upstream, "
            "when, editable, message, ttl, grants, approvers, fallback",
        ),
        ('[[gate]]\nwhen = "a > 1"\n', "gate[0].tool: missing; every [[gate]] table has one"),
        (
            '[[gate]]\ntool = "t"\nwhen = "a.b > 1"\n',
            "gate[0].when: 'a.b > 1': attributes and methods are not "
            "available (.b); use a function such as lower(x) (column 1)",
        ),
        (
            '[[gate]]\ntool = "t"\ngrants = { sesion = "1h" }\n',
            "gate[0].grants.sesion: unknown key; expected one of: session, always, scope",
        ),
        (
            '[[gate]]\ntool = "t"\napprovers = { roles = ["ops"], quorum = "2" }\n',
            "gate[0].approvers.quorum: Input should be a valid integer",
        ),
        ("gate = 3\n", "gate: expected [[gate]] tables (an array of tables)"),
        ("upstream = 1\n", "upstream: expected [[upstream]] tables (an array of tables)"),
        ("upstream = [1]\n", "upstream[0]: expected a table"),
        (
            'command = "x"\n[[upstream]]\nname = "a"\nsessions = true\n',
            "upstream[0].sessions: expected a valid integer\n{file}: command: unknown key; expected one of: upstream, "
            "gate",
        ),
        (
            '[[upstream]]\ncommand = "x"\n',
            "upstream[0].name: missing; every [[upstream]] table has one (1-64 letters, digits and _.-, starting with "
            "a letter or digit)",
        ),
        (
            '[[upstream]]\nname = "my server"\ncommand = "x"\n',
            "upstream[0].name: expected 1-64 letters, digits and _.-, starting with a letter or digit",
        ),
        (TABLE, "upstream[0]: expected command (a command line) or url (an http(s) URL), and it has neither"),
        (
            COMMAND + 'url = "http://127.0.0.1:8000/mcp"\n',
            "upstream[0]: expected command (a command line) or url (an http(s) URL), not both",
        ),
        (TABLE + "command = 7\n", "upstream[0].command: expected a command line (a string) or an array of strings"),
        (
            TABLE + 'command = ["node", 7]\n',
            "upstream[0].command: expected a command line (a string) or an array of strings",
        ),
        (TABLE + 'command = "  "\n', "upstream[0].command: expected a command, not an empty one"),
        (
            TABLE + 'command = "node \'server.js"\n',
            "upstream[0].command: expected a command line as a shell reads it (No closing quotation)",
        ),
        (
            TABLE + 'url = "ftp://files.example/mcp"\n',
            "upstream[0].url: expected an http:// or https:// URL, not one with the scheme 'ftp'",
        ),
        (TABLE + 'url = "files.example"\n', "upstream[0].url: expected an http:// or https:// URL"),
        (COMMAND + 'era = "2025-11-25"\n', "upstream[0].era: expected 'auto', 'legacy' or '2026-07-28'"),
        (COMMAND + 'timeout = "60"\n', "upstream[0].timeout: expected a valid number"),
        (COMMAND + "timeout = -1\n", "upstream[0].timeout: expected a number of at least 0"),
        (COMMAND + "sessions = 0\n", "upstream[0].sessions: expected a number of at least 1"),
        (COMMAND + "sessions = 1.5\n", "upstream[0].sessions: expected a valid integer"),
        (COMMAND + "env = { PORT = 8080 }\n", "upstream[0].env.PORT: expected a valid string"),
        (COMMAND + 'pass_env = "MCP_ELICIT_STORE"\n', "upstream[0].pass_env: expected a valid list"),
        (COMMAND + 'pass_env = ["MCP_ELICIT_STORE", 7]\n', "upstream[0].pass_env[1]: expected a valid string"),
        (
            COMMAND + 'pass_env = ["MCP_ELICIT_STORE", "MCP-ELICIT-TOKEN"]\n',
            "upstream[0].pass_env[1]: expected a variable's name: letters, digits and _, not starting with a digit, "
            "not 'MCP-ELICIT-TOKEN'",
        ),
        (
            COMMAND + 'pass_env = ["MCP_ELICIT_VAULT_KEYS"]\n',
            "upstream[0].pass_env[0]: expected a variable the gateway holds no secret in; MCP_ELICIT_VAULT_KEYS "
            "holds one of its secrets, which no upstream is given",
        ),
        (
            COMMAND + 'pass_env = ["MCP_ELICIT_STORE", "MCP_ELICIT_IDP_CLIENT_SECRET_FILE"]\n',
            "upstream[0].pass_env[1]: expected a variable the gateway holds no secret in; "
            "MCP_ELICIT_IDP_CLIENT_SECRET_FILE holds one of its secrets, which no upstream is given",
        ),
        (
            COMMAND + 'pass_env = ["EXAMPLE_SECRET"]\n' + OAUTH + 'client_secret_env = "EXAMPLE_SECRET"\n',
            "upstream[0].pass_env[0]: expected a variable the gateway holds no secret in; EXAMPLE_SECRET holds the "
            "client secret of upstream[1].credential (client_secret_env), which no upstream is given",
        ),
        (
            SECOND + 'pass_env = ["MCP_ELICIT_STORE"]\n',
            "upstream[0].pass_env: expected with command only: an upstream given by url is not started here",
        ),
        (COMMAND + 'cwd = "no-such-dir"\n', "upstream[0].cwd: expected a directory, and '{dir}/no-such-dir' is none"),
        (
            SECOND + 'cwd = "."\n',
            "upstream[0].cwd: expected with command only: an upstream given by url is not started here",
        ),
        (
            COMMAND + 'prefix = "a b"\n',
            "upstream[0].prefix: expected 1-64 letters, digits and _.-, starting with a letter or digit",
        ),
        (
            COMMAND + 'prefix = ""\n' + SECOND,
            'upstream[0].prefix: expected a prefix: "" (none) is for the only upstream of a file',
        ),
        (COMMAND + SECOND + SECOND, "upstream[2].name: expected a name of its own; upstream[1] is 'b' too"),
        (
            CREDENTIAL + 'header = "X-Key"\n',
            "upstream[0].credential.kind: missing; every [upstream.credential] table has one",
        ),
        (CREDENTIAL + 'kind = "password"\n', "upstream[0].credential.kind: expected 'api_key' or 'oauth'"),
        (
            CREDENTIAL + 'kind = "api_key"\nhedaer = "X-Key"\n',
            "upstream[0].credential.hedaer: unknown key; expected one of: kind, title, header, env, value, "
            "authorize_url, token_url, client_id, client_secret_env, scope",
        ),
        (
            OAUTH + 'client_secret = "s3cret"\n',
            "upstream[0].credential.client_secret: not a key: the secret stays out of the file; client_secret_env "
            "names the variable holding it",
        ),
        (OAUTH, 'upstream[0].credential: expected client_secret_env with kind = "oauth"'),
        (
            OAUTH.replace("https://id.example/token", "http://id.example/token") + 'client_secret_env = "S"\n',
            "upstream[0].credential.token_url: expected an https:// URL (plain http on loopback only), not "
            "'http://id.example/token'",
        ),
        (
            CREDENTIAL + 'kind = "api_key"\nscope = "repo"\n',
            'upstream[0].credential: expected no scope with kind = "api_key" (they are for "oauth")',
        ),
        (
            CREDENTIAL + 'kind = "api_key"\nvalue = "Bearer secret"\n',
            "upstream[0].credential.value: expected one {{secret}} where the secret goes, on one line, "
            "without control characters",
        ),
        (
            CREDENTIAL + 'kind = "api_key"\nheader = "X Key"\n',
            "upstream[0].credential.header: expected a header's name: letters, digits and !#$%&'*+.^_`|~-",
        ),
        (
            CREDENTIAL + 'kind = "api_key"\nenv = "TOKEN"\n',
            "upstream[0].credential.env: expected with command only: an HTTP upstream's credential goes in header",
        ),
        (
            COMMAND + '[upstream.credential]\nkind = "api_key"\nenv = "1TOKEN"\n',
            "upstream[0].credential.env: expected a variable's name: letters, digits and _, not starting with a digit",
        ),
        (
            COMMAND + '[upstream.credential]\nkind = "api_key"\n',
            "upstream[0].credential.env: missing; a command's credential goes in the variable env names",
        ),
        (
            COMMAND + '[upstream.credential]\nkind = "api_key"\nenv = "T"\nheader = "X-Key"\n',
            "upstream[0].credential.header: expected with url only: a command's credential goes in env",
        ),
        (
            COMMAND + SECOND + 'prefix = "a_b"\n',
            "upstream[1].prefix: expected a prefix of its own; 'a_b' and the prefix 'a' of upstream[0] could both "
            "begin a name (a_…)",
        ),
    ],
)
def test_a_problem_names_the_file_the_key_path_and_what_was_expected(tmp_path: Path, text: str, problem: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_config(config)
    assert str(refused.value) == f"{config}: {problem.format(dir=tmp_path, file=config)}"


def test_a_file_that_is_not_toml_is_refused_at_the_line_and_column_the_parser_gives(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[[upstream]]\nname = "a"\ncommand = node server.js\n')
    with pytest.raises(ConfigError) as refused:
        read_config(config)
    assert str(refused.value) == f"{config}:3:11: not valid TOML: invalid value"


def test_a_file_that_cannot_be_read_or_is_not_text_is_refused_saying_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        read_config(tmp_path / "gateway.toml")
    assert str(missing.value) == f"{tmp_path / 'gateway.toml'}: cannot be read: No such file or directory"
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = '\xff'\n")
    with pytest.raises(ConfigError) as undecoded:
        read_config(binary)
    assert str(undecoded.value) == f"{binary}: not UTF-8 text, which a TOML file is"


def test_a_gateway_refuses_prefixes_a_name_could_begin_with_both_and_an_upstream_without_one() -> None:
    first = Upstream("a", url="http://127.0.0.1:8001/mcp", prefix="a")
    with pytest.raises(ValueError) as clash:
        Gateway([first, Upstream("b", url="http://127.0.0.1:8002/mcp", prefix="a_b")])
    assert str(clash.value) == "upstreams 'a' and 'b' have the prefixes 'a' and 'a_b': a name could belong to either"
    with pytest.raises(ValueError) as unprefixed:
        Gateway([first, Upstream("b", url="http://127.0.0.1:8002/mcp")])
    assert str(unprefixed.value) == "upstream 'b' has no prefix; several upstreams need one each"
    with pytest.raises(ValueError) as malformed:
        Gateway(Upstream("c", url="http://127.0.0.1:8003/mcp", prefix="c d"))
    assert str(malformed.value) == (
        "upstream 'c': a prefix is 1-64 letters, digits and _.-, starting with a letter or digit, not 'c d'"
    )
    assert Gateway([first, Upstream("b", url="http://127.0.0.1:8002/mcp", prefix="ab")]).routes is not None
