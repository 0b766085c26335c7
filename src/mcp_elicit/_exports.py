"""Names a package re-exports from its modules, imported on first use (PEP 562).

A package's `__init__` that imports every module it re-exports makes importing any one of its modules pay for
all of them, since Python runs the package first: `mcp_elicit.client.terminal` would load the MCP SDK it never
uses. With these, each name loads its own module when first read, and is then an ordinary module global.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping


def lazy_exports(
    package: str, homes: Mapping[str, str], public: Collection[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, which re-exports each name of `homes` from its module."""

    def __getattr__(name: str) -> object:
        module = sys.modules[package]
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}", name=name, obj=module)
        try:
            value = getattr(importlib.import_module(home), name)
        except AttributeError:
            raise AttributeError(
                f"module {package!r} has no attribute {name!r} ({home} does not define it)", name=name, obj=module
            ) from None
        setattr(module, name, value)  # resolved once; later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
