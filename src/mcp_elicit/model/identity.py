"""Who acts on a record.

A record is bound to a `Principal`: the authenticated subject *and* the client it used. Reads and
transitions made as a principal only ever see that principal's own records. An `Operator` acts across
principals (the operator CLI); the `System` actor is the runtime itself (expiry, sweeps). Only principals
and operators are callers of the store; the system actor appears in audit rows.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated subject together with the client it acts through."""

    principal_id: str
    client_id: str

    def __post_init__(self) -> None:
        if not self.principal_id:
            raise ValueError("principal_id must not be empty: a record needs an owner")
        if not self.client_id:
            raise ValueError("client_id must not be empty: state is bound to a client, not to a subject alone")

    @property
    def actor(self) -> str:
        return f"principal:{self.principal_id}@{self.client_id}"


@dataclass(frozen=True, slots=True)
class BrowserUser:
    """The person a decision belongs to, signed in on the server's own pages.

    A browser is no MCP client, so the binding here is the principal alone: the same person may finish
    in the browser a question that any of their clients asked.
    """

    principal_id: str

    def __post_init__(self) -> None:
        if not self.principal_id:
            raise ValueError("principal_id must not be empty")

    @property
    def actor(self) -> str:
        return f"browser:{self.principal_id}"

    def as_owner(self) -> Principal:
        """The principal that owns what this person stores from the browser (vault entries are per person)."""
        return Principal(self.principal_id, "browser")


@dataclass(frozen=True, slots=True)
class Operator:
    """A person or tool administering the store, named in every audit row it causes."""

    name: str = "operator"

    @property
    def actor(self) -> str:
        return f"operator:{self.name}"


@dataclass(frozen=True, slots=True)
class System:
    """The runtime acting on its own: clock-driven expiry and sweeps."""

    name: str = "clock"

    @property
    def actor(self) -> str:
        return f"system:{self.name}"


Caller = Principal | BrowserUser | Operator
Actor = Principal | BrowserUser | Operator | System
