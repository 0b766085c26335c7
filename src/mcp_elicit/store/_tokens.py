"""The single-use token ledger and the local authorization server's OAuth client registrations.

A token is spent by inserting its id: the first insert wins, every later one finds it (`ALREADY_USED`), on
every instance of one database. An entry outlives its token and is purged by a sweep after.
"""

from __future__ import annotations

from datetime import datetime

from mcp_elicit.model import JSONObject, JSONValue
from mcp_elicit.store._core import Core, _Cells, _json_shape
from mcp_elicit.store._engine import UniqueViolation
from mcp_elicit.store.errors import AlreadyExists
from mcp_elicit.store.protocol import Consumption


class TokensCore(Core):
    async def consume_token(self, token_id: str, *, expires_at: datetime) -> Consumption:
        async with self._write() as tx:
            inserted = await tx.execute(
                "INSERT INTO elicit_tokens (token_id, expires_at) VALUES (%s, %s) ON CONFLICT (token_id) DO NOTHING",
                (token_id, self._to_time(expires_at)),
            )
        return Consumption.FIRST if inserted == 1 else Consumption.ALREADY_USED

    async def token_consumed(self, token_id: str) -> bool:
        async with self._read() as tx:
            row = await tx.one("SELECT 1 FROM elicit_tokens WHERE token_id = %s", (token_id,))
        return row is not None

    async def oauth_client_put(self, client_id: str, metadata: JSONObject) -> None:
        if not client_id:
            raise ValueError("an OAuth client id is a non-empty string")
        stored = self._to_json(_object(metadata))
        try:
            async with self._write() as tx:
                await tx.execute(
                    "INSERT INTO elicit_oauth_clients (client_id, metadata, created_at) VALUES (%s, %s, %s)",
                    (client_id, stored, self._to_time(self._clock())),
                )
        except UniqueViolation:
            raise AlreadyExists(f"OAuth client {client_id} is already registered") from None

    async def oauth_client_get(self, client_id: str) -> JSONObject | None:
        async with self._read() as tx:
            row = await tx.one("SELECT metadata FROM elicit_oauth_clients WHERE client_id = %s", (client_id,))
        if row is None:
            return None
        # A registration damaged behind the store's back is named by its client and column, as rows are.
        return _Cells("OAuth client", ("metadata",), row, row_id=client_id).read(0, self._stored_object)


def _object(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise ValueError(f"an OAuth client's metadata is a JSON object, not {_json_shape(value)}")
    return value
