"""The views: the SQL twin of ``ledger.effects.assess`` and ``decide``.

``effect_status`` gives each claim its verdict and next step by the rules of
docs/concepts.md; ``impact_scope`` and ``obligations`` show a claim's JSON arrays one
entry a row; ``unsettled_claims`` the claims with no terminal outcome;
``approval_status`` each approval request with its state by the store's clock. Written in
SQLite's spelling; the PostgreSQL backend renders the same queries in its own.
The library's reads put these queries in front of their own (:func:`with_views`), so
that no report is computed from a view someone replaced in a store.
"""

from __future__ import annotations

from ledger._chain import OBLIGATION_COLUMNS, SCOPE_COLUMNS
from ledger._sql.guards import store_now

# effect_status computes each claim's verdict by correlated lookups that follow the
# indexes (by run and effect, by run and resource), so that asking for one run or one
# effect reads only the rows the rules consult, never the whole store. The rules are
# those of docs/concepts.md#verdicts; tests/contract/test_view.py holds this view to
# ledger.effects.assess.

# Whether another claim c2 (through its scope row sc) may still land an effect after the
# observation ob: claimed after it, or not terminally settled before it; and not
# settled clean (FAILED with impact NONE is the one terminal outcome that did nothing).
_IN_FLIGHT = """
       sc.effect_id <> p.effect_id
   AND (c2.seq > ob.seq OR NOT EXISTS (
          SELECT 1 FROM outcomes AS t
           WHERE t.run_id = c2.run_id AND t.effect_id = c2.effect_id
             AND t.execution <> 'running' AND t.seq < ob.seq))
   AND NOT EXISTS (
          SELECT 1 FROM outcomes AS t
           WHERE t.run_id = c2.run_id AND t.effect_id = c2.effect_id
             AND t.execution = 'failed' AND t.impact = 'none')"""


def _scopes(where: str) -> str:
    return f"""EXISTS (
        SELECT 1 FROM scope_index AS sc
          JOIN claims AS c2 ON c2.run_id = sc.run_id AND c2.effect_id = sc.effect_id
         WHERE sc.run_id = p.run_id AND sc.kind = p.target_kind
           AND {where}
           AND {_IN_FLIGHT})"""


# The locators a scope may have to overlap the target by equality: the target itself and,
# for fs and external, each prefix of it that ends at a '/' of it, with and without that
# '/' (for fs, "/" is everyone's ancestor). One IN list, so that each is one index lookup.
# Never LIKE: file names hold % and _.
_AT_OR_ABOVE = """sc.locator IN (
            WITH RECURSIVE pos(i) AS (
                SELECT 1 UNION ALL SELECT i + 1 FROM pos WHERE i < length(p.target_locator))
            SELECT p.target_locator
            UNION ALL SELECT substr(p.target_locator, 1, i - 1) FROM pos
             WHERE p.target_kind <> 'owned' AND substr(p.target_locator, i, 1) = '/'
            UNION ALL SELECT substr(p.target_locator, 1, i) FROM pos
             WHERE p.target_kind <> 'owned' AND substr(p.target_locator, i, 1) = '/')"""

# A candidate observation is stale when an overlapping claim is in flight: one scoped at
# or above the target, or below it: past the target's '/' (a range of the index), or,
# for a target that ends with '/' ("/", a URI's directory), anywhere after it.
_STALE = " OR ".join(
    (
        _scopes(_AT_OR_ABOVE),
        "(p.target_kind <> 'owned' AND "
        + _scopes("sc.locator >= p.target_locator || '/' AND sc.locator < p.target_locator || '0'")
        + ")",
        "(p.target_kind <> 'owned' AND substr(p.target_locator, -1) = '/' AND "
        + _scopes(
            "sc.locator > p.target_locator AND sc.locator <"
            " substr(p.target_locator, 1, length(p.target_locator) - 1) || '0'"
        )
        + ")",
    )
)

# The evidence for obligation p: the newest complete observation of its target after the
# claim's current outcome o that decides p and is not stale: 1 satisfied, 0 violated,
# NULL when there is none. (The unary + keeps the planner on the resource index rather
# than walking every later observation of the run in seq order.)
_DECISION = """CASE p.predicate
             WHEN 'exists' THEN ob.resource_exists
             WHEN 'absent' THEN 1 - ob.resource_exists
             WHEN 'sha256' THEN CASE WHEN ob.resource_exists = 0 THEN 0
                                     WHEN ob.sha256 IS NULL THEN NULL
                                     ELSE ob.sha256 = p.expected END
             ELSE CASE WHEN ob.resource_exists = 0 THEN 0
                       WHEN ob.revision IS NULL THEN NULL
                       ELSE ob.revision = p.expected END
           END"""


def _evidence(column: str, after: str) -> str:
    """The evidence's ``column`` (a decision or a column of ``ob``) for obligation p."""
    return f"""(
        SELECT {column}
          FROM observations AS ob
         WHERE ob.run_id = p.run_id
           AND ob.resource_kind = p.target_kind
           AND ob.resource_locator = p.target_locator
           AND ob.coverage = 'complete'
           AND +ob.seq > {after}
           AND {_DECISION} IS NOT NULL
           AND NOT ({_STALE})
         ORDER BY +ob.seq DESC
         LIMIT 1)"""


_EVIDENCE = _evidence(_DECISION, "o.seq")

_DUTIES = "FROM obligations AS p WHERE p.run_id = c.run_id AND p.effect_id = c.effect_id"

# Decision rule 7: every obligation of claim s that its evidence violates shows its target
# exactly as the last complete observation made before the claim did: absent both times,
# or one digest (one revision, where neither has a digest).
_SAME_STATE = """CASE
             WHEN ev.resource_exists = 0 OR bf.resource_exists = 0
               THEN ev.resource_exists = 0 AND bf.resource_exists = 0
             WHEN ev.sha256 IS NOT NULL OR bf.sha256 IS NOT NULL THEN ev.sha256 IS bf.sha256
             ELSE ev.revision IS NOT NULL AND ev.revision = bf.revision
           END"""

_BEFORE = """(SELECT max(b.seq) FROM observations AS b
                WHERE b.run_id = p.run_id AND b.resource_kind = p.target_kind
                  AND b.resource_locator = p.target_locator AND b.coverage = 'complete'
                  AND b.resource_exists IS NOT NULL AND b.seq < s.seq)"""

_UNCHANGED = f"""NOT EXISTS (
        SELECT 1 FROM obligations AS p
         WHERE p.run_id = s.run_id AND p.effect_id = s.effect_id
           AND {_evidence(_DECISION, "s.current_seq")} = 0
           AND NOT coalesce((
                SELECT {_SAME_STATE}
                  FROM observations AS ev, observations AS bf
                 WHERE ev.run_id = p.run_id AND ev.seq = {_evidence("ob.seq", "s.current_seq")}
                   AND bf.run_id = p.run_id AND bf.seq = {_BEFORE}), 0))"""

# The rules of docs/concepts.md#decisions, for one attempt; ledger.effects.decide.
_OWN_STEP = f"""CASE
             WHEN s.resolution = 'applied' THEN 'done'
             WHEN s.resolution = 'not_applied' THEN 'retry'
             WHEN s.verdict = 'verified' THEN 'done'
             WHEN s.verdict = 'pending' THEN 'wait'
             WHEN s.verdict = 'failed' THEN 'retry'
             WHEN s.execution = 'reported_success' AND s.verdict = 'unverified' THEN 'done'
             WHEN s.kind IN ('read', 'idempotent') THEN 'retry'
             WHEN s.kind = 'write' AND s.verdict = 'contradicted' AND {_UNCHANGED} THEN 'retry'
             ELSE 'escalate'
           END"""

_VERDICTS = f"""
    SELECT c.run_id, c.seq, c.effect_id, c.action_id, c.operation, c.backend,
           c.recorded_at AS claimed_at, o.execution, o.impact,
           c.kind, c.idempotency_key, c.retry_of, c.step, o.seq AS current_seq,
           CASE
             WHEN o.execution IS NULL OR o.execution = 'running' THEN 'pending'
             WHEN o.execution = 'failed' AND o.impact = 'none' THEN 'failed'
             WHEN EXISTS (SELECT 1 {_DUTIES} AND {_EVIDENCE} = 0) THEN 'contradicted'
             WHEN EXISTS (SELECT 1 {_DUTIES})
              AND NOT EXISTS (SELECT 1 {_DUTIES} AND {_EVIDENCE} IS NOT 1) THEN 'verified'
             ELSE 'unverified'
           END AS verdict
      FROM claims AS c
      -- the current outcome: the terminal one, else the last RUNNING one
      LEFT JOIN outcomes AS o
        ON o.run_id = c.run_id
       AND o.seq = (SELECT x.seq FROM outcomes AS x
                     WHERE x.run_id = c.run_id AND x.effect_id = c.effect_id
                     ORDER BY (x.execution <> 'running') DESC, x.seq DESC
                     LIMIT 1)"""

# The attempt that speaks for claim t: its newest retry's newest retry ... or itself.
# A claim's retries are found by the index of retries: "+x.seq" keeps SQLite from
# walking the run's later claims by (run_id, seq) instead (and max() from walking it
# backwards), which made one run's statuses cost the square of its claims.
_NEWEST_ATTEMPT = """(
        WITH RECURSIVE attempt(effect_id, seq, n) AS (
            SELECT t.effect_id, t.seq, 0
            UNION ALL
            SELECT r.effect_id, r.seq, attempt.n + 1
              FROM attempt JOIN claims AS r
                ON r.run_id = t.run_id
               AND r.seq = (SELECT max(+x.seq) FROM claims AS x
                             WHERE x.run_id = t.run_id AND x.retry_of = attempt.effect_id
                               AND +x.seq > attempt.seq))
        SELECT effect_id FROM attempt ORDER BY n DESC LIMIT 1)"""

# Common table expressions rather than nested subqueries: SQLite's parser has a depth
# limit. NOT MATERIALIZED keeps each one a view the planner folds into the query, so that
# asking for one run or one effect still reads only its rows.
EFFECT_STATUS = f"""
WITH verdicts AS NOT MATERIALIZED ({_VERDICTS}
),
resolved AS NOT MATERIALIZED (
    SELECT v.*,
           (SELECT CASE r.applied WHEN 1 THEN 'applied' ELSE 'not_applied' END
              FROM resolutions AS r
             WHERE r.run_id = v.run_id AND r.effect_id = v.effect_id) AS resolution
      FROM verdicts AS v
),
steps AS NOT MATERIALIZED (
    SELECT s.*, {_OWN_STEP} AS own_step FROM resolved AS s
)
SELECT t.run_id, t.seq, t.effect_id, t.action_id, t.operation, t.backend, t.claimed_at,
       t.execution, t.impact, t.verdict,
       CASE WHEN t.resolution IS NULL
             AND t.verdict IN ('pending', 'unverified', 'contradicted')
             AND coalesce(t.impact, 'possible') <> 'none' THEN 1 ELSE 0 END AS unresolved_impact,
       t.kind, t.idempotency_key, t.retry_of, t.resolution,
       CASE WHEN NOT EXISTS (SELECT 1 FROM claims AS x
                              WHERE x.run_id = t.run_id AND x.retry_of = t.effect_id
                                AND +x.seq > t.seq)
            THEN t.own_step
            ELSE (SELECT a.own_step FROM steps AS a
                   WHERE a.run_id = t.run_id AND a.effect_id = {_NEWEST_ATTEMPT})
       END AS next_step,
       t.step
  FROM steps AS t
"""


# A claim's impact scope and postconditions, one row per entry, as the tables of those
# names held them before migration 0009: plain SQL reads them like any table.
def _entries_view(column: str, keys: tuple[str, ...]) -> str:
    fields = "".join(f",\n       json_extract(j.value, '$.{k}') AS {k}" for k in keys)
    return (
        f"\nSELECT c.run_id, c.effect_id, j.key AS position{fields}"
        f"\n  FROM claims AS c, json_each(c.{column}) AS j\n"
    )


IMPACT_SCOPE = _entries_view("impact_scope", SCOPE_COLUMNS)
OBLIGATIONS = _entries_view("obligations", OBLIGATION_COLUMNS)

UNSETTLED_CLAIMS = """
SELECT c.run_id, c.seq, c.effect_id, c.action_id, c.operation, c.recorded_at AS claimed_at,
       EXISTS (SELECT 1 FROM outcomes AS o
                WHERE o.run_id = c.run_id AND o.effect_id = c.effect_id) AS running
  FROM claims AS c
 WHERE NOT EXISTS (SELECT 1 FROM outcomes AS o
                    WHERE o.run_id = c.run_id AND o.effect_id = c.effect_id
                      AND o.execution <> 'running')
"""

# One row per approval request: its answer, the claim that used it, and its state by the
# store's clock when the view is read (ledger.effects.approval_state): an unanswered
# request past its expiry is expired, which nobody recorded.
APPROVAL_STATUS = f"""
SELECT r.run_id, r.approval_id, r.effect_id, r.operation, r.action_digest,
       r.requested_at, r.expires_at,
       CASE WHEN d.decision = 'denied' THEN 'denied'
            WHEN d.decision = 'granted' AND u.effect_id IS NOT NULL THEN 'used'
            WHEN d.decision = 'granted' THEN 'granted'
            WHEN {store_now("sqlite")} < r.expires_at THEN 'pending'
            ELSE 'expired'
       END AS state,
       d.decision, d.decided_by, d.source, d.decided_at, u.effect_id AS used_by
  FROM approval_requests AS r
  LEFT JOIN approval_decisions AS d
    ON d.run_id = r.run_id AND d.approval_id = r.approval_id
  LEFT JOIN claims AS u
    ON u.run_id = r.run_id AND u.approval_id = r.approval_id
"""

# The views' queries: the stored views are made of them, and the library's own reads use
# them directly (as common table expressions), so that no report is computed from a view
# someone replaced in the store.
VIEW_QUERIES = {
    # Before effect_status, which reads obligations.
    "impact_scope": IMPACT_SCOPE,
    "obligations": OBLIGATIONS,
    "effect_status": EFFECT_STATUS,
    "unsettled_claims": UNSETTLED_CLAIMS,
    "approval_status": APPROVAL_STATUS,
}
VIEWS = {name: f"\nCREATE VIEW {name} AS{query}" for name, query in VIEW_QUERIES.items()}
EFFECT_STATUS_VIEW = VIEWS["effect_status"]

# Every effect's row, in the column order of ledger.storage.EffectRow.from_view, oldest
# claim first; {where} is empty or a WHERE clause (the reports of both backends).
STATUS_QUERY = (
    "SELECT run_id, seq, effect_id, operation, execution, impact, verdict, unresolved_impact,"
    " claimed_at, kind, idempotency_key, resolution, next_step, step FROM effect_status"
    " {where} ORDER BY claimed_at, run_id, seq"
)


def with_views(sql: str) -> str:
    """``sql`` with the library's views defined in front of it: never the store's."""
    ctes = ",\n".join(f"{name} AS ({query})" for name, query in VIEW_QUERIES.items())
    return f"WITH {ctes}\n{sql}"
