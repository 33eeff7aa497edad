"""The JSON shapes of docs/cli.md: each object the commands print, as a table of keys.

:data:`SHAPES` gives each object's keys in the order they are printed, with their types
and meanings; :func:`shape` renders one as a Markdown section, and :data:`RECORDS` is
the section on a run's records. :mod:`tools.clidoc` puts them into the page.
"""

from __future__ import annotations

__all__ = ["RECORDS", "SHAPES", "shape"]

_RECORD_TYPES = (
    "claim or outcome or observation or resolution or approval request or approval decision"
)

# The JSON shapes: for each object, its keys in the order they are printed, each with
# its type and meaning. A type is `string`, `integer`, `boolean`, `null`, `JSON value`
# (any JSON value, `null` included), `array of T`, the name of another shape, or
# alternatives joined by " or ". tests/cli/test_cli_docs.py reads these tables back from
# docs/cli.md and checks real output against them.
SHAPES: dict[str, tuple[tuple[str, str, str], ...]] = {
    # ledger runs
    "run": (
        ("run_id", "string", "the run's id"),
        ("first_at", "string or null", "when its first record was written; `null` if none"),
        ("last_at", "string or null", "when its last record was written; `null` if none"),
        ("host", "string or null", "the host its writer ran on; `null` when none is recorded"),
        ("pid", "integer or null", "the writer's process id; `null` when none is recorded"),
        (
            "writer_name",
            "string or null",
            "the name its writer gave (`EffectLog(writer_name=...)`, `mcp-proxy --name`)",
        ),
        ("claims", "integer", "how many effects it claimed"),
        ("pending", "integer", "how many of them are pending"),
        ("unverified", "integer", "how many are unverified"),
        ("contradicted", "integer", "how many are contradicted"),
        ("verified", "integer", "how many are verified"),
        ("failed", "integer", "how many failed"),
        (
            "problem",
            "string or null",
            (
                "why the run does not validate (rows or hash chain), then its counts are not "
                "to be believed and the command exits 1; `null` when it validates"
            ),
        ),
    ),
    # ledger show
    "run report": (
        ("run_id", "string", "the whole id of the run RUN matched"),
        ("writer", "writer or null", "the last process that wrote it; `null` if not recorded"),
        ("records", "array of record entry", "every record, in `seq` order"),
        ("effects", "array of assessment", "the verdict on each claimed effect, in claim order"),
        ("decisions", "array of decision", "what to do next about each effect, in claim order"),
        (
            "approvals",
            "array of approval",
            "each approval request of the run, oldest first, its state by the store's clock",
        ),
    ),
    "writer": (
        ("host", "string", "the host name it ran on"),
        ("pid", "integer", "its process id"),
        ("name", "string or null", "the name it gave; `null` if none"),
    ),
    "record entry": (
        (
            "type",
            "string",
            (
                "`claim`, `outcome`, `observation`, `resolution`, `approval_request` or "
                "`approval_decision`"
            ),
        ),
        ("record", _RECORD_TYPES, "the record, as `type` says"),
    ),
    # ledger status
    "effect row": (
        ("run_id", "string", "the run"),
        ("seq", "integer", "the claim's position in its run"),
        ("effect_id", "string", "the claimed effect"),
        ("operation", "string", "the tool's name"),
        ("execution", "string or null", "the current outcome's execution; `null` with none"),
        ("impact", "string or null", "the current outcome's impact; `null` with none"),
        ("verdict", "string", "`pending`, `verified`, `unverified`, `contradicted` or `failed`"),
        ("unresolved_impact", "boolean", "it may have changed the world, nobody can say how"),
        ("claimed_at", "string", "when the claim was written"),
        ("kind", "string", "`read`, `idempotent`, `write` or `irreversible`"),
        ("idempotency_key", "string", "the key its call carried; a retry carries the same"),
        (
            "resolution",
            "string or null",
            "a person's word (`ledger resolve`): `applied`, `not_applied`; `null` if none",
        ),
        (
            "next_step",
            "string",
            "what to do next, as `decide` says: `done`, `wait`, `retry` or `escalate`",
        ),
        (
            "run_problem",
            "string or null",
            (
                "why its run does not validate (rows or hash chain), then its verdict is not "
                "to be believed and the command exits 1; `null` when the run validates"
            ),
        ),
        (
            "step",
            "string",
            "the call's step, its identity across restarts; empty for a claim made without",
        ),
        (
            "approval",
            "approval summary or null",
            "the approval the claim was made under; `null` when it needed none",
        ),
    ),
    "approval summary": (
        ("approval_id", "string", "the approval request"),
        (
            "state",
            "string",
            (
                "`pending`, `granted` (not yet used), `used`, `denied` or `expired`, by the "
                "store's clock"
            ),
        ),
        ("decided_by", "string or null", "who decided, as named; `null` while undecided"),
        ("decided_at", "string or null", "when, by the store's clock; `null` while undecided"),
        (
            "source",
            "string or null",
            "what wrote the answer: `command`, `program` or `elicitation`; `null` while undecided",
        ),
    ),
    # ledger approvals, approve, deny (and show)
    "approval": (
        ("run_id", "string", "the run"),
        ("approval_id", "string", "the request, what `ledger approve RUN APPROVAL` names"),
        (
            "state",
            "string",
            (
                "`pending`, `granted` (not yet used), `used`, `denied` or `expired` (unanswered "
                "past `expires_at`: nobody's answer), by the store's clock"
            ),
        ),
        ("request", "approval request", "the request, as recorded"),
        ("decision", "approval decision or null", "the answer; `null` while there is none"),
        ("used_by", "string or null", "the effect id of the claim made under it; `null` if none"),
    ),
    # ledger recover
    "recovery": (
        ("run_id", "string", "the run"),
        (
            "outcomes",
            "array of outcome",
            "the outcomes appended, in `seq` order; empty if none was needed or it was skipped",
        ),
        (
            "skipped",
            "string or null",
            (
                "why the run was left alone (`a live process has it loaded`, or "
                "`another process is recovering it`); `null` otherwise"
            ),
        ),
    ),
    # ledger verify
    "verify report": (
        ("ok", "boolean", "whether every check passed (then the exit code is 0)"),
        ("runs", "integer", "how many runs the store holds"),
        ("records", "integer", "how many records the runs that validated hold"),
        ("problems", "array of string", "one line per problem, as printed without `--json`"),
    ),
    # ledger export (and what ledger import reads)
    "exported line": (
        ("v", "integer", "the format version: `1`"),
        (
            "type",
            "string",
            (
                "`claim`, `outcome`, `observation`, `resolution`, `approval_request` or "
                "`approval_decision`"
            ),
        ),
        ("record", _RECORD_TYPES, "the record, as `type` says"),
    ),
    # ledger import
    "imported file": (
        ("file", "string", "the file, as given"),
        ("run_id", "string", "the run it became"),
        ("records", "integer", "how many records it held"),
        ("torn_tail_ignored", "boolean", "whether a torn final line was ignored"),
    ),
    # ledger head
    "run head": (
        ("run_id", "string", "the run"),
        ("seq", "integer", "the seq of its last record"),
        ("hash", "string", "that record's hash in the run's chain: 64 lowercase hex"),
        ("anchor", "string", "the three as RUN:SEQ:HASH, what verify --anchor takes"),
    ),
    # ledger path
    "store path": (
        ("path", "string", "the absolute path of the database file"),
        ("exists", "boolean", "whether that file exists"),
    ),
    "migration": (
        ("store", "string", "the store: its directory, or its URL without the password"),
        ("action", "string", "`created`, `upgraded` or `current` (nothing to do)"),
        ("from", "string or null", "the schema revision before; `null` for a store created"),
        ("revision", "string", "the schema revision now: the newest this version knows"),
    ),
    # the records, from ledger.effects
    "claim": (
        ("effect_id", "string", "the effect, unique in its run"),
        ("seq", "integer", "the record's position in its run: 1, 2, 3, ... for all records"),
        ("action_id", "string", "the agent's action that made the call"),
        ("operation", "operation", "the tool call"),
        ("impact_scope", "array of resource reference", "what the effect may touch"),
        ("obligations", "array of postcondition", "what should hold afterwards"),
        ("recorded_at", "string", "when it was written"),
        ("kind", "string", "`read`, `idempotent`, `write` or `irreversible`"),
        ("idempotency_key", "string", "32 lowercase hex characters to hand downstream"),
        ("retry_of", "string or null", "the effect of the run this claim repeats"),
        (
            "step",
            "string",
            (
                "the call's identity across restarts (`log.effect(step=...)`, or one the log "
                "derives); empty for a claim made without one; a retry carries its original's"
            ),
        ),
        (
            "args",
            "JSON value or null",
            "the call's arguments as recorded (redacted, if asked); `null` when not recorded",
        ),
        (
            "traceparent",
            "string or null",
            (
                "the W3C trace context of the code that made the claim, when the log emitted "
                "OpenTelemetry spans ([telemetry.md](telemetry.md)); `null` otherwise"
            ),
        ),
        (
            "approval_id",
            "string or null",
            (
                "the approval request the claim was made under, granted and used by it alone; "
                "`null` when it needed none"
            ),
        ),
    ),
    "approval request": (
        ("approval_id", "string", "the request, unique in its run"),
        ("seq", "integer", "the record's position in its run"),
        ("effect_id", "string", "the effect id the claim made under it will carry"),
        (
            "action_digest",
            "string",
            "SHA-256 (64 hex) of everything the claim will say of the call: what is approved",
        ),
        ("operation", "string", "the tool's name"),
        ("requested_at", "string", "when it was asked, by the store's clock"),
        ("expires_at", "string", "when it expires unanswered, by the store's clock"),
        ("os_user", "string", "the OS user of the process that asked"),
        ("host", "string", "the host it ran on"),
        ("program", "string", "its program"),
        ("pid", "integer", "its process id"),
        ("step", "string", "the call's step; empty for none"),
        ("args", "JSON value or null", "the arguments as recorded; `null` when not recorded"),
        ("reason", "string", "why a person is asked; may be empty"),
    ),
    "approval decision": (
        ("approval_id", "string", "the request it answers"),
        ("seq", "integer", "the record's position in its run"),
        ("decision", "string", "`granted` or `denied`"),
        ("by", "string", "who decided, as the writer named them"),
        ("decided_at", "string", "when, by the store's clock"),
        (
            "source",
            "string",
            (
                "what wrote it: `command` (`ledger approve`, `deny`), `program` or `elicitation` "
                "(an MCP client the proxy asked)"
            ),
        ),
        ("os_user", "string", "the OS user of the process that wrote it"),
        ("host", "string", "the host it ran on"),
        ("program", "string", "`ledger approve`, `ledger deny`, or the program's name"),
        ("pid", "integer", "its process id"),
        ("note", "string", "what they said; may be empty"),
    ),
    "resolution": (
        ("effect_id", "string", "the claimed effect a person settled"),
        ("seq", "integer", "the record's position in its run"),
        ("applied", "boolean", "whether the person found that the effect landed"),
        ("by", "string", "who checked"),
        ("recorded_at", "string", "when it was written"),
        ("note", "string", "what they saw; may be empty"),
        (
            "origin",
            "string or null",
            (
                "what wrote it: `person` (`ledger resolve`), `worker` (a program's"
                " `EffectLog.resolve`) or `reconciler` (one that said `allow_self=True`);"
                " `null` when written before the store recorded it"
            ),
        ),
        ("os_user", "string or null", "the OS user of the process that wrote it"),
        ("host", "string or null", "the host it ran on"),
        ("program", "string or null", "`ledger resolve`, or the program's script name"),
        ("pid", "integer or null", "its process id"),
    ),
    "decision": (
        ("effect_id", "string", "the claimed effect"),
        ("step", "string", "`done`, `wait`, `retry` or `escalate`"),
        ("reason", "string", "why, in one sentence"),
        ("idempotency_key", "string", "the key a retry carries"),
    ),
    "outcome": (
        ("effect_id", "string", "the claimed effect"),
        ("seq", "integer", "the record's position in its run"),
        ("execution", "string", "`running`, `reported_success`, `failed` or `interrupted`"),
        ("impact", "string", "`none`, `possible` or `certain` (`possible` when interrupted)"),
        ("execution_id", "string or null", "the tool's own id for the call, if it gave one"),
        ("replayed", "boolean", "whether recovery wrote it"),
        ("recorded_at", "string", "when it was written"),
        (
            "result",
            "JSON value or null",
            (
                "what the call returned, as recorded; `null` when not recorded, or a recorded "
                "`null`: `result_recorded` tells them apart"
            ),
        ),
        ("result_recorded", "boolean", "whether `result` was recorded"),
    ),
    "observation": (
        ("observation_id", "string", "the observation, unique in its run"),
        ("seq", "integer", "the record's position in its run"),
        ("resource", "resource reference", "what was looked at"),
        (
            "mechanism",
            "string",
            "`filesystem_read`, `filesystem_stat`, `record_read` or `backend_query`",
        ),
        ("coverage", "string", "`complete` or `partial`"),
        ("source_action_id", "string", "the agent's action that looked"),
        ("exists", "boolean or null", "whether the resource exists; `null` when not known"),
        ("sha256", "string or null", "the digest of its content, when read"),
        ("revision", "string or null", "its revision, when known"),
        ("recorded_at", "string", "when it was written"),
    ),
    "resource reference": (
        ("kind", "string", "`fs` (a file or directory), `owned` (a record) or `external` (a URI)"),
        ("locator", "string", "`fs`: the real absolute path; `owned`: the record's identity"),
        ("role", "string", "how the effect relates to it, e.g. `target`"),
        ("revision", "string or null", "the record revision it points at, when known"),
    ),
    "operation": (
        ("name", "string", "the tool's name"),
        ("backend", "string", "a backend and version label; may be empty"),
        ("args_sha256", "string", "the digest of the call's canonical arguments"),
    ),
    "postcondition": (
        ("target", "resource reference", "what it is about"),
        ("predicate", "string", "`exists`, `absent`, `sha256` or `revision`"),
        (
            "expected",
            "string or null",
            "the digest for `sha256`, the revision for `revision`, else `null`",
        ),
    ),
    "assessment": (
        ("effect_id", "string", "the claimed effect"),
        ("verdict", "string", "`pending`, `verified`, `unverified`, `contradicted` or `failed`"),
        ("execution", "string or null", "the current outcome's execution; `null` with none"),
        ("impact", "string or null", "the current outcome's impact; `null` with none"),
        ("unresolved_impact", "boolean", "it may have changed the world, nobody can say how"),
        ("evidence", "array of string", "the `observation_id`s the verdict rests on"),
        ("stale", "array of string", "observations of its targets a later claim made stale"),
        ("resolution", "string or null", "`applied` or `not_applied` once a person settled it"),
    ),
}


def _anchor(shape: str) -> str:
    return shape.replace(" ", "-")


def _type_cell(type_text: str) -> str:
    """The type with every shape name linked to its table."""
    alternatives = []
    for alternative in type_text.split(" or "):
        _, array, name = alternative.rpartition("array of ")
        link = f"[{name}](#{_anchor(name)})" if name in SHAPES else name
        alternatives.append(f"{array}{link}")
    return " or ".join(alternatives)


def shape(name: str, intro: str = "") -> str:
    """A shape's heading and table of keys."""
    rows = "".join(
        f"| `{key}` | {_type_cell(type_text)} | {meaning} |\n"
        for key, type_text, meaning in SHAPES[name]
    )
    lead = f"{intro}\n\n" if intro else ""
    return f"### {name}\n\n{lead}| key | type | meaning |\n| --- | --- | --- |\n{rows}"


_ASSESSMENT = "The verdict on one claim, by the rules in [concepts.md](concepts.md#verdicts)."
_DECISION = (
    "What to do next about one effect, by the rules in"
    " [concepts.md](concepts.md#kinds-keys-and-decisions)."
)
RECORDS = f"""\
## JSON records

The records of a run and the assessment of an effect, as `ledger show --json`,
`ledger recover --json` and `ledger export` print them: each is the `to_dict()` of its
class in [`ledger.effects`](api.md), and `X.from_dict()` reads it back. What the fields
mean is in [concepts.md](concepts.md). A `JSON value` is any JSON value (`null`
included), printed whole: a claim's recorded arguments and an outcome's recorded result,
as the store holds them.

{shape("claim", "Written before the tool is invoked.")}
{shape("outcome", "How the call of a claimed effect ended, or that it is still running.")}
{shape("observation", "What the worker saw of a resource.")}
{shape("resolution", "A person's word, after checking the world, that an effect landed or not.")}
{shape("approval request", "A call waiting for a person's yes, bound to its action digest.")}
{shape("approval decision", "A person's answer to an approval request, at most one.")}
{shape("resource reference")}
{shape("operation")}
{shape("postcondition")}
{shape("assessment", _ASSESSMENT)}
{shape("decision", _DECISION)}"""
