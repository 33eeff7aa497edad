"""A claim's trace context as a value: what it accepts, and how the chain encodes it."""

from __future__ import annotations

import pytest

from ledger import _chain
from ledger import effects as fx
from tests.builders import op

VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _claim(traceparent: object = None) -> fx.EffectClaim:
    return fx.EffectClaim(
        effect_id="e1",
        seq=1,
        action_id="a1",
        operation=op(),
        impact_scope=(),
        obligations=(),
        recorded_at=fx.utc_now(),
        traceparent=traceparent,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # another version
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # an invalid trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # an invalid span id
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        VALID + "-00",
        VALID + "\n",
    ],
)
def test_a_traceparent_that_is_not_a_w3c_one_is_a_value_error(value: str) -> None:
    with pytest.raises(ValueError, match="traceparent must be a W3C traceparent"):
        _claim(value)


def test_a_traceparent_that_is_not_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="traceparent must be a str"):
        _claim(12)


def test_a_claim_round_trips_its_traceparent() -> None:
    claim = _claim(VALID)
    assert fx.EffectClaim.from_dict(claim.to_dict()) == claim
    assert claim.to_dict()["traceparent"] == VALID


def test_the_chain_encodes_a_trace_context_as_version_5_and_none_as_before() -> None:
    row = {
        "seq": 1,
        "effect_id": "e1",
        "action_id": "a1",
        "operation": "write_file",
        "backend": "",
        "args_sha256": "0" * 64,
        "scope_count": 0,
        "obligation_count": 0,
        "recorded_at": fx.utc_now(),
        "kind": "write",
        "idempotency_key": fx.idempotency_key("r" * 32, "e1"),
        "retry_of": None,
        "step": "s",
        "args": None,
    }
    before = _chain.encode("claim", "r" * 32, row)
    assert before.startswith(_chain.VERSION_3)
    assert _chain.encode("claim", "r" * 32, {**row, "traceparent": None}) == before
    traced = _chain.encode("claim", "r" * 32, {**row, "traceparent": VALID})
    assert traced == _chain.VERSION_5 + before[len(_chain.VERSION_3) :].replace(
        "1:s~", f"1:s~{len(VALID)}:{VALID}", 1
    )
