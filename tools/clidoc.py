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
import dataclasses
import difflib
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from ledger import _inspect, _jsonl
from ledger._owner import Writer
from ledger._report.attention import approval_summary
from ledger.cli import main as ledger_main
from ledger.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalSource,
    Coverage,
    EffectClaim,
    EffectKind,
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
    action_digest,
    args_digest,
    assess,
    decide,
    idempotency_key,
)
from tools.clidoc_notes import NOTES
from tools.clidoc_shapes import RECORDS

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


def _example_run_c() -> tuple[History, str]:
    """A refund a person approved and the worker then made, and one still waiting."""
    first = {"amount": 150, "order": "A-1017"}
    claim = EffectClaim(
        effect_id="5e1f0a9c7b3d4e2f8a6c1b0d9e7f3a25",
        seq=3,
        action_id="step-9",
        operation=OperationRef("refund", "payments/2", args_digest(first)),
        impact_scope=(),
        obligations=(),
        recorded_at="2026-03-01T09:31:12.380044+00:00",
        kind=EffectKind.IRREVERSIBLE,
        idempotency_key=idempotency_key(_RUN_C, "5e1f0a9c7b3d4e2f8a6c1b0d9e7f3a25"),
        step="refund#1@7a41c0de93b25f18",
        args=first,
        approval_id="9d2b7c4e1a6f4b3c8e5d0a7f2c9b6e14",
    )
    granted = ApprovalRequest(
        approval_id="9d2b7c4e1a6f4b3c8e5d0a7f2c9b6e14",
        seq=1,
        effect_id=claim.effect_id,
        action_digest=action_digest(claim),
        operation="refund",
        requested_at="2026-03-01T09:24:50.117630+00:00",
        expires_at="2026-03-02T09:24:50.117630+00:00",
        step=claim.step,
        args=first,
        reason="refunds over 100",
        os_user="agent",
        host="worker-1",
        program="refund-bot",
        pid=48213,
    )
    answer = ApprovalDecision(
        approval_id=granted.approval_id,
        seq=2,
        decision="granted",
        by="alice",
        decided_at="2026-03-01T09:30:58.402911+00:00",
        source=ApprovalSource.COMMAND,
        os_user="alice",
        host="ops-1",
        program="ledger approve",
        pid=51022,
        note="customer called",
    )
    outcome = EffectOutcome(
        effect_id=claim.effect_id,
        seq=4,
        execution=ExecutionOutcome.REPORTED_SUCCESS,
        impact=Impact.CERTAIN,
        recorded_at="2026-03-01T09:31:13.002871+00:00",
        result={"refund_id": "rf_8812"},
    )
    waiting = ApprovalRequest(
        approval_id="a61c3e8f2b7d4a90c5e1f6b2d8a4c3e7",
        seq=5,
        effect_id="0c7e2a9f4d1b4c6e8a3f5d2b9e1c7a48",
        action_digest=_sha(b"refund A-1018"),
        operation="refund",
        requested_at="2026-03-01T09:40:07.551208+00:00",
        expires_at="2026-03-02T09:40:07.551208+00:00",
        step="refund#2@e03b9d5c61a8f274",
        args={"amount": 420, "order": "A-1018"},
        reason="refunds over 100",
        os_user="agent",
        host="worker-1",
        program="refund-bot",
        pid=48213,
    )
    history = History((claim,), (outcome,), (), (), (granted, waiting), (answer,))
    return history, "2026-03-01T09:42:31.008114+00:00"


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
    history_c, now_c = _example_run_c()
    views = _inspect.approval_views(_RUN_C, history_c, now_c)
    (claim_c,) = history_c.claims
    used = _inspect.EffectRow(
        run_id=_RUN_C,
        seq=claim_c.seq,
        effect_id=claim_c.effect_id,
        operation=claim_c.operation.name,
        execution="reported_success",
        impact="certain",
        verdict="unverified",
        unresolved_impact=True,
        claimed_at=claim_c.recorded_at,
        kind=claim_c.kind.value,
        idempotency_key=claim_c.idempotency_key,
        resolution=None,
        next_step="done",
        step=claim_c.step,
    )
    decided = ApprovalDecision(
        approval_id=views[1].approval_id,
        seq=6,
        decision="granted",
        by="alice",
        decided_at="2026-03-01T09:44:18.720365+00:00",
        source=ApprovalSource.COMMAND,
        os_user="alice",
        host="ops-1",
        program="ledger approve",
        pid=51388,
        note="",
    )
    refused = dataclasses.replace(
        decided, decision="denied", by="bob", program="ledger deny", note="not this order"
    )
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
        "status": [
            *({**r.to_dict(), "approval": None} for r in status),
            {**used.to_dict(), "approval": approval_summary(views[0])},
        ],
        "approvals": [v.to_dict() for v in views],
        "approve": dataclasses.replace(views[1], decision=decided, state="granted").to_dict(),
        "deny": dataclasses.replace(views[1], decision=refused, state="denied").to_dict(),
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
    "approvals": "ledger approvals --all --json",
    "approve": (
        "ledger approve c2d9 a61c --by alice --expect-digest "
        + _sha(b"refund A-1018")[:12]
        + " --json"
    ),
    "deny": "ledger deny c2d9 a61c --by bob --note 'not this order' --json",
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

`runs`, `show`, `status`, `approvals`, `verify`, `export`, `report` and `sql` open the
store read-only, and `path` does not open it at all. No statement they run can write,
they never take the write lock, and a store that does not exist is an error, never
created. When every commit is in the database file (there is no `-wal` file, or an empty
one) `runs`, `show`, `status`, `approvals`, `verify`, `export` and `report` read it
`immutable`, creating and changing no file at all, and read it again `mode=ro` if the
store changed while they read. Otherwise they read `mode=ro`, which sees the commits
still in the WAL and may update the `-shm` index (it holds no records). `sql` opens the
`sqlite3` shell `mode=ro`, for which SQLite may create an empty `-wal` and `-shm`. The
details, and what each kind of reader does to the files, are in
[forensics.md](forensics.md#open-it-read-only).

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
    return f"{_TITLE}\n{_contents()}\n{_GENERAL}\n{render()}\n{RECORDS}"


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
