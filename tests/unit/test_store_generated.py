"""The blocking `Store` is what `tools/async_to_sync.py` makes of `aio.AsyncStore`, the calls' one source."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools import async_to_sync


def test_the_checked_in_blocking_store_is_generated_from_the_async_one() -> None:
    changed = async_to_sync.difference()
    assert not changed, (
        f"{async_to_sync.TARGET} is not what tools/async_to_sync.py makes of {async_to_sync.SOURCE}: run "
        f"`python -m tools.async_to_sync` (and edit {async_to_sync.SOURCE.name}, never the generated file)."
        f"\n{changed}"
    )


def test_an_edit_to_either_file_shows_as_a_difference(tmp_path: Path) -> None:
    for path in (async_to_sync.SOURCE, async_to_sync.TARGET):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((async_to_sync.ROOT / path).read_text())
    assert async_to_sync.difference(tmp_path) == ""

    target = tmp_path / async_to_sync.TARGET
    target.write_text(target.read_text().replace("-> Consumption:", "-> bool:", 1))
    assert "-    def consume_token(self, token_id: str, *, expires_at: datetime) -> bool:" in (
        async_to_sync.difference(tmp_path)
    )

    source = tmp_path / async_to_sync.SOURCE
    source.write_text(source.read_text().replace("limit: int = 100", "limit: int = 50", 1))
    assert "+        limit: int = 50," in async_to_sync.difference(tmp_path)


def test_the_conversion_strips_async_and_renames_the_routing() -> None:
    source = '''"""Async."""

from mcp_elicit.store._facade import AsyncStoreBase


class AsyncStore(AsyncStoreBase):
    """Awaited."""

    async def get(self, key: str) -> int:
        """The value, café."""
        return await self._call(lambda core: core.get(key))

    async def sweep(self) -> None:
        await self._batch(lambda core: core.sweep())
'''
    converted = async_to_sync.convert(source)
    assert "async def" not in converted and "await" not in converted
    assert "class Store(StoreBase):" in converted
    assert "from mcp_elicit.store._facade import StoreBase\n" in converted
    assert "        return self._run(lambda core: core.get(key))\n" in converted
    assert "        self._run(lambda core: core.sweep())\n" in converted
    assert '        """The value, café."""\n' in converted


@pytest.mark.parametrize(
    "body",
    [
        "        async with self._lock:\n            return 1\n",
        "        return [x async for x in self._rows()]\n",
        "        return await(self._call(lambda core: core.get()))\n",
    ],
)
def test_what_has_no_blocking_counterpart_is_refused(body: str) -> None:
    source = f'"""Async."""\n\n\nclass AsyncStore:\n    """Awaited."""\n\n    async def get(self) -> int:\n{body}'
    with pytest.raises(async_to_sync.Refused):
        async_to_sync.convert(source)
