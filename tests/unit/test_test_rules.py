"""Two rules for the test code itself, checked on every file under tests/ as Python reads it.

- The product is reached through its public face only: no private module or private name of `mcp_elicit` is
  imported, and no private attribute of the product is read or set on anything but the test's own `self`. A
  test that needs one shows that the public API (or `mcp_elicit.testing`) lacks something: add it there.
- No test module imports another: what several test modules share lives in `tests/helpers`, so each test
  module can be read, run, moved or deleted alone.

"A private attribute of the product" is any `_name` the product defines: a private module, a module-level
name, a name a class defines, and every `self._name` / `cls._name` it assigns. An object of the test's own
(or of a third party) whose attribute happens to share such a name is caught too; renaming it costs less
than a rule that could be fooled.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PRODUCT = ROOT / "src" / "mcp_elicit"
OWN = frozenset({"self", "cls"})
REFLECTION = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(package: Path) -> frozenset[str]:
    """Every private name the package defines: its modules', and those at module level, in class bodies and on
    `self` or `cls`."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        names.add(path.stem)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bodies = [tree.body, *(node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef))]
        for body in bodies:
            for statement in body:
                if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(statement.name)
                elif isinstance(statement, ast.Assign | ast.AnnAssign):
                    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                    names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_own(node):
                names.add(node.attr)
    return frozenset(name for name in names if _private(name))


def _on_own(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in OWN


def _product_module(module: str) -> bool:
    return module == "mcp_elicit" or module.startswith("mcp_elicit.")


def _test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") or part == "conftest" for part in parts[1:])


def broken_rules(source: str, private: frozenset[str]) -> Iterator[tuple[int, str]]:
    """Each line of `source` (a test file) that breaks a rule, with what it does."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            module = node.module
            imported = [alias.name for alias in node.names]
            if _product_module(module) and any(_private(part) for part in module.split(".")):
                yield node.lineno, f"imports the private module {module}"
            elif _product_module(module):
                for name in filter(_private, imported):
                    yield node.lineno, f"imports the private name {name} of {module}"
            if _test_module(module):
                yield node.lineno, f"imports from the test module {module}"
            else:
                for name in imported:
                    if _test_module(f"{module}.{name}"):
                        yield node.lineno, f"imports the test module {module}.{name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _product_module(alias.name) and any(_private(part) for part in alias.name.split(".")):
                    yield node.lineno, f"imports the private module {alias.name}"
                if _test_module(alias.name):
                    yield node.lineno, f"imports the test module {alias.name}"
        elif isinstance(node, ast.Attribute) and node.attr in private and not _on_own(node):
            yield node.lineno, f"reaches into {ast.unparse(node)}"
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            function = node.func
            named = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
            attribute = node.args[1]
            if (
                named in REFLECTION
                and isinstance(attribute, ast.Constant)
                and isinstance(attribute.value, str)
                and attribute.value in private
            ):
                yield node.lineno, f"reaches into {attribute.value!r} through {named}()"


def test_the_rules_see_the_product_and_every_test_file() -> None:
    private = private_names(PRODUCT)
    assert {"_server", "_store", "_counts", "_HOMES", "_connection", "_sweep", "_MIGRATION_LOCK"} <= private
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100 and {"unit", "store", "runtime", "wire", "system", "helpers"} <= {
        path.relative_to(TESTS).parts[0] for path in files
    }


def test_no_test_reaches_into_the_product_or_imports_another_test_module() -> None:
    private = private_names(PRODUCT)
    broken = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, what in broken_rules(path.read_text(encoding="utf-8"), private)
    ]
    assert broken == [], "\n".join(broken)


def test_each_kind_of_breach_is_found() -> None:
    """The check above passes only because nothing breaks a rule, not because it cannot see a breach."""
    source = """
import mcp_elicit.store._sql
import tests.wire.test_tasks
from mcp_elicit.store._schema import LATEST_VERSION
from mcp_elicit.store import _sweep
from mcp_elicit.web.authserver import _ACCESS
from tests.runtime.test_server_flow import text
from tests.wire import test_tasks
from tests.system.conftest import deployment
from tests.helpers.results import text
from mcp_elicit.store import open_store


class Mine:
    def __init__(self) -> None:
        self._server = None


def test(elicitation, monkeypatch) -> None:
    elicitation._server
    elicitation.store._engine._connection()
    getattr(elicitation, "_clock")
    monkeypatch.setattr(elicitation, "_notices", None)
    elicitation.mcp_server
    parts._replace(path="/")
"""
    private = frozenset({"_server", "_engine", "_connection", "_clock", "_notices"})
    assert sorted(line for line, _ in broken_rules(source, private)) == [2, 3, 4, 5, 6, 7, 8, 9, 20, 21, 21, 22, 23]
