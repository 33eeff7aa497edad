"""The chain's encoding and hash function (``ledger._chain``), as pure functions.

How the chain is stored and checked is in ``tests/contract/test_chain.py`` and, for the
SQLite backend's own SQL, ``tests/sqlite/test_chain.py``.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import _chain
from ledger import effects as fx


def test_a_boolean_field_encodes_as_the_integer_the_store_holds() -> None:
    """True and False encode as 1 and 0, the text SQLite's CAST gives the stored integers."""
    row = {
        "seq": 3,
        "effect_id": "e1",
        "execution": "succeeded",
        "impact": "applied",
        "execution_id": None,
        "replayed": True,
        "recorded_at": "2026-01-01T00:00:00.000000Z",
    }
    as_bool = _chain.encode("outcome", "r1", row)
    assert as_bool == _chain.encode("outcome", "r1", {**row, "replayed": 1})
    assert (
        as_bool
        == "ledger-v17:outcome2:r11:32:e19:succeeded7:applied~1:127:2026-01-01T00:00:00.000000Z"
    )
    assert _chain.encode("outcome", "r1", {**row, "replayed": False}) == as_bool.replace(
        "~1:1", "~1:0"
    )


def test_sha3_is_the_shells_sha3_with_256_bits_only() -> None:
    """sha3 digests text as UTF-8 and bytes as they are, passes NULL through, refuses other sizes."""
    assert _chain.sha3("é") == _chain.sha3("é".encode()) == hashlib.sha3_256("é".encode()).digest()
    assert _chain.sha3(None) is None
    with pytest.raises(ValueError, match=r"^the ledger's chain uses sha3 with 256 bits only$"):
        _chain.sha3("x", 512)


RUN = "0123456789abcdef0123456789abcdef"
CLAIM_ROW = {
    "seq": 1,
    "effect_id": "e1",
    "action_id": "a1",
    "operation": "write_file",
    "backend": "fs/1",
    "args_sha256": "0" * 64,
    "scope_count": 0,
    "obligation_count": 0,
    "recorded_at": "2026-01-01T00:00:00.000000+00:00",
    "kind": "write",
    "idempotency_key": fx.idempotency_key(RUN, "e1"),
    "retry_of": None,
}


def test_a_claim_as_old_claims_were_keeps_the_version_1_encoding() -> None:
    """A write, no retry, its derived key: encoded as before kinds existed, so old chains verify."""
    encoding = _chain.encode("claim", RUN, CLAIM_ROW)
    assert encoding.startswith("ledger-v1")
    legacy = {k: v for k, v in CLAIM_ROW.items() if k not in _chain.CLAIM_COLUMNS_2}
    assert _chain.encode("claim", RUN, legacy) == encoding


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "read"), ("kind", "irreversible"), ("retry_of", "e0"), ("idempotency_key", "a" * 32)],
)
def test_any_version_2_field_changed_changes_the_encoding(field: str, value: str) -> None:
    """Kind, retry and key each move a claim to version 2: none of them escapes the hash."""
    changed = _chain.encode("claim", RUN, CLAIM_ROW | {field: value})
    assert changed.startswith("ledger-v2")
    assert changed != _chain.encode("claim", RUN, CLAIM_ROW)
    assert f"{len(value)}:{value}" in changed


def _as_documented(fields: list[object]) -> str:
    """The module's definition, field by field: ``<length>:<text>``, ``~`` for NULL."""
    out = ""
    for value in fields:
        if value is None:
            out += "~"
        else:
            text = str(int(value)) if isinstance(value, bool) else str(value)
            out += f"{len(text)}:{text}"
    return out


_VALUE = st.one_of(st.none(), st.text(), st.integers(min_value=0), st.booleans())


@given(st.lists(_VALUE, min_size=len(_chain.OBSERVATION_COLUMNS) + 1).map(tuple), st.text())
def test_every_field_encodes_as_the_module_defines_it(values: tuple[object, ...], run: str) -> None:
    """Text, NULL, integers and booleans, in any mix: each is encoded as documented."""
    seq, *columns = values[: len(_chain.OBSERVATION_COLUMNS) + 1]
    row = {"seq": seq, **dict(zip(_chain.OBSERVATION_COLUMNS, columns, strict=True))}
    assert _chain.encode("observation", run, row) == "ledger-v1" + _as_documented(
        ["observation", run, seq, *columns]
    )


@given(
    st.lists(st.fixed_dictionaries(dict.fromkeys(_chain.SCOPE_COLUMNS, _VALUE)), max_size=3),
    st.lists(st.fixed_dictionaries(dict.fromkeys(_chain.OBLIGATION_COLUMNS, _VALUE)), max_size=3),
)
def test_a_claims_entries_encode_field_by_field_after_its_columns(
    scope: list[dict[str, object]], duties: list[dict[str, object]]
) -> None:
    """A claim's scope and obligation entries follow its columns, each field as documented."""
    entries = [e[c] for e in scope for c in _chain.SCOPE_COLUMNS]
    entries += [d[c] for d in duties for c in _chain.OBLIGATION_COLUMNS]
    columns = [CLAIM_ROW[c] for c in _chain.CLAIM_COLUMNS]
    expected = "ledger-v1" + _as_documented(["claim", RUN, CLAIM_ROW["seq"], *columns, *entries])
    assert _chain.encode("claim", RUN, CLAIM_ROW, scope, duties) == expected
