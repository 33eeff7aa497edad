"""The command reference, ``docs/cli.md``, generated from the click commands themselves.

``python -m tools.clidoc`` prints the whole file (``make docs`` writes it), and
``python -m tools.clidoc --check [PATH]`` exits 1 when the file differs from what it
would print. Each command gets a ``## ledger <cmd>`` section, in the order
``ledger/cli.py`` adds the commands to its group, holding its ``--help`` exactly as click prints
it on any terminal at least 80 columns wide, then the hand-written notes of
:data:`NOTES` (what it reads or writes, its ``--json`` shape as tables of keys and
types), then an example of its output. The examples are built from the library's own
records and ``to_dict()`` methods with fixed values, so they need no clock, disk or
host. Like :mod:`ledger.cli`, this module imports click: it documents click commands.

It lives outside the package, so it is not installed: it writes into ``docs/``, which
exists only in a checkout of the repository.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from ledger import _inspect, _jsonl
from ledger._owner import Writer
from ledger.cli import main as ledger_main
from ledger.effects import (
    Coverage,
    EffectClaim,
    EffectOutcome,
    ExecutionOutcome,
    History,
    Impact,
    Observation,
    ObservationMechanism,
    OperationRef,
    Postcondition,
    Predicate,
    Resolution,
    ResolutionOrigin,
    ResourceRef,
    args_digest,
    assess,
    decide,
    idempotency_key,
)

__all__ = ["DOC", "NOTES", "WIDTH", "document", "render", "run"]

# click formats help at min(terminal columns, 80) - 2: this is what `ledger X --help`
# prints on any terminal at least 80 columns wide, and it does not depend on this one.
WIDTH = 78
DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
MAKE_TARGET = "make docs"

# --------------------------------------------------------------------------- examples

_RUN_A = "3f9c2a7e5b1d4c8f9a0b6e2d7c4f1a93"
_RUN_B = "b81e0c5d2f7a4e6b9c3d1a8f5e2b7c40"
_RUN_C = "c2d94e7a1b3f4a6d8e0c5b7a9f1d3e62"
_SANDBOX = "/srv/agent/sandbox"
_STORE = "/home/agent/.local/state/ledger"
_WRITER = Writer("worker-1", None, 48213, None)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _example_run_a() -> tuple[History, str, str]:
    """A verified effect: claim, outcome and observation, as the README's example writes."""
    hello = ResourceRef("fs", f"{_SANDBOX}/hello.txt", "target")
    digest = _sha(b"hello, world\n")
    args = {"content": "hello, world\n", "path": "hello.txt"}
    claim = EffectClaim(
        effect_id="write-hello",
        seq=1,
        action_id="step-1",
        operation=OperationRef("write_file", "fs/1", args_digest(args)),
        impact_scope=(hello,),
        obligations=(Postcondition(hello, Predicate.SHA256, digest),),
        recorded_at="2026-03-01T09:15:02.118734+00:00",
        idempotency_key=idempotency_key(_RUN_A, "write-hello"),
        step="call_7f3a",
        args=args,
    )
    outcome = EffectOutcome(
        effect_id="write-hello",
        seq=2,
        execution=ExecutionOutcome.REPORTED_SUCCESS,
        impact=Impact.CERTAIN,
        recorded_at="2026-03-01T09:15:02.164021+00:00",
        result={"bytes_written": 13},
    )
    observation = Observation(
        observation_id="check-1",
        seq=3,
        resource=hello,
        mechanism=ObservationMechanism.FILESYSTEM_READ,
        coverage=Coverage.COMPLETE,
        source_action_id="step-2",
        exists=True,
        sha256=digest,
        revision=None,
        recorded_at="2026-03-01T09:15:02.171590+00:00",
    )
    history = History((claim,), (outcome,), (observation,))
    return history, claim.recorded_at, observation.recorded_at


def _example_run_b() -> tuple[History, EffectOutcome]:
    """An effect whose worker died mid-call, recovered as interrupted."""
    notes = ResourceRef("fs", f"{_SANDBOX}/notes.md", "target")
    claim = EffectClaim(
        effect_id="append-notes",
        seq=1,
        action_id="step-3",
        operation=OperationRef("append_file", "fs/1", _sha(b'{"path":"notes.md"}')),
        impact_scope=(notes,),
        obligations=(Postcondition(notes, Predicate.EXISTS),),
        recorded_at="2026-03-01T09:17:40.502317+00:00",
        idempotency_key=idempotency_key(_RUN_B, "append-notes"),
    )
    recovered = EffectOutcome(
        effect_id="append-notes",
        seq=2,
        execution=ExecutionOutcome.INTERRUPTED,
        impact=Impact.POSSIBLE,
        replayed=True,
        recorded_at="2026-03-01T09:21:05.930112+00:00",
    )
    return History((claim,), (recovered,), ()), recovered


def _examples() -> dict[str, object]:
    """What each command prints, for the example stores above."""
    history_a, first_a, last_a = _example_run_a()
    history_b, recovered = _example_run_b()
    effects_a = [assess(c, history_a) for c in history_a.claims]
    effects_b = [assess(c, history_b) for c in history_b.claims]
    counts = dict.fromkeys(_inspect.VERDICTS, 0)
    runs = [
        _inspect.RunSummary(
            _RUN_A, first_a, last_a, _WRITER, 1, counts | {effects_a[0].verdict.value: 1}
        ),
        _inspect.RunSummary(
            _RUN_B,
            history_b.claims[0].recorded_at,
            recovered.recorded_at,
            Writer("worker-1", None, 48377, None),
            1,
            counts | {effects_b[0].verdict.value: 1},
        ),
    ]
    status = [
        _inspect.EffectRow(
            run_id=run_id,
            seq=claim.seq,
            effect_id=claim.effect_id,
            operation=claim.operation.name,
            execution=None if a.execution is None else a.execution.value,
            impact=None if a.impact is None else a.impact.value,
            verdict=a.verdict.value,
            unresolved_impact=a.unresolved_impact,
            claimed_at=claim.recorded_at,
            kind=claim.kind.value,
            idempotency_key=claim.idempotency_key,
            resolution=a.resolution,
            next_step=decide(claim, history).step.value,
            step=claim.step,
        )
        for run_id, history, a in (
            (_RUN_A, history_a, effects_a[0]),
            (_RUN_B, history_b, effects_b[0]),
        )
        for claim in history.claims
    ]
    resolution = Resolution(
        effect_id="append-notes",
        seq=3,
        applied=False,
        by="alice",
        recorded_at="2026-03-01T09:40:12.004518+00:00",
        note="notes.md unchanged since before the call",
        origin=ResolutionOrigin.PERSON,
        os_user="alice",
        host="ops-1",
        program="ledger resolve",
        pid=48213,
    )
    recover = [
        _inspect.Recovery(_RUN_B, (recovered,)),
        _inspect.Recovery(_RUN_C, skipped="a live process has it loaded"),
    ]
    return {
        "runs": [r.to_dict() for r in runs],
        "show": _inspect.RunReport(
            _RUN_A, _WRITER, history_a, tuple(effects_a), _inspect.decide_all(history_a)
        ).to_dict(),
        "resolve": resolution.to_dict(),
        "status": [r.to_dict() for r in status],
        "recover": [r.to_dict() for r in recover],
        "verify": _inspect.VerifyReport(2, 5, ()).to_dict(),
        "export": [
            {"v": _jsonl.FORMAT_VERSION, "type": r.record_type, "record": r.to_dict()}
            for r in history_a.records()
        ],
        "import": [_jsonl.Imported(Path(f"{_RUN_A}.jsonl"), _RUN_A, 3, torn_tail=False).to_dict()],
        "path": {"path": f"{_STORE}/ledger.sqlite3", "exists": True},
        "migrate": {"store": _STORE, "action": "created", "from": None, "revision": "0012"},
        "head": _inspect.Head(_RUN_A, len(history_a.records()), "5" * 64).to_dict(),
    }


_EXAMPLE_COMMANDS = {
    "runs": "ledger runs --json",
    "show": "ledger show 3f9c --json",
    "resolve": (
        "ledger resolve b81e append-notes --not-applied --by alice"
        " --note 'notes.md unchanged since before the call' --json"
    ),
    "status": "ledger status --json",
    "recover": "ledger recover --dead --json",
    "verify": "ledger verify --json",
    "export": "ledger export 3f9c",
    "import": f"ledger import {_RUN_A}.jsonl --json",
    "path": "ledger path --json",
    "migrate": "ledger migrate --json",
    "head": "ledger head 3f9c --json",
}

# --------------------------------------------------------------------------- prose

_TITLE = """\
# The `ledger` command

<!-- Generated by `make docs` (python -m tools.clidoc) from tools/clidoc.py and the
     click commands of ledger/cli.py and ledger/_cli/: edit those, then regenerate. -->

`ledger` inspects, verifies and recovers effect ledger stores. It is installed with the
package as a console script; `python -m ledger` is the same command. Every command
parses its arguments, makes one library call and prints the result: an aligned table
for people, or JSON for scripts with `--json`.
"""

_GENERAL = """\
## Which store

Every command takes `--store DIR|URL`: a store directory (SQLite), or the URL of a
PostgreSQL store, `postgresql://...` ([postgresql.md](postgresql.md)). Without it the
store is the first of:

1. `$LEDGER_URL`, when it is set and not empty;
2. `$LEDGER_DIR`, when it is set and not empty;
3. `$XDG_STATE_HOME/ledger`, when `XDG_STATE_HOME` is an absolute path;
4. `~/.local/state/ledger`.

That is the library's default store, so `ledger` finds the store a worker
uses when it runs with the worker's environment. A relative `DIR` is taken from the
current directory. The database is the file `ledger.sqlite3` in the store directory:
`ledger path` prints its path. A `--store` that names a file is a usage mistake; given
that database file, it names the directory to give instead.

## Reading commands never change the store

`runs`, `show`, `status`, `verify`, `export`, `report` and `sql` open the store
read-only, and `path` does not open it at all. No statement they run can write, they never take the
write lock, and a store that does not exist is an error, never created. When every
commit is in the database file (there is no `-wal` file, or an empty one) `runs`,
`show`, `status`, `verify`, `export` and `report` read it `immutable`, creating and changing no
file at all, and read it again `mode=ro` if the store changed while they read.
Otherwise they read `mode=ro`, which sees the commits still in the WAL and may update
the `-shm` index (it holds no records). `sql` opens the `sqlite3` shell `mode=ro`, for
which SQLite may create an empty `-wal` and `-shm`. The details, and what each kind of
reader does to the files, are in [forensics.md](forensics.md#open-it-read-only).

Every command checks the store's directory and files before SQLite opens them, and
refuses in one line a symlink, a file with more than one hard link, a fifo or directory
in place of a file, and a directory or file that group or others may write. A store
owned by another user is read from a private copy, so that no file of it changes; it
can only be written by its owner. See [storage.md](storage.md#files-and-trust). Text
from the store (locators, ids, host names) is printed with every character that is not
printable escaped (`\\x1b`, `\\x0a`, `\\u202e`), and as `\\uXXXX` in `--json`.

`recover`, `import` and `demo` write, as a worker does: in transactions that are on
disk when the command returns, holding the run's lock in the store's `ledger.lock`
(created if missing). `import` and `demo` create the store if it does not exist.
`export -o FILE` and `report -o FILE.html` write FILE, not the store.

## Output

- Tables go to standard output: aligned columns, `-` where a value is unknown. Only
  when standard output is a terminal are the headings bold and the verdicts coloured
  (verified green, failed blue, pending and unverified yellow, contradicted red); piped
  or redirected output carries no escape codes.
- `verify` and `import` draw a progress bar on standard error, only when standard error
  is a terminal; otherwise standard error carries nothing but errors. Standard output
  carries only the result, so `ledger verify --json | jq .ok` works.
- An error is one line on standard error, `Error: ` and the message, never a traceback.
  A usage mistake that click detects (an unknown option, a missing argument) prints the
  usage line and a hint first.
- `--json` prints one JSON document on standard output, indented by two spaces, with
  non-ASCII characters as they are (UTF-8). Every key is always present: a value that is
  unknown or does not apply is `null`. Timestamps are UTC, ISO 8601 with an explicit
  offset (`2026-03-01T09:15:02.118734+00:00`); enumerations are the lowercase words the
  database stores (`reported_success`, `possible`, `verified`); digests are 64
  lowercase hex characters and run ids 32. Each command's section below gives its shape
  as tables of keys and types, and an example; the records that several commands
  share are at [JSON records](#json-records).

## Exit codes

- **0**: the command did what was asked; `verify` found the store clean.
- **1**: storage or integrity trouble: no store in that directory; a database file that
  is a symlink, not a regular file, not a database, corrupt, or at a schema revision
  this version does not know; a record that does not validate; a full disk; an import
  file that is refused. And `verify` when it found a problem (its report is the output).
- **2**: a usage mistake: an unknown command or option, a missing argument, a RUN that
  is not a run id or that matches no run or more than one, a `--store` that names a
  file, `recover` with both or neither of RUN and `--dead`, `import --run` with more
  than one file.

`ledger` with no command prints its help and exits 2. `demo` exits 1 when the demo did
not go as scripted. `sql` becomes the `sqlite3` shell, so its exit code is the shell's
(or 1 when the shell is not installed or there is no store).
"""

# The JSON shapes: for each object, its keys in the order they are printed, each with
# its type and meaning. A type is `string`, `integer`, `boolean`, `null`, `JSON value`
# (any JSON value, `null` included), `array of T`, the name of another shape, or
# alternatives joined by " or ". tests/cli/test_cli_docs.py reads these tables back from
# docs/cli.md and checks real output against them.
_SHAPES: dict[str, tuple[tuple[str, str, str], ...]] = {
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
    ),
    "writer": (
        ("host", "string", "the host name it ran on"),
        ("pid", "integer", "its process id"),
        ("name", "string or null", "the name it gave; `null` if none"),
    ),
    "record entry": (
        ("type", "string", "`claim`, `outcome`, `observation` or `resolution`"),
        ("record", "claim or outcome or observation or resolution", "the record, as `type` says"),
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
        ("type", "string", "`claim`, `outcome`, `observation` or `resolution`"),
        ("record", "claim or outcome or observation or resolution", "the record, as `type` says"),
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
        link = f"[{name}](#{_anchor(name)})" if name in _SHAPES else name
        alternatives.append(f"{array}{link}")
    return " or ".join(alternatives)


def _shape(name: str, intro: str = "") -> str:
    """A shape's heading and table of keys."""
    rows = "".join(
        f"| `{key}` | {_type_cell(type_text)} | {meaning} |\n"
        for key, type_text, meaning in _SHAPES[name]
    )
    lead = f"{intro}\n\n" if intro else ""
    return f"### {name}\n\n{lead}| key | type | meaning |\n| --- | --- | --- |\n{rows}"


_ASSESSMENT = "The verdict on one claim, by the rules in [concepts.md](concepts.md#verdicts)."
_DECISION = (
    "What to do next about one effect, by the rules in"
    " [concepts.md](concepts.md#kinds-keys-and-decisions)."
)
_RECORDS = f"""\
## JSON records

The records of a run and the assessment of an effect, as `ledger show --json`,
`ledger recover --json` and `ledger export` print them: each is the `to_dict()` of its
class in [`ledger.effects`](api.md), and `X.from_dict()` reads it back. What the fields
mean is in [concepts.md](concepts.md). A `JSON value` is any JSON value (`null`
included), printed whole: a claim's recorded arguments and an outcome's recorded result,
as the store holds them.

{_shape("claim", "Written before the tool is invoked.")}
{_shape("outcome", "How the call of a claimed effect ended, or that it is still running.")}
{_shape("observation", "What the worker saw of a resource.")}
{_shape("resolution", "A person's word, after checking the world, that an effect landed or not.")}
{_shape("resource reference")}
{_shape("operation")}
{_shape("postcondition")}
{_shape("assessment", _ASSESSMENT)}
{_shape("decision", _DECISION)}"""
NOTES: dict[str, str] = {
    "": """\
`ledger --version` prints the version of the installed package; `-h` is short for
`--help` everywhere.
""",
    "runs": f"""\
Reads the store. One row per run, oldest first: its id, when its first and its last
record were written, its writer (`host:pid`; `-` when none is recorded, as for an
imported run), how many effects it claimed, and how many of them have each verdict.
The writer is the last process that wrote the run: after a recovery, the process that
recovered it.

`--json` prints an array of [run](#run) objects, oldest first.

{_shape("run")}""",
    "show": f"""\
Reads the store. RUN is a run id or a unique prefix of one, in lowercase hex, the way
git takes commit prefixes; a RUN that matches no run or more than one is a usage
mistake (exit 2). Without RUN, it shows the run that wrote last (the newest record of
the store), and says which on stderr; on a store with no run, that is a usage mistake.
The run is validated as `EffectLog.load` validates it: a record that
does not validate is an error (exit 1), never skipped. It prints the writer, then the
timeline (every claim, outcome and observation in `seq` order), then one row per
effect: its operation, the execution and impact of its current outcome, its verdict,
whether its impact is unresolved, and the observations that are evidence for it or
stale.

The text is made to be read in about 120 columns. When every record of the run is of
one day, the title says which (UTC) and each record shows its time of day. Ids longer
than 15 characters (and idempotency keys) show their first 12, then `...`; a unique
prefix names a run or an effect anywhere a command takes one, and each effect's whole
id starts its line of advice at the end. A locator longer than 40 characters shows its
end, `...` first (a path's file name is at its end), and a claim does not name its one
resource again in what it expects of it. A record's text goes on over several lines,
under its column, broken after a `;`.

In the timeline a claim shows its step, when it has one, and its recorded arguments;
an outcome shows its recorded result (`result null` for a recorded `null`). Nothing is
shown of a value that was not recorded. Each is compact JSON, cut after 50 characters
(40 for a step) with the whole length said, `... (2417 chars)`; `--json` and
`ledger export` hold them whole.

`--json` prints one [run report](#run-report) object.

{_shape("run report")}
{_shape("writer")}
{_shape("record entry")}""",
    "status": f"""\
Reads the store. One row per claimed effect across all runs, oldest claim first, with
the verdict the `effect_status` view computes (the same rules as `assess`; see
[forensics.md](forensics.md#effect_status)), its kind and what to do next (`decide`:
`done`, `wait`, `retry` or `escalate`). `--run` keeps the effects of one run (an
id or a unique prefix). `--unresolved` keeps the effects whose impact is unresolved
(pending, unverified or contradicted, with an impact that is not `none`): the incident
list after a crash. Every run in scope is validated: `--unresolved` also shows every
effect of a run that does not validate (its `run_problem` set), none of whose verdicts
can be believed, a warning on standard error names each such run, and the command
exits 1.

`--json` prints an array of [effect row](#effect-row) objects, oldest claim first.

`--attention` keeps only what needs a person, most urgent first (see
[operations.md](operations.md)): effects whose next step is `escalate` (urgency 1: a
reported success the evidence contradicts; 2: irreversible; 3: a write that may have
landed), then claims with no outcome whose run no live process holds (4: recover the
run). Whether a run is held is asked of its lock, never taken. Each is printed with the
command that settles it; the command exits 1 when anything is listed, 0 when nothing
is. `--json` then prints an array of [effect row](#effect-row) objects with three more
keys: `urgency` (an integer, 1 to 4 as above), `reason` (why a person is needed) and
`action` (the command that settles it; `NAME` and the choice between `--applied` and
`--not-applied` are the person's).

{_shape("effect row")}""",
    "report": """\
Reads the store, and writes FILE.html (replaced if it exists, mode 0600 like the store:
the page holds what the store holds), then prints its absolute path. One self-contained
HTML page for a person to look at after an incident, to open in any browser, mail or
attach to a ticket: its style and its little script (the filters) are inline, and it
loads nothing, from anywhere (its Content-Security-Policy says `default-src 'none'`
and allows only its own style and script, by hash).

- **Incidents**, at the top: every effect whose impact is unresolved, in the runs the
  page shows (the rows of `ledger status --unresolved`), with its run, operation, kind,
  execution, impact, verdict, when it was claimed, its decision and the reason for it
  (`decide`), and the exact commands for the next step: `ledger recover RUN` for a
  claim that has no outcome (once its worker is dead); else the two `ledger resolve`
  commands that record a person's word once they have checked whether it landed.
- **Runs**: a summary row per run (first and last record, writer, claims, how many
  effects have each verdict, and whether its rows and hash chain validate). The page
  runs `ledger verify` on the whole store when it is written and says what it found;
  a run that does not validate is listed, with its problem, but not drawn, and the
  command exits 1 after writing the page, as `runs` and `status` do.
- **Timelines**: per run, an SVG drawing with one lane per effect, from its claim to
  the outcome that ends it (dashed when none does), records placed in `seq` order with
  times on the axis and a dotted line at each pause of 10 s or more. Colour gives the
  verdict and so does a label with a symbol (✓ verified, ✗ failed, … pending,
  ? unverified, ! contradicted); an interrupted outcome is a red cross labelled
  `interrupted (recovery)` or `interrupted (worker)`; triangles are observations of the
  effect's targets, filled when the verdict rests on them. Hovering a lane or a mark
  shows its fields; below the drawing, a table gives every field of every record drawn,
  with a claim's step and recorded arguments and an outcome's recorded result as compact
  JSON (cut after 2,000 characters, 200 in a tooltip; nothing for a value not recorded).

Without RUN, every run of the store; RUN (an id or a unique prefix, several allowed)
chooses runs, as `show` takes them. `--unresolved` keeps the runs holding an effect
whose impact is unresolved. `--since TIME` keeps the runs that wrote a record at or
after TIME: an ISO 8601 date or time (`2026-03-01`, `2026-03-01T09:15:00`, UTC unless
it carries an offset) or a duration back from now (`90s`, `30m`, `2h`, `7d`). A TIME
that is neither is a usage mistake (exit 2).

Large runs are summarised so that the page opens quickly: a timeline draws at most 200
lanes (every effect with unresolved impact first, then the others in claim order), and
per lane at most 40 observations besides those its verdict rests on or found stale; a
run's table lists the records drawn, at most 1,000, folded away when there are more than
300; at most the 20 newest runs are drawn, the others only summarised. The page says
what it left out each time, and `ledger show RUN` or `ledger export RUN` lists
everything. A run of 10,000 records gives a page of about 1 MB in a few seconds.
""",
    "resolve": """\
Writes to the store. After a person has checked the world, records what they found
about EFFECT of RUN (a run id or a unique prefix): `--applied` (it landed) or
`--not-applied` (it did not); one of the two is required. `--by` names who checked, and
`--note` says what they saw. The resolution is a record of the run, append-only and
chained like the others; an effect is resolved at most once (a second resolve is an
error, exit 1). It records the command's process beside `--by` (origin `person`, the OS
user, host, program and pid), which `ledger show` prints. It leaves the verdict as the
evidence says, takes the effect off the incident list (`status --unresolved`), and sets
its next step: `done` when applied,
`retry` (with the same idempotency key) when not
([concepts.md](concepts.md#kinds-keys-and-decisions)).
The run is loaded as a worker loads it, so it is refused while another process is
recovering it.

`--json` prints one [resolution](#resolution) object: the one written.""",
    "recover": f"""\
Writes to the store. To every claim of the run that has no outcome at all it appends
an outcome `interrupted`, impact `possible`, `replayed: true`, in one transaction, as
`EffectLog.recover_interrupted` does; claims with a `running` outcome are left alone
(their call may still be running). Recovery is idempotent: a second time there is
nothing to recover. It never says that an effect happened: observe the resources
afterwards ([concepts.md](concepts.md#recovery)).

A run is in use while a live process has it loaded (an `EffectLog` of it is open, even
one that only reads): that process holds a lock on the run in the store's
`ledger.lock`, which the kernel drops when the process exits or is killed, whatever
its pid namespace or container ([storage.md](storage.md#liveness)). The recorded
writer shown by `runs` plays no part. RUN (a run id or a unique prefix of one) is
refused while in use (exit 1, naming its last recorded writer); `--force` recovers it
all the same, for a process you know to be dead or hung whose lock the kernel still
holds (a stopped process, say): that process's next write then fails. `--dead`
considers every run with a claim that has no outcome and recovers those no live
process has loaded; the others are left alone, and the output says why. Give RUN or
`--dead`, not both.

Recovers running at the same moment do not collide: the lock lets one recover a run,
and the others leave it alone (`another process is recovering it`) and exit 0. No
claim is ever marked interrupted twice.

`--json` prints an array of [recovery](#recovery) objects, one per run considered (an
empty array when `--dead` finds nothing to recover).

{_shape("recovery")}""",
    "verify": f"""\
Reads the store. Checks the database file (`PRAGMA integrity_check`), that the schema
is at the current revision with every guard (trigger, index, view) in place, that every
record belongs to a run, and that every run loads and validates as `EffectLog.load`
would load it (its chain, and that every `recorded_at` is in the form ledger writes and
no outcome is dated before its claim). Each problem is one line: `integrity: ...`, `schema: ...` or
`run <run_id>: ...`. Exits 0 when there is none, else 1, with or without `--json`.

`--json` prints one [verify report](#verify-report) object.

{_shape("verify report")}""",
    "export": f"""\
Reads the store. RUN is a run id or a unique prefix of one. The run is validated first,
and nothing is printed if a record does not validate (exit 1). The format is the one of
the earlier file-based effect logs, which `ledger import` reads back: compact JSON, one
record per line in `seq` order, each line ending with a newline. `-o FILE` writes FILE
instead of standard output: a new file, mode 0600, renamed into place, so an existing
FILE is replaced, a symlink too, never written through.

It prints one [exported line](#exported-line) object per line. A claim carries its
`step` and recorded `args`, an outcome its recorded `result` and `result_recorded`,
whole; `import` reads them back, and a run exported then imported verifies.

{_shape("exported line")}""",
    "import": f"""\
Writes to the store, and creates it if it does not exist. Each FILE becomes a new run,
all or nothing: the whole file is read and validated (every line an
[exported line](#exported-line), `seq` 1, 2, 3, ... without a gap, a history a durable
run can hold) before one transaction writes it. Every `recorded_at` must be exactly in
the form ledger writes, `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (not `Z`, not without the
microseconds), and no outcome may be recorded before its claim; either is refused,
naming the line and `recorded_at`; `verify` and `EffectLog.load` apply the same rules.
(A ledger dates an outcome no earlier than its claim, even when the wall clock stepped
back between the two; a run written by an older version whose clock did so is refused
here, as by `verify` and `load`.) The run id is the file's name without
`.jsonl` (32 lowercase hex), or `--run` for a single file; a run the store already
holds is refused. A final line cut short by a crash mid-append (not JSON) is ignored
and reported. Any other malformed or forged line refuses the file, naming the line
(exit 1), and nothing of that file is written; the files before it stay imported.
Symlinks, files with more than one hard link and files that are not regular files are
refused too. Lines exported before claims had a step and recorded arguments, and
outcomes a recorded result, still import: their claims have no step and no recorded
arguments, their outcomes no recorded result. The store chains the imported records
afresh, recorded values included.

`--json` prints an array of [imported file](#imported-file) objects, one per file, in
the order given.

{_shape("imported file")}""",
    "head": f"""\
Reads the store. Checks the run's whole hash chain (every record row carries the hash
of the one before it, see [forensics.md](forensics.md#9-verify-a-runs-hash-chain)) and
prints its head, `RUN:SEQ:HASH`. The chain shows any change inside a run; keeping the
head somewhere the store's users cannot write also shows a run that was truncated, or
whose chain was recomputed after a change: `ledger verify --anchor RUN:SEQ:HASH`.

`--json` prints one [run head](#run-head) object.

{_shape("run head")}""",
    "migrate": f"""\
Writes the store: creates it (a directory and its database, or the tables of a
PostgreSQL schema), or applies the migrations it lacks, exactly as a worker's first
write would, with every check of its files and schema. It prints what it did: created,
upgraded from one schema revision to the next, or already at the newest. Running it
again changes nothing. A store at a revision this version does not know (a newer
version wrote it) and a database that holds tables but no ledger schema are refused in
one line (exit 1), unchanged.

On PostgreSQL, run it as the role that owns the schema, before the workers start (or
after upgrading the package, before the workers are upgraded): see
[postgresql.md](postgresql.md#roles).

`--json` prints one [migration](#migration) object.

{_shape("migration")}""",
    "path": f"""\
Prints the path of the database file, `ledger.sqlite3` in the store directory (see
[Which store](#which-store)), without opening it: it creates nothing and works when
there is no store yet.

`--json` prints one [store path](#store-path) object.

{_shape("store path")}""",
    "mcp-proxy": """\
Writes the store: one run per proxy process, one effect per `tools/call`. Needs the
MCP SDK (`pip install 'tool-ledger[mcp]'`); without it, it says so in one line and
exits 1. Standard input and output carry the client's MCP messages; standard error
carries one line per run started or recovered and per call refused. It exits with the
server's status (128 + the signal's number if a signal killed it). How to put it in a
client's configuration, what it records and what it answers itself are in
[mcp.md](mcp.md).

```sh
ledger mcp-proxy --name files --kind send_mail=irreversible -- python -m my_server
```
""",
    "sql": """\
Reads the store. Replaces itself with the stock `sqlite3` shell, opened on the
database with `-safe -readonly -nofollow` and `mode=ro`, so that no statement can change
the store, `.open`, `ATTACH`, `.shell` and `writefile()` are refused, and a symlinked
database is not followed; the tables, views and recipes for an incident are in
[forensics.md](forensics.md). Only when you cannot write the store's directory and its
`-wal` is missing or empty does it open the database `immutable` instead, and it says
so on standard error: quit such a session before workers write to the store again. A
store owned by another user is copied into a private directory first, the shell runs on
the copy (later writes do not reach it), and the copy is removed when the shell exits.

Every argument goes to `sqlite3` after the database, in order: options
(`-box`, `-json`, `-separator ,`) and then SQL statements or dot-commands.

```sh
ledger sql                     # an interactive shell on the default store
ledger sql -box "SELECT run_id, effect_id, verdict FROM effect_status"
```

It needs the `sqlite3` program (Debian and Ubuntu: `apt install sqlite3`).
""",
    "demo": """\
Writes to the store: a new run. It starts a scripted agent worker that writes files
into a temporary sandbox, one claimed effect at a time, kills it with SIGKILL in the
middle of one write, and starts it again on the same run: the worker loads the log,
recovers the interrupted claim, observes every file and finishes. Then it prints each
effect's execution, impact and verdict, and the `sqlite3` command that shows the same
table from the `effect_status` view. With `--report FILE.html` it then writes the run's
page (see [report](#ledger-report)) and prints its path last. Without `--store` the run
goes to the default store; `make demo` uses `.demo/store` and writes
`.demo/report.html`. Exits 0 when the demo went as scripted, else 1.
""",
    "bench": """\
Writes only in a scratch directory, `ledger-bench-*`, that it creates in DIR and removes
afterwards; it never touches a store. Here `--store` names where to measure, not a
store: DIR must exist and be writable, and a DIR that is missing, a file or not
writable is refused with exit 1. Without `--store` it is the directory that holds the
default store (see [Which store](#which-store)), or its nearest existing ancestor: the
disk the claims of workers go to. A full run takes a few minutes; `--quick` measures
less, on a smaller run and store, in under half a minute. Progress lines go to
standard error only when it is a terminal.

Every figure comes from one run. The latency cases run interleaved, a chunk of each
per round in rotating order, so that noise from the rest of the machine falls on all
alike; before that, every SQLite database is written until its WAL has been
checkpointed once, so that all measure the steady state.

| case | what is timed |
| --- | --- |
| `raw` | stdlib `sqlite3`, WAL, `synchronous=FULL`: one claim-shaped row per transaction |
| `jsonl` | a claim's JSON line appended to a file opened `O_APPEND`, then `fsync` |
| `claim` | `EffectLog.claim` with one resource and one postcondition |
| `claim_outcome` | a claim and its outcome |
| `claim_many8` | `claim_many` of 8 claims; `per_claim_p50_us` is the median over 8 |
| `threads1`, `threads8` | 1 or 8 threads started together, each with its own log; claims/s |
| `threads8_shared` | 8 threads started together, all sharing one log; claims/s |
| `processes4` | 4 processes started together, one store; claims/s, `errors`, `max_wait_s` |
| `raw_off`, `cpu_off` | `raw` and `claim` with `synchronous=OFF`: the cost without the disk |
| `sql`, `sql_off` | a claim's SQL alone (FULL, OFF): its row made beforehand, then inserted |
| `mcp_direct`, `mcp_call` | a `tools/call` to a tiny stdio server, direct and via `mcp-proxy` |
| `assess_*` | `log.assess` on a loaded run of 1k and of 100k records (10k with `--quick`) |
| `recover_*` | `recover_interrupted` of 100 claims on those loaded runs |
| `status_*` | every `effect_status` row of those runs, in SQL; `claims` is how many rows |
| `recovery_*` | `load` + `recover_interrupted`, a 1k run in stores of 10k and 1m (quick: 100k) |

The runs and stores of the scale cases are built with `synchronous=OFF` to save time,
and the build times are printed but not counted; every measurement on them runs with
`synchronous=FULL`. `sql` and `sql_off` time what `claim` and `cpu_off` hand SQLite and
nothing else: each claim's row is made beforehand by the library's own code (validated,
encoded, chained), and a stdlib `sqlite3` connection set up as the store's writers are
runs `BEGIN IMMEDIATE`, the schema check, the insert (its guards and `scope_index` row)
and `COMMIT`. The ratios, with their targets: `claim_vs_raw` (claim p50 / raw
p50, at most 1.5), `claim_vs_jsonl` (at most 1.1), `claim_many8_vs_claim` (p50 per claim
in a batch of 8 / claim p50, at most 0.18), `threads8_shared_vs_single` (claims/s of
`threads8_shared` / `threads1`, at least 3; the three thread cases run in turn, in the
same rounds), `cpu_off_vs_raw_off` (at most 4), `assess_100k_vs_1k` (at most 1.5),
`recovery_1m_vs_10k` (at most 1.5) and `status_100k_vs_1k` (per claim, at most 1.5);
`processes4` must have no error and a p99 of at most
5 ms. After them, without a target, come `effect_vs_claim_outcome` (p50s),
`threads8_vs_single` (claims/s, a log per thread), `sql_vs_raw` and `sql_off_vs_raw_off`
(p50s: the part of `claim_vs_raw` and `cpu_off_vs_raw_off` that the schema's SQL costs by
itself, which no Python around it can take away) and `mcp_call_vs_direct` (p50s; what
the proxy adds should be about `claim_outcome`; the MCP cases run only when the MCP SDK
is installed). Missed targets are reported, not an error: the exit status is 0.

`--json` prints one object: `quick`, `store`, `seconds`, `machine` (`cpus`,
`platform`, `python`, `sqlite`), `notes` (strings), `cases` (by name: `what`, `n`,
`p50_us`, `p99_us`, `per_s`, and `records` for the scale cases), `builds` (`name`,
`records`, `seconds`), `ratios`, `targets` and `met` (the eight ratios, in the order
above), `extra_ratios` (`effect_vs_claim_outcome`, `threads8_vs_single`, `sql_vs_raw`,
`sql_off_vs_raw_off`, `mcp_call_vs_direct`) and `processes4` (`claims_per_s`,
`errors`, `max_wait_s`, `p99_us`, `target`, `met`). The figures are this machine's: no
two runs print the same.

`--reads` measures the reading commands instead, each run as its own `ledger` process
(stdout discarded) on stores of one run: of 1 effect, of 1,000 and of 100,000 (10,000
with `--quick`). The cases are `status`, `status_unresolved`, `runs`, `show` and
`report` (`report -o` a page in the scratch directory), each followed by its run's size
(`status_1`, `status_1k`, `status_100k`, ...), with the median wall time and the peak
memory of the process. Their ratios, `status_100k_vs_1k` and so on, are the large run's
time per effect over the small run's, each held to at most 1.5; beside them, without a
target, the same beyond the command's time on one effect. Then `ledger --version`
against `python -c pass`. A command still running after 300 s (120 s with `--quick`)
is stopped and reported so, without a ratio. It takes about ten minutes, and only on a
directory (not a PostgreSQL URL). With `--json`: `reads` (true), `quick`, `store`,
`seconds`, `machine`, `startup` (`ledger_version_s`, `python_pass_s`, `ratio`, `n`),
`cases` (by name: `command`, `effects`, `n`, `median_s`, `max_rss_mb`, `error`),
`per_effect_us` (by command, in µs: the small and the large run's, then each beyond
the fixed cost), `ratios`, `net_ratios`, `target`, `met`, `builds` and `notes`.
""",
}


# --------------------------------------------------------------------------- rendering


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    """The context click makes for ``command``, at a fixed width."""
    return click.Context(
        command, info_name=name, parent=parent, terminal_width=WIDTH, **command.context_settings
    )


def _commands() -> list[tuple[str, click.Command]]:
    """The visible commands, in the order ledger/cli.py adds them."""
    return [(name, c) for name, c in ledger_main.commands.items() if not c.hidden]


def _example(name: str, value: object) -> str:
    if name == "export" and isinstance(value, list):
        lines = "".join(
            json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in value
        )
        return f"```jsonl\n{lines}```\n"
    return f"```json\n{json.dumps(value, indent=2, ensure_ascii=False)}\n```\n"


def _section(title: str, help_text: str, notes: str, example: str | None) -> str:
    parts = [f"## {title}\n\n```text\n{help_text}\n```\n"]
    if notes:
        parts.append(notes)
    if example is not None:
        parts.append(example)
    return "\n".join(parts)


def render() -> str:
    """The command reference: a section per command, with its help, notes and example."""
    root = _context(ledger_main, "ledger", None)
    examples = _examples()
    sections = [_section("ledger", ledger_main.get_help(root), NOTES.get("", ""), None)]
    for name, command in _commands():
        help_text = command.get_help(_context(command, name, root))
        example = None
        if name in examples:
            example = f"Example, `{_EXAMPLE_COMMANDS[name]}`:\n\n" + _example(name, examples[name])
        sections.append(_section(f"ledger {name}", help_text, NOTES.get(name, ""), example))
    return "\n".join(sections)


def _contents() -> str:
    rows = "".join(
        f"| [`{name}`](#ledger-{name}) | {c.get_short_help_str(limit=200)} |\n"
        for name, c in _commands()
    )
    return f"| command | what it does |\n| --- | --- |\n{rows}"


def document() -> str:
    """The whole of docs/cli.md."""
    return f"{_TITLE}\n{_contents()}\n{_GENERAL}\n{render()}\n{_RECORDS}"


# --------------------------------------------------------------------------- entry point


def run(argv: Sequence[str] | None = None) -> int:
    """Print docs/cli.md, or with ``--check`` compare it with a file; return an exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.clidoc", description="Generate the ledger command reference."
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1, with a diff, when the file differs from what would be printed",
    )
    parser.add_argument(
        "path", nargs="?", type=Path, default=DOC, help=f"the file to check (default: {DOC})"
    )
    args = parser.parse_args(argv)
    text = document()
    if not args.check:
        sys.stdout.buffer.write(text.encode())
        sys.stdout.flush()
        return 0
    try:
        current = args.path.read_text(encoding="utf-8")
    except OSError as e:
        sys.stderr.write(f"cannot read {args.path}: {e.strerror}\n")
        return 1
    if current == text:
        return 0
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        text.splitlines(keepends=True),
        str(args.path),
        "generated",
    )
    sys.stderr.writelines(diff)
    sys.stderr.write(f"{args.path} is out of date: run `{MAKE_TARGET}`\n")
    return 1


if __name__ == "__main__":
    sys.exit(run())
