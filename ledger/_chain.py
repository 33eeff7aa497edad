"""The hash chain of a run: every record row carries ``prev_hash`` and ``hash``.

``hash = sha3_256(prev_hash || encoding)`` in lowercase hex, where ``prev_hash`` is the
hash of the run's previous record (by ``seq``) or :data:`GENESIS` for the first one.
The encoding is versioned and made only of text operations that plain SQL can repeat,
so the stock ``sqlite3`` shell (which has ``sha3()``) verifies a chain without this
library (docs/forensics.md has the query):

* the tag ``ledger-v1``, then each field as ``<length>:<text>``, or ``~`` for NULL,
  where ``<length>`` counts characters (SQLite's ``length()`` of text), integers and
  0/1 booleans written in decimal;
* the fields, in order: kind, run id, seq, then the row's columns as the store holds
  them (below), then for a claim the fields of each impact-scope entry and each
  obligation entry in their order (rows of their own tables until migration 0009, the
  entries of the claim's JSON arrays since: the encoding is the same).

Version 2 (the tag ``ledger-v2``) adds a claim's kind, idempotency key and retry, after
its columns and before its rows, and the resolution record. A claim whose three are
what a claim made before them stands for (a ``write``, no retry, the key its run and
effect id derive: :func:`ledger.effects.idempotency_key`) is encoded as version 1, so
records written before version 2 keep verifying; any other value changes the encoding,
so no field escapes the hash.

Version 3 (the tag ``ledger-v3``) adds a claim's step and recorded arguments, after its
version-2 fields, and an outcome's recorded result, after its columns. A claim with no
step and no arguments recorded, and an outcome with no result recorded, are encoded as
before, so records written before version 3 keep verifying.

Version 4 (the tag ``ledger-v4``) adds the process that wrote a resolution after its
columns: its origin, OS user, host, program and pid. A resolution that records none (one
written before migration 0013) is encoded as version 2, so it keeps verifying.

Version 5 (the tag ``ledger-v5``) adds a claim's trace context (``traceparent``) after its
version-3 fields. A claim without one is encoded as before, so records written before
version 5 keep verifying.

Version 6 (the tag ``ledger-v6``) adds a claim's approval (``approval_id``) after its
version-5 fields (its trace context, ``~`` for none), and the two approval records:
``approval_request`` and ``approval_decision``, their columns in the order below. A claim
made without an approval is encoded as before.

Changing any field, removing, inserting or reordering a record breaks the chain at
the first record affected. This module only computes; storage stores and checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from ledger.effects import idempotency_key

VERSION = "ledger-v1"
VERSION_2 = "ledger-v2"
VERSION_3 = "ledger-v3"
VERSION_4 = "ledger-v4"
VERSION_5 = "ledger-v5"
VERSION_6 = "ledger-v6"
GENESIS = "0" * 64

CLAIM_COLUMNS = (
    "effect_id",
    "action_id",
    "operation",
    "backend",
    "args_sha256",
    "scope_count",
    "obligation_count",
    "recorded_at",
)
SCOPE_COLUMNS = ("kind", "locator", "role", "revision")
OBLIGATION_COLUMNS = (
    "target_kind",
    "target_locator",
    "target_role",
    "target_revision",
    "predicate",
    "expected",
)
OUTCOME_COLUMNS = (
    "effect_id",
    "execution",
    "impact",
    "execution_id",
    "replayed",
    "recorded_at",
)
OBSERVATION_COLUMNS = (
    "observation_id",
    "resource_kind",
    "resource_locator",
    "resource_role",
    "resource_revision",
    "mechanism",
    "coverage",
    "source_action_id",
    "resource_exists",
    "sha256",
    "revision",
    "recorded_at",
)
# Version 2: a claim's fields after CLAIM_COLUMNS, and the resolution record.
CLAIM_COLUMNS_2 = ("kind", "idempotency_key", "retry_of")
RESOLUTION_COLUMNS = ("effect_id", "applied", "resolved_by", "note", "recorded_at")
# Version 3: a claim's fields after CLAIM_COLUMNS_2, and an outcome's after its columns.
CLAIM_COLUMNS_3 = ("step", "args")
OUTCOME_COLUMNS_3 = ("result",)
# Version 4: a resolution's writing process, after its columns.
RESOLUTION_COLUMNS_4 = ("origin", "os_user", "host", "program", "pid")
# Version 5: a claim's trace context, after CLAIM_COLUMNS_3.
CLAIM_COLUMNS_5 = ("traceparent",)
# Version 6: a claim's approval, after CLAIM_COLUMNS_5; and the approval records.
CLAIM_COLUMNS_6 = ("approval_id",)
APPROVAL_REQUEST_COLUMNS = (
    "approval_id",
    "effect_id",
    "action_digest",
    "operation",
    "step",
    "args",
    "reason",
    "requested_at",
    "expires_at",
    "os_user",
    "host",
    "program",
    "pid",
)
APPROVAL_DECISION_COLUMNS = (
    "approval_id",
    "decision",
    "decided_by",
    "note",
    "decided_at",
    "source",
    "os_user",
    "host",
    "program",
    "pid",
)
COLUMNS = {
    "claim": CLAIM_COLUMNS,
    "outcome": OUTCOME_COLUMNS,
    "observation": OBSERVATION_COLUMNS,
    "resolution": RESOLUTION_COLUMNS,
    "approval_request": APPROVAL_REQUEST_COLUMNS,
    "approval_decision": APPROVAL_DECISION_COLUMNS,
}
# Each record kind's tag when nothing in its row asks for a later one.
_BASE_VERSION = {
    "resolution": VERSION_2,
    "approval_request": VERSION_6,
    "approval_decision": VERSION_6,
}


_GETTERS = {kind: itemgetter(*columns) for kind, columns in COLUMNS.items()}
_CLAIM_2 = itemgetter(*CLAIM_COLUMNS_2)
_CLAIM_3 = itemgetter(*CLAIM_COLUMNS_3)
_RESOLUTION_4 = itemgetter(*RESOLUTION_COLUMNS_4)


def _version_3_claim(row: Mapping[str, Any]) -> bool:
    # A row of a store migration 0012 has not reached yet has neither column.
    return bool(row.get("step")) or row.get("args") is not None


def _version_1_claim(run_id: str, row: Mapping[str, Any]) -> bool:
    if "kind" not in row:  # a row of a store migration 0006 has not reached yet
        return True
    return (
        row["kind"] == "write"
        and row["retry_of"] is None
        and row["idempotency_key"] == idempotency_key(run_id, row["effect_id"])
    )


_SCOPE = itemgetter(*SCOPE_COLUMNS)
_OBLIGATION = itemgetter(*OBLIGATION_COLUMNS)


def encode(
    kind: str,
    run_id: str,
    row: Mapping[str, Any],
    scope: Iterable[Mapping[str, Any]] = (),
    obligations: Iterable[Mapping[str, Any]] = (),
) -> str:
    """The canonical text of one record row (and, for a claim, its child rows)."""
    values = [kind, run_id, row["seq"], *_GETTERS[kind](row)]
    version = _BASE_VERSION.get(kind, VERSION)
    if kind == "claim":
        if row.get("approval_id") is not None:
            # A row of a store migration 0016 has not reached yet has no such column.
            version = VERSION_6
            values.extend(_CLAIM_2(row))
            values.extend(_CLAIM_3(row))
            values.append(row["traceparent"])
            values.append(row["approval_id"])
        elif row.get("traceparent") is not None:
            # A row of a store migration 0015 has not reached yet has no such column.
            version = VERSION_5
            values.extend(_CLAIM_2(row))
            values.extend(_CLAIM_3(row))
            values.append(row["traceparent"])
        elif _version_3_claim(row):
            version = VERSION_3
            values.extend(_CLAIM_2(row))
            values.extend(_CLAIM_3(row))
        elif not _version_1_claim(run_id, row):
            version = VERSION_2
            values.extend(_CLAIM_2(row))
        for s in scope:
            values.extend(_SCOPE(s))
        for o in obligations:
            values.extend(_OBLIGATION(o))
    elif kind == "outcome" and row.get("result") is not None:
        version = VERSION_3
        values.append(row["result"])
    elif kind == "resolution" and row.get("origin") is not None:
        # A row of a store migration 0013 has not reached yet has no origin column.
        version = VERSION_4
        values.extend(_RESOLUTION_4(row))
    # Each field as <length>:<text>, or ~ for NULL; inlined, it runs for every field written.
    parts = [version]
    for value in values:
        if value is None:
            parts.append("~")
            continue
        text = value if type(value) is str else str(int(value) if type(value) is bool else value)
        parts.append(f"{len(text)}:{text}")
    return "".join(parts)


def link(prev_hash: str, encoding: str) -> str:
    """The hash of a record whose predecessor has ``prev_hash``."""
    return hashlib.sha3_256((prev_hash + encoding).encode("utf-8")).hexdigest()


def sha3(value: str | bytes | None, bits: int = 256) -> bytes | None:
    """SQLite's ``sha3(X, 256)`` as the stock shell defines it: the digest of X's bytes.

    Registered on the library's writer connections so that the schema's guards can
    check a record's hash with the same SQL the shell runs; only 256 bits are used.
    """
    if value is None:
        return None
    if bits != 256:
        raise ValueError("the ledger's chain uses sha3 with 256 bits only")
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return hashlib.sha3_256(data).digest()


# --------------------------------------------------------------------------- the same in SQL


def _sql_field(expression: str) -> str:
    text = f"CAST({expression} AS TEXT)"
    return f"CASE WHEN {expression} IS NULL THEN '~' ELSE length({text}) || ':' || {text} END"


def _sql_children(column: str, fields: tuple[str, ...], row: str) -> str:
    # The entries of the claim's JSON array, in array order (json_each's key).
    values = " || ".join(_sql_field(f"json_extract(k.value, '$.{f}')") for f in fields)
    return (
        f"coalesce((SELECT group_concat(x, '') FROM (SELECT {values} AS x"
        f" FROM json_each({row}.{column}) AS k ORDER BY k.key)), '')"
    )


def sql_encoding(kind: str, row: str, sep: str = " || ") -> str:
    """An SQL expression equal to :func:`encode` of the record row aliased ``row``.

    For a claim it reads the entries of its ``impact_scope`` and ``obligations`` JSON.
    """
    tag = f"'{_BASE_VERSION.get(kind, VERSION)}'"
    version_1 = f"({sql_version_1_claim(row)})"
    version_3 = f"({row}.step <> '' OR {row}.args IS NOT NULL)"
    version_5 = f"({row}.traceparent IS NOT NULL)"
    version_6 = f"({row}.approval_id IS NOT NULL)"
    if kind == "claim":
        tag = (
            f"CASE WHEN {version_6} THEN '{VERSION_6}' WHEN {version_5} THEN '{VERSION_5}'"
            f" WHEN {version_3} THEN '{VERSION_3}'"
            f" WHEN {version_1} THEN '{VERSION}' ELSE '{VERSION_2}' END"
        )
    elif kind == "outcome":
        tag = f"CASE WHEN {row}.result IS NOT NULL THEN '{VERSION_3}' ELSE '{VERSION}' END"
    elif kind == "resolution":
        tag = f"CASE WHEN {row}.origin IS NOT NULL THEN '{VERSION_4}' ELSE '{VERSION_2}' END"
    parts = [
        tag,
        _sql_field(f"'{kind}'"),
        _sql_field(f"{row}.run_id"),
        _sql_field(f"{row}.seq"),
        *(_sql_field(f"{row}.{column}") for column in COLUMNS[kind]),
    ]
    if kind == "claim":
        extra = " || ".join(_sql_field(f"{row}.{column}") for column in CLAIM_COLUMNS_2)
        extra_3 = " || ".join(_sql_field(f"{row}.{column}") for column in CLAIM_COLUMNS_3)
        extra_5 = _sql_field(f"{row}.traceparent")
        extra_6 = _sql_field(f"{row}.approval_id")
        parts.append(
            f"CASE WHEN {version_6} THEN {extra} || {extra_3} || {extra_5} || {extra_6}"
            f" WHEN {version_5} THEN {extra} || {extra_3} || {extra_5}"
            f" WHEN {version_3} THEN {extra} || {extra_3}"
            f" WHEN {version_1} THEN '' ELSE {extra} END"
        )
        parts.append(_sql_children("impact_scope", SCOPE_COLUMNS, row))
        parts.append(_sql_children("obligations", OBLIGATION_COLUMNS, row))
    elif kind == "outcome":
        parts.append(
            f"CASE WHEN {row}.result IS NULL THEN '' ELSE {_sql_field(f'{row}.result')} END"
        )
    elif kind == "resolution":
        extra_4 = " || ".join(_sql_field(f"{row}.{column}") for column in RESOLUTION_COLUMNS_4)
        parts.append(f"CASE WHEN {row}.origin IS NULL THEN '' ELSE {extra_4} END")
    return sep.join(parts)


def sql_key(row: str) -> str:
    """An SQL expression for the idempotency key the claim row ``row`` derives (as Python does)."""
    seed = (
        f"'ledger-key-v1' || length({row}.run_id) || ':' || {row}.run_id"
        f" || length({row}.effect_id) || ':' || {row}.effect_id"
    )
    return f"substr(lower(hex(sha3({seed}, 256))), 1, 32)"


def sql_version_1_claim(row: str) -> str:
    """An SQL condition: the claim row ``row`` is encoded as version 1."""
    return (
        f"{row}.kind = 'write' AND {row}.retry_of IS NULL"
        f" AND {row}.idempotency_key = {sql_key(row)}"
    )


def sql_hash(kind: str, row: str) -> str:
    """An SQL expression for the hash the record row aliased ``row`` must carry."""
    return f"lower(hex(sha3({row}.prev_hash || {sql_encoding(kind, row)}, 256)))"
