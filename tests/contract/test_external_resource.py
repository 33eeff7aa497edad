"""Behaviour of ``ledger.resources.ExternalResource``: resources held by other systems."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import effects as fx
from ledger.effect_log import EffectLog
from ledger.resources import ExternalResource
from tests.builders import op


@pytest.mark.parametrize(
    ("uri", "locator"),
    [
        ("https://api.example.com/v1/items", "https://api.example.com/v1/items"),
        ("HTTPS://API.Example.COM/V1/Items", "https://api.example.com/V1/Items"),
        (
            "Https://User:PassWord@Host.Example:8443/Path?Query=A#Frag",
            "https://User:PassWord@host.example:8443/Path?Query=A#Frag",
        ),
        ("http://[FE80::1]:8080/X", "http://[fe80::1]:8080/X"),
        ("http://Host?Q=A", "http://host?Q=A"),
        ("http://Host#Top", "http://host#Top"),
        ("MCP://Files-Server/Write_File", "mcp://files-server/Write_File"),
        ("mailto:Alice@Example.com", "mailto:Alice@Example.com"),
        ("URN:ISBN:0451450523", "urn:ISBN:0451450523"),
    ],
)
def test_the_locator_lower_cases_only_the_scheme_and_the_host(uri: str, locator: str) -> None:
    """The locator is the URI with its scheme and host lower-cased; everything else stays as given."""
    resource = ExternalResource(uri)
    assert resource.locator == locator
    assert resource.uri == uri


def test_to_ref_gives_an_external_reference_with_the_role_and_revision() -> None:
    """``to_ref`` gives kind ``external``, the locator, the role and the revision."""
    resource = ExternalResource("https://Tickets.Example/t/42", revision="r7")
    assert resource.to_ref("target") == fx.ResourceRef(
        "external", "https://tickets.example/t/42", "target", "r7"
    )
    assert fx.resource_ref(resource, "source") == fx.ResourceRef(
        "external", "https://tickets.example/t/42", "source", "r7"
    )
    assert ExternalResource("mcp://s/t").to_ref("target").revision is None


def test_uris_that_differ_only_in_the_case_of_scheme_and_host_name_one_resource() -> None:
    """Two spellings of one scheme and host give equal references; a path in another case does not."""
    a = ExternalResource("HTTPS://Example.COM/a").to_ref("target")
    b = ExternalResource("https://example.com/a").to_ref("target")
    c = ExternalResource("https://example.com/A").to_ref("target")
    assert a == b
    assert a.same_target(b)
    assert not a.same_target(c)


@pytest.mark.parametrize(
    "uri",
    [
        "api.example.com/v1",  # no scheme
        "/v1/items",
        "1http://example.com",  # a scheme starts with a letter
        "ht tp://example.com",
        "https:",  # nothing after the scheme
        "https://",  # an empty host
        "https:///path",
        "https://user@:8080/path",
        "https://exa mple.com/",  # whitespace
        " https://example.com/",
        "https://example.com/\n",
        "https://example.com/\t",
        "https://example.com/\x00",  # control characters
        "https://example.com/\x1b[31m",
        "https://example.com/\x7f",
        "https://example.com/\u200b",  # invisible format characters
        "",
        "https://example.com/" + "a" * 4096,  # longer than a locator may be
        "https://example.com/\udc80",  # a lone surrogate
    ],
)
def test_malformed_uris_are_a_value_error(uri: str) -> None:
    """A URI without a scheme, with an empty remainder or host, or with whitespace or control characters is refused."""
    with pytest.raises(ValueError, match="uri"):
        ExternalResource(uri)


@pytest.mark.parametrize("uri", [None, b"https://example.com", 42])
def test_a_uri_that_is_not_a_str_is_a_type_error(uri: object) -> None:
    """A URI of another type is a TypeError (and a ValueError, like every invalid field)."""
    with pytest.raises(TypeError, match="uri must be a str"):
        ExternalResource(uri)  # type: ignore[arg-type]


@pytest.mark.parametrize("revision", ["", "r\n1", 7, "x" * 201])
def test_a_bad_revision_is_refused(revision: object) -> None:
    """A revision must be an identifier, as an owned record's is."""
    with pytest.raises(ValueError, match="revision"):
        ExternalResource("https://example.com/x", revision=revision)  # type: ignore[arg-type]


def test_external_resources_are_frozen_values() -> None:
    """Resources are hashable values compared by their fields, and cannot be changed."""
    a = ExternalResource("https://example.com/x", "r1")
    assert a == ExternalResource("https://example.com/x", "r1")
    assert len({a, ExternalResource("https://example.com/x", "r1")}) == 1
    with pytest.raises(AttributeError):
        a.uri = "https://example.com/y"  # type: ignore[misc]


@given(
    scheme=st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,8}", fullmatch=True),
    host=st.from_regex(r"[A-Za-z0-9-]{1,12}(\.[A-Za-z0-9-]{1,12}){0,2}", fullmatch=True),
    path=st.from_regex(r"(/[A-Za-z0-9._~%-]{0,8}){0,3}", fullmatch=True),
)
def test_the_locator_is_stable_and_idempotent(scheme: str, host: str, path: str) -> None:
    """The locator of a locator is itself; only the scheme and host change case."""
    locator = ExternalResource(f"{scheme}://{host}{path}").locator
    assert locator == f"{scheme.lower()}://{host.lower()}{path}"
    assert ExternalResource(locator).locator == locator


def test_an_external_reference_round_trips_through_the_store(store_dir: Path, run_id: str) -> None:
    """A claim on an external resource and an observation of it are loaded back as written."""
    ref = ExternalResource("https://Tickets.Example/t/42", revision="r7").to_ref("target")
    with EffectLog(run_id, store_dir) as log:
        log.claim(
            effect_id="e1",
            action_id="a1",
            operation=op("update_ticket"),
            impact_scope=[ref],
            obligations=[fx.Postcondition(ref, fx.Predicate.REVISION, "r8")],
        )
        log.observe(
            observation_id="o1",
            resource=ref,
            mechanism=fx.ObservationMechanism.BACKEND_QUERY,
            coverage=fx.Coverage.COMPLETE,
            source_action_id="a2",
            exists=True,
            revision="r8",
        )
        written = log.history()
    with EffectLog.load(run_id, store_dir) as loaded:
        assert loaded.history().claims[0].impact_scope == (ref,)
        assert loaded.history().claims[0].obligations == written.claims[0].obligations
        assert loaded.history().observations == written.observations
