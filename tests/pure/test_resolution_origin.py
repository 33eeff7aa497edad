"""A resolution's writing process in the record layer: its checks, its dict, its chain encoding."""

from __future__ import annotations

import dataclasses

import pytest

from ledger import _chain
from ledger import effects as fx

RUN = "0" * 31 + "1"
LEGACY = fx.Resolution("e1", 3, True, "alice", "2026-01-01T00:00:00.000000+00:00", "seen")
WRITTEN = dataclasses.replace(
    LEGACY,
    origin=fx.ResolutionOrigin.PERSON,
    os_user="bob",
    host="h1",
    program="ledger resolve",
    pid=12,
)


def _row(resolution: fx.Resolution) -> dict[str, object]:
    data = resolution.to_dict()
    return {
        "seq": resolution.seq,
        "effect_id": resolution.effect_id,
        "applied": int(resolution.applied),
        "resolved_by": resolution.by,
        "note": resolution.note,
        "recorded_at": resolution.recorded_at,
        **{c: data[c] for c in _chain.RESOLUTION_COLUMNS_4},
    }


def test_a_resolution_without_its_writer_is_encoded_as_before() -> None:
    old_row = {k: v for k, v in _row(LEGACY).items() if k not in _chain.RESOLUTION_COLUMNS_4}
    encoded = _chain.encode("resolution", RUN, _row(LEGACY))
    assert encoded == _chain.encode("resolution", RUN, old_row)  # a store before 0013
    assert encoded.startswith(_chain.VERSION_2)
    assert encoded.endswith("32:2026-01-01T00:00:00.000000+00:00")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("origin", fx.ResolutionOrigin.WORKER),
        ("os_user", "mallory"),
        ("host", "h2"),
        ("program", "agent.py"),
        ("pid", 13),
    ],
)
def test_every_field_of_the_writer_is_in_the_chain(field: str, value: object) -> None:
    encoded = _chain.encode("resolution", RUN, _row(WRITTEN))
    assert encoded.startswith(_chain.VERSION_4)
    changed = dataclasses.replace(WRITTEN, **{field: value})
    assert _chain.encode("resolution", RUN, _row(changed)) != encoded


def test_the_dict_carries_the_writer_and_old_dicts_still_read() -> None:
    data = WRITTEN.to_dict()
    assert {k: data[k] for k in _chain.RESOLUTION_COLUMNS_4} == {
        "origin": "person",
        "os_user": "bob",
        "host": "h1",
        "program": "ledger resolve",
        "pid": 12,
    }
    assert fx.Resolution.from_dict(data) == WRITTEN
    old = {k: v for k, v in LEGACY.to_dict().items() if k not in _chain.RESOLUTION_COLUMNS_4}
    assert fx.Resolution.from_dict(old) == LEGACY
    assert LEGACY.by_person
    assert WRITTEN.by_person
    assert not dataclasses.replace(WRITTEN, origin=fx.ResolutionOrigin.RECONCILER).by_person


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"origin": None}, ValueError),  # a writer without its origin
        ({"host": None}, TypeError),
        ({"program": ""}, ValueError),
        ({"program": "a\nb"}, ValueError),
        ({"os_user": "x" * 201}, ValueError),
        ({"pid": 0}, ValueError),
        ({"pid": True}, TypeError),
        ({"pid": 2**31}, ValueError),
        ({"origin": "person"}, TypeError),
    ],
)
def test_a_writer_is_all_there_and_well_formed(change: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        dataclasses.replace(WRITTEN, **change)


def test_from_dict_refuses_an_unknown_origin() -> None:
    with pytest.raises(ValueError, match="origin"):
        fx.Resolution.from_dict({**WRITTEN.to_dict(), "origin": "robot"})
