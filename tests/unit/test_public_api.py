"""The top-level face of `mcp_elicit`: the user nouns, resolved lazily, and nothing heavy on `import mcp_elicit`."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import mcp_elicit
import mcp_elicit.client
import mcp_elicit.web

LAZY = (mcp_elicit, mcp_elicit.client, mcp_elicit.web)
"""The packages whose names resolve on first use (`mcp_elicit._exports`): the top level, the client kit, web."""


def public(package: ModuleType) -> list[str]:
    return sorted(set(package.__all__) - {"__version__"})


def type_checked_homes(package: ModuleType = mcp_elicit) -> dict[str, str]:
    """Each name the package's `if TYPE_CHECKING:` block imports, and the module it imports it from: what
    type checkers see of the package, since its names resolve lazily at run time."""
    assert package.__file__ is not None
    source = Path(package.__file__).read_text(encoding="utf-8")
    homes: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                homes.update({alias.name: stmt.module for alias in stmt.names})
    return homes


# What `import mcp_elicit` alone must leave unimported: the SDK, the database driver, the terminal stack,
# pydantic, and every subpackage of mcp_elicit itself.
HEAVY = ("mcp", "psycopg", "psycopg_pool", "pydantic", "rich", "prompt_toolkit", "httpx", "typer")


def modules_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter and return the loaded modules that are ours or heavy."""
    probe = (
        f"{code}\n"
        "import json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('mcp_elicit.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    ("package", "name"), [(package, name) for package in LAZY for name in public(package)], ids=lambda v: str(v)
)
def test_public_name_is_the_object_from_its_home(package: ModuleType, name: str) -> None:
    home = importlib.import_module(type_checked_homes(package)[name])
    assert getattr(package, name) is getattr(home, name)
    assert name in dir(package)


@pytest.mark.parametrize("package", LAZY, ids=lambda package: package.__name__)
def test_type_checkers_see_exactly_the_public_names(package: ModuleType) -> None:
    # Type checkers only see the `if TYPE_CHECKING:` imports, so each public name must be imported there (from
    # the module it resolves from at run time: the test above), and nothing else.
    assert len(public(package)) > 10
    assert set(type_checked_homes(package)) == set(public(package))


@pytest.mark.parametrize("package", LAZY, ids=lambda package: package.__name__)
def test_star_import_gives_exactly_the_public_names(package: ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(package.__all__)


def test_version_is_defined_eagerly() -> None:
    assert "__version__" in vars(mcp_elicit)
    assert mcp_elicit.__version__ == "0.1.0"


def test_importing_the_package_imports_nothing_heavy() -> None:
    assert modules_after("import mcp_elicit; mcp_elicit.__version__") == ["mcp_elicit._exports"]


def test_a_name_imports_only_its_own_subpackage() -> None:
    # The probe above would pass vacuously if it could not see imports; this shows it can.
    loaded = modules_after("import mcp_elicit; mcp_elicit.open_store")
    assert "mcp_elicit.store" in loaded
    assert not {"mcp_elicit.server", "mcp_elicit.client", "mcp", "psycopg", "rich"} & set(loaded)
    assert "mcp_elicit.server" in modules_after("from mcp_elicit import Elicitation")


def test_an_unknown_name_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'NoSuchThing'") as raised:
        _ = mcp_elicit.NoSuchThing  # type: ignore[attr-defined]
    assert raised.value.name == "NoSuchThing"
    with pytest.raises(ImportError, match="NoSuchThing"):
        exec("from mcp_elicit import NoSuchThing")


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("Decision", "mcp_elicit.model"),
        ("new_form_decision", "mcp_elicit.model"),
        ("request_digest", "mcp_elicit.model"),
        ("redact_content", "mcp_elicit.model"),
        ("DecisionStatus", "mcp_elicit.model"),
        ("AlreadyExists", "mcp_elicit.store"),
        ("DecisionConflict", "mcp_elicit.store"),
    ],
)
def test_model_and_store_internals_stay_in_their_subpackages(name: str, home: str) -> None:
    assert hasattr(importlib.import_module(home), name)
    assert name not in mcp_elicit.__all__
    assert name not in dir(mcp_elicit)
    assert not hasattr(mcp_elicit, name)


def test_importing_the_server_api_does_not_import_the_postgres_driver() -> None:
    # A tool author on SQLite must not pay for psycopg: only opening a PostgreSQL store should load it.
    loaded = modules_after("import mcp_elicit.server")
    assert "mcp_elicit.server" in loaded
    assert not {"psycopg", "psycopg_pool", "mcp_elicit.store.postgres"} & set(loaded)
