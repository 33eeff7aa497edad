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
  them (below), then for a claim each impact-scope row and each obligation row in
  ``position`` order.

Changing any field, removing, inserting or reordering a record breaks the chain at
the first record affected. This module only computes; storage stores and checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

VERSION = "ledger-v1"
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
COLUMNS = {"claim": CLAIM_COLUMNS, "outcome": OUTCOME_COLUMNS, "observation": OBSERVATION_COLUMNS}


def _field(value: Any) -> str:
    if value is None:
        return "~"
    if isinstance(value, bool):
        value = int(value)
    text = str(value)
    return f"{len(text)}:{text}"


_GETTERS = {kind: itemgetter(*columns) for kind, columns in COLUMNS.items()}
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
    if kind == "claim":
        for s in scope:
            values.extend(_SCOPE(s))
        for o in obligations:
            values.extend(_OBLIGATION(o))
    # _field, inlined: this runs for every field of every record written.
    parts = [VERSION]
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
