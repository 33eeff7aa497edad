"""The idempotency key's derivation, pinned to values computed outside the library.

A key is handed to the systems a tool calls and carried by every retry, across
machines and library versions: a change of its derivation would make a retry look like
a new request. The expected keys below were computed with the stock ``sqlite3`` shell's
``sha3()`` from the seed docs/forensics.md gives, not by the library.
"""

from __future__ import annotations

import hashlib

import pytest

from ledger import effects as fx

RUN = "0123456789abcdef0123456789abcdef"

# (run_id, effect_id, key): what
#   SELECT substr(lower(hex(sha3('ledger-key-v1' || length(r) || ':' || r
#                                || length(e) || ':' || e, 256))), 1, 32)
# answers in the stock sqlite3 shell.
KNOWN = [
    (RUN, "e1", "6a101d6deeea9bf3731db7fa581e2cf5"),
    ("f" * 32, "e1", "c3141c382224842a15b75340550ecf84"),
    (RUN, "call-7f3a", "1e0f5f51aa2f7d30e710dbd72f1f699a"),
    # Lengths are counted in characters, not in UTF-8 bytes (the shell's length() too).
    (RUN, "é中😀", "c3fbb16116edd4ff0f0e8f034ce78938"),
    # A length of three digits.
    (RUN, "x" * 200, "ab75ccd67af579ad3494ec9b2fcdf5da"),
    # Length-prefixed: a character moved from one id to the other is another seed.
    ("ab", "c", "1a7488247f2e5873db35c581c3579d5e"),
    ("a", "bc", "06d02e07674cd4fb8e4ca4d75ffe6d96"),
]


@pytest.mark.parametrize(("run_id", "effect_id", "key"), KNOWN)
def test_the_key_is_the_documented_derivation(run_id: str, effect_id: str, key: str) -> None:
    assert fx.idempotency_key(run_id, effect_id) == key
    seed = f"ledger-key-v1{len(run_id)}:{run_id}{len(effect_id)}:{effect_id}"
    assert hashlib.sha3_256(seed.encode()).hexdigest()[:32] == key


def test_a_claim_of_the_log_carries_the_derived_key_and_its_retry_the_same() -> None:
    """A retry's key is its original's, whatever its own effect id derives to."""
    original = fx.EffectClaim(
        "e1",
        1,
        "a1",
        fx.OperationRef("w", "t/1", "0" * 64),
        (),
        (),
        "2024-01-01T00:00:00.000000+00:00",
        idempotency_key=fx.idempotency_key(RUN, "e1"),
    )
    retry = fx.EffectClaim(
        "e2",
        2,
        "a1",
        original.operation,
        (),
        (),
        original.recorded_at,
        idempotency_key=original.idempotency_key,
        retry_of="e1",
    )
    fx.check_history(fx.History((original, retry)))
    assert fx.decide(retry, fx.History((original, retry))).idempotency_key == KNOWN[0][2]
    assert fx.decide(original, fx.History((original, retry))).idempotency_key == KNOWN[0][2]


@pytest.mark.parametrize(("run_id", "effect_id"), [("", "e1"), (RUN, ""), (RUN, "x" * 201)])
def test_ids_a_claim_cannot_have_derive_no_key(run_id: str, effect_id: str) -> None:
    with pytest.raises(ValueError, match=r"run_id|effect_id"):
        fx.idempotency_key(run_id, effect_id)


class _Id(str):
    """A str subclass: an identifier all the same."""

    __slots__ = ()


@pytest.mark.parametrize(
    ("run_id", "effect_id", "error"),
    [
        (RUN, "", "effect_id must not be empty"),
        (RUN, "x" * 201, "effect_id is longer than 200"),
        (RUN, "a\x00b", "effect_id must be printable"),
        (RUN, "\ud800", "effect_id must be printable"),
        ("", "e1", "run_id must not be empty"),
        (RUN, 7, "effect_id must be a str, not int"),
        (RUN, ["e1"], "effect_id must be a str, not list"),
    ],
)
def test_a_bad_id_is_refused_every_time_it_is_asked(
    run_id: object, effect_id: object, error: str
) -> None:
    """Keys are remembered once derived: an id refused once is refused again, never remembered."""
    for _ in range(3):
        with pytest.raises(ValueError, match=error):
            fx.idempotency_key(run_id, effect_id)  # type: ignore[arg-type]


def test_a_key_asked_again_or_of_a_str_subclass_is_the_same_key() -> None:
    """The key of a pair asked twice, or through str subclasses, is the derived one each time."""
    for run_id, effect_id, key in KNOWN:
        assert fx.idempotency_key(run_id, effect_id) == key
        assert fx.idempotency_key(run_id, effect_id) == key
        assert fx.idempotency_key(_Id(run_id), _Id(effect_id)) == key
