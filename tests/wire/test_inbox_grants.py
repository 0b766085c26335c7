"""Standing grants in the inbox: a person sees the grants that let their calls through, revokes one with a button,
and the next call it covered is asked again; an operator sees and revokes everyone's. A revocation posted without
the person's own token for that grant changes nothing.

Real HTTP on loopback (the MCP endpoint, sign-in and inbox in one app), httpx2 as the browser, the MCP client
in-process (its principal is alice, through the local client). Other people's grants are recorded in the same
store the way the runtime records them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import pytest
from mcp import Client
from mcp_types import TextContent

from mcp_elicit import Gate, Grants
from mcp_elicit.approvals import GRANT_FIELD
from mcp_elicit.model import GrantKind, Operator, Principal
from mcp_elicit.server import Elicitation, Flow
from mcp_elicit.store import GrantFilter
from mcp_elicit.web.inbox import GRANTS_PATH
from tests.helpers.grants import recorded_grant
from tests.helpers.inbox_site import PAGE_SIZE, USERS, browser, inbox_routes, sign_in
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import mcp_site
from tests.helpers.person import Person, accept

pytestmark = pytest.mark.anyio


def build(elicitation: Elicitation) -> None:
    @elicitation.tool(gate=Gate(grants=Grants()))
    async def restart(flow: Flow, service: str) -> str:
        return f"restarted {service}"


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    with mcp_site(store_url, "grants-inbox", build, users=USERS, more_routes=inbox_routes) as served:
        yield served


def grant_entries(html: str) -> dict[str, str]:
    """The inbox's grant entries by grant id, each its section's HTML."""
    sections = re.findall(
        r'<section class="entry grant" aria-labelledby="grant-([0-9a-f-]+)">(.*?)</section>', html, re.S
    )
    return dict(sections)


def facts(section: str) -> dict[str, str]:
    found = re.findall(r"<dt>([^<]*)</dt><dd>(.*?)</dd>", section)
    return {term: unescape(re.sub(r"<[^>]*>", "", value)) for term, value in found}


def revoke_token(section: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"><button type="submit">Revoke</button>', section)
    assert found, section
    return found.group(1)


async def restart(site: Site, person: Person) -> str:
    """The tool's own result: the last block (what the model is told of a grant given comes first)."""
    async with Client(site.server, mode="legacy", elicitation_callback=person) as client:
        result = await client.call_tool("restart", {"service": "api"})
    assert not result.is_error and isinstance(result.content[-1], TextContent), result.content
    return result.content[-1].text


async def test_a_person_revokes_their_grant_and_the_next_call_is_asked_again(site: Site) -> None:
    person = Person([accept(**{GRANT_FIELD: "session"})])
    assert await restart(site, person) == "restarted api"
    assert await restart(site, person) == "restarted api"
    assert len(person.asked) == 1, "the grant let the second call through"
    [grant] = site.store.grant_page(Operator()).grants
    bobs = recorded_grant(site.store, Principal(site.principal("bob"), "client-b"), tool="deploy")

    with browser() as alice:
        sign_in(alice, site, "alice")
        page = alice.get(f"{site.base}/inbox").text
        shown = grant_entries(page)
        assert list(shown) == [grant.grant_id], "bob's grant is not alice's to see"
        assert "Your standing approvals" in page and "restart calls run without asking" in shown[grant.grant_id]
        assert facts(shown[grant.grant_id]) == {
            "Tool": "restart",
            "Kind": "For a session",
            "Client": "stdio",
            "Approved": grant.created_at.strftime("%Y-%m-%d %H:%M UTC"),
            "Until": grant.expires_at.strftime("%Y-%m-%d %H:%M UTC"),
        }
        form = {"csrf": revoke_token(shown[grant.grant_id])}
        done = alice.post(f"{site.base}{GRANTS_PATH}/{grant.grant_id}/revoke", data=form)
        assert done.status_code == 303 and done.headers["location"] == "/inbox?done=revoked"
        after = alice.get(f"{site.base}/inbox?done=revoked").text
        assert "Revoked. The calls it let through are asked again from now on." in after
        assert grant_entries(after) == {}
        again = alice.post(f"{site.base}{GRANTS_PATH}/{grant.grant_id}/revoke", data=form)
    assert again.status_code == 409 and "This standing approval already ended" in again.text
    assert "was revoked at" in unescape(again.text)

    revoked = site.store.get_grant(grant.grant_id, Operator())
    assert revoked.revoked_by == f"browser:{site.principal('alice')}"
    trail = site.store.audit_trail(grant.grant_id, Operator())
    assert [(row.to_status, row.actor, row.reason) for row in trail][-1] == (
        "revoked", f"browser:{site.principal('alice')}", "revoked in the inbox"
    )  # fmt: skip
    assert site.store.get_grant(bobs.grant_id, Operator()).revoked_at is None

    asked = Person([accept()])
    assert await restart(site, asked) == "restarted api"
    assert len(asked.asked) == 1, "revoked: the next call is asked"


async def test_a_tampered_revocation_is_refused_and_changes_nothing(site: Site) -> None:
    alices = recorded_grant(site.store, Principal(site.principal("alice"), "client-a"))
    others = recorded_grant(site.store, Principal(site.principal("alice"), "client-a"), tool="deploy")
    bobs = recorded_grant(site.store, Principal(site.principal("bob"), "client-b"))
    with browser() as alice:
        sign_in(alice, site, "alice")
        token = revoke_token(grant_entries(alice.get(f"{site.base}/inbox").text)[alices.grant_id])
        refusals = [
            (alices.grant_id, {}),
            (alices.grant_id, {"csrf": token[:-2] + "xx"}),
            (others.grant_id, {"csrf": token}),  # a token is for one grant
            (bobs.grant_id, {"csrf": token}),
        ]
        for grant_id, form in refusals:
            refused = alice.post(f"{site.base}{GRANTS_PATH}/{grant_id}/revoke", data=form)
            assert refused.status_code == 403 and "This form has expired" in refused.text, grant_id
    with browser() as bob:
        sign_in(bob, site, "bob")
        stolen = bob.post(f"{site.base}{GRANTS_PATH}/{alices.grant_id}/revoke", data={"csrf": token})
        assert stolen.status_code == 403, "alice's token is hers alone"
        own = revoke_token(grant_entries(bob.get(f"{site.base}/inbox").text)[bobs.grant_id])
        assert own != token
    active = site.store.grant_page(Operator(), GrantFilter(active=True)).grants
    assert {grant.grant_id for grant in active} == {alices.grant_id, others.grant_id, bobs.grant_id}
    for grant in active:
        assert [row.to_status for row in site.store.audit_trail(grant.grant_id, Operator())] == ["active"]


async def test_an_operator_sees_and_revokes_everyones_grants_in_pages(site: Site) -> None:
    alice = Principal(site.principal("alice"), "client-a")
    alices = [recorded_grant(site.store, alice, tool=f"tool{n}") for n in range(PAGE_SIZE)]
    bobs = recorded_grant(site.store, Principal(site.principal("bob"), "client-b"), tool="deploy",
                          kind=GrantKind.ALWAYS, scope="env=staging")  # fmt: skip
    with browser() as carol:
        sign_in(carol, site, "carol")
        page = carol.get(f"{site.base}/inbox").text
        assert "Everyone's standing approvals" in unescape(page)
        shown = grant_entries(page)
        assert list(shown) == [bobs.grant_id, *[g.grant_id for g in reversed(alices)][: PAGE_SIZE - 1]]
        assert "deploy calls with env=staging run without asking" in unescape(shown[bobs.grant_id])
        assert facts(shown[bobs.grant_id])["For"] == "Bob (bob)" and facts(shown[bobs.grant_id])["Kind"] == "Always"
        link = re.search(r'<a href="(/inbox/grants\?after=[^"]+)" rel="next">All standing approvals</a>', page)
        assert link, page
        rest = carol.get(f"{site.base}{unescape(link.group(1))}").text
        assert list(grant_entries(rest)) == [alices[0].grant_id]
        assert carol.get(f"{site.base}{GRANTS_PATH}?after=nonsense").status_code == 400

        form = {"csrf": revoke_token(shown[bobs.grant_id])}
        done = carol.post(f"{site.base}{GRANTS_PATH}/{bobs.grant_id}/revoke", data=form)
        assert done.status_code == 303
    revoked = site.store.get_grant(bobs.grant_id, Operator())
    assert revoked.revoked_by == f"operator:{site.principal('carol')}"
    [_, row] = site.store.audit_trail(bobs.grant_id, Operator())
    assert (row.actor, row.reason) == (f"operator:{site.principal('carol')}", "revoked by an operator in the inbox")
