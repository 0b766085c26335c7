"""What a client declared in its handshake decides what it may be asked; nothing is inferred from elsewhere."""

from __future__ import annotations

from mcp_types import ClientCapabilities, ElicitationCapability, FormElicitationCapability, UrlElicitationCapability

from mcp_elicit.server.eras import Declared, Era, Need, era_of


def test_no_protocol_version_or_an_unknown_one_can_be_asked_nothing() -> None:
    assert era_of(None) is Era.NONE
    assert era_of("2024-11-05") is Era.NONE
    assert era_of("2025-11-25") is not Era.NONE


def test_an_empty_elicitation_capability_means_forms_only_as_before_url_mode() -> None:
    declared = Declared.of(ClientCapabilities(elicitation=ElicitationCapability()), "2025-11-25")
    assert (declared.allows(Need.FORM), declared.allows(Need.URL)) == (True, False)


def test_url_mode_counts_only_from_the_version_that_has_it() -> None:
    both = ClientCapabilities(
        elicitation=ElicitationCapability(form=FormElicitationCapability(), url=UrlElicitationCapability())
    )
    assert Declared.of(both, "2025-11-25").allows(Need.URL)
    assert not Declared.of(both, "2025-06-18").allows(Need.URL)
    assert Declared.of(both, "2025-06-18").allows(Need.FORM)


def test_a_client_without_capabilities_is_unknown_and_may_be_asked_nothing() -> None:
    declared = Declared.of(None, "2025-11-25")
    assert declared.unknown and not any(declared.allows(need) for need in Need)
    assert not Declared.of(ClientCapabilities(), "2025-11-25").allows(Need.FORM)
