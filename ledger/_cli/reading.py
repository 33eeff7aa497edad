"""The reading commands: runs, status, report, verify, head, export, path and sql.

Each opens the store read-only and never changes a file (``path`` does not open it at
all); ``ledger show`` is :mod:`ledger._cli.show`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger._cli import approving
from ledger._cli.common import (
    json_option,
    json_text,
    library_errors,
    locate,
    one_line,
    print_json,
    quiet,
    refuse_to_vouch,
    store_name,
    store_option,
    table,
)
from ledger._paths import DB_NAME
from ledger._text import compact_json, printable, shortened

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import _inspect, storage

__all__ = ["export", "head", "path", "report", "runs", "sql", "status", "verify"]


@click.command()
@store_option
@json_option
def runs(store: storage.Location | None, as_json: bool) -> None:
    """One row per run: when it wrote, its writer, its verdict counts."""
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with library_errors():
        summaries = _inspect.list_runs(locate(store))
    if as_json:
        print_json([s.to_dict() for s in summaries])
    else:
        _runs_table(summaries)
    refuse_to_vouch({s.run_id: s.problem for s in summaries})


def _runs_table(summaries: list[_inspect.RunSummary]) -> None:
    from ledger.storage import VERDICTS  # noqa: PLC0415 - see the imports

    table(
        ("RUN", "FIRST", "LAST", "WRITER", "CLAIMS", *(v.upper() for v in VERDICTS)),
        [
            (
                s.run_id,
                s.first_at,
                s.last_at,
                None if s.writer is None else s.writer.label(),
                s.claims,
                *(s.verdicts[v] for v in VERDICTS),
            )
            for s in summaries
        ],
    )


@click.command()
@click.option(
    "--run", "run", default=None, metavar="RUN", help="Only this run (an id or a unique prefix)."
)
@click.option(
    "--unresolved",
    is_flag=True,
    help="Only effects whose impact is unresolved: the incident list.",
)
@click.option(
    "--attention",
    is_flag=True,
    help="Only what needs a person, most urgent first; exit 1 when anything is listed.",
)
@store_option
@json_option
def status(
    run: str | None,
    unresolved: bool,
    attention: bool,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """Effects across runs with their verdicts, oldest claim first; then the approvals.

    With --attention, only the effects a person must act on, most urgent first: those
    whose next step is escalate (a reported success the evidence contradicts, then
    irreversible effects, then writes that may have landed), then claims left without
    an outcome by a writer that is gone, then calls waiting for a person's approval.
    Each comes with the command that settles it.
    The exit status is 1 when anything is listed, 0 when nothing: fit for a cron job or
    a CI step.
    """
    if attention:
        if unresolved:
            raise click.UsageError("give --attention or --unresolved, not both")
        _attention(run, store, as_json=as_json)
        return
    from ledger import _inspect  # noqa: PLC0415 - see the imports
    from ledger._report.attention import approval_summary  # noqa: PLC0415

    with library_errors():
        rows = _inspect.effect_statuses(locate(store), run, unresolved=unresolved)
        # Read apart, every run holding one validated: the approvals of the scope.
        asked = _inspect.list_approvals(locate(store), run, every=True)
    if as_json:
        used = {(v.run_id, v.used_by): v for v in asked if v.used_by is not None}
        print_json(
            [
                {
                    **r.to_dict(),
                    "approval": (
                        None
                        if (view := used.get((r.run_id, r.effect_id))) is None
                        else approval_summary(view)
                    ),
                }
                for r in rows
            ]
        )
    else:
        _status_table(rows)
        if asked:
            click.echo()
            approving.approval_table(list(asked))
    # Every run of the scope that does not validate, with a row shown or not: one whose
    # forged row settled its last open effect would otherwise leave the list quietly.
    refuse_to_vouch({**asked.problems, **rows.problems})


def _attention(run: str | None, store: storage.Location | None, *, as_json: bool) -> None:
    from ledger._report import attention  # noqa: PLC0415 - see the imports

    with library_errors():
        found = attention.attention(locate(store), run)
    if as_json:
        print_json([a.to_dict() for a in [*found, *found.approvals]])
        refuse_to_vouch(found.problems)
        if found or found.approvals:
            raise SystemExit(1)
        return
    if found:
        table(
            ("URGENCY", "RUN", "EFFECT", "OPERATION", "KIND", "VERDICT", "NEXT", "WHY"),
            [
                (
                    a.urgency,
                    a.row.run_id,
                    a.row.effect_id,
                    a.row.operation,
                    a.row.kind,
                    a.row.verdict,
                    a.row.next_step,
                    a.reason,
                )
                for a in found
            ],
        )
        click.echo()
        for a in found:
            click.echo(printable(f"{a.row.effect_id}: {a.action}"))
    if found.approvals:
        if found:
            click.echo()
        table(
            ("URGENCY", "RUN", "APPROVAL", "TOOL", "DIGEST", "REQUESTER", "EXPIRES", "ARGS"),
            [
                (
                    w.urgency,
                    w.view.run_id,
                    w.view.approval_id,
                    w.view.request.operation,
                    w.view.action_digest[:12],
                    approving.requester(w.view.request),
                    w.view.expires_at,
                    "not recorded"
                    if w.view.request.args is None
                    else shortened(compact_json(w.view.request.args), 60),
                )
                for w in found.approvals
            ],
        )
        click.echo()
        for w in found.approvals:
            click.echo(printable(f"{w.view.approval_id}: {w.action}"))
    if not found and not found.approvals:
        click.echo("nothing needs a person")
    refuse_to_vouch(found.problems)
    if found or found.approvals:
        raise SystemExit(1)


def _status_table(rows: list[_inspect.EffectRow]) -> None:
    table(
        (
            "RUN",
            "SEQ",
            "EFFECT",
            "OPERATION",
            "KIND",
            "EXECUTION",
            "IMPACT",
            "VERDICT",
            "UNRESOLVED",
            "NEXT",
        ),
        [
            (
                r.run_id,
                r.seq,
                r.effect_id,
                r.operation,
                r.kind,
                r.execution,
                r.impact,
                r.verdict,
                "yes" if r.unresolved_impact else "no",
                r.next_step,
            )
            for r in rows
        ],
    )


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ledger._report import assemble  # noqa: PLC0415 - see the imports

    try:
        return assemble.parse_since(value)
    except ValueError as e:
        raise click.BadParameter(one_line(e)) from None


@click.command(short_help="Write an HTML page of runs: incidents, timelines, verdicts.")
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option(
    "--unresolved",
    is_flag=True,
    help="Only runs holding an effect whose impact is unresolved.",
)
@click.option(
    "--since",
    metavar="TIME",
    callback=_since,
    help="Only runs that wrote since TIME: an ISO 8601 date or time (UTC unless it has an "
    "offset), or a duration back from now (90s, 30m, 2h, 7d).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE.html",
    help="The page to write (replaced if it exists).",
)
@store_option
def report(
    runs: tuple[str, ...],
    unresolved: bool,
    since: str | None,
    output: Path,
    store: storage.Location | None,
) -> None:
    """Write one self-contained HTML page of a store's runs, for a person to look at.

    At the top, what needs a person (as status --attention, calls waiting for approval
    included), with the commands that settle it; then every approval and its state;
    then every effect whose impact is unresolved; then, per run, a summary, a timeline of
    its effects, its resolutions and each record's fields. RUN is a run id or a unique
    prefix; without RUN, every run. The page loads nothing from anywhere.
    """
    from ledger._report import assemble, html  # noqa: PLC0415 - see the imports

    with library_errors():
        built = assemble.build(locate(store), runs, unresolved=unresolved, since=since)
    try:
        written = html.write(output, html.render(built))
    except OSError as e:
        raise click.ClickException(printable(f"cannot write {output}: {e.strerror or e}")) from None
    except UnicodeError as e:  # a text the page cannot hold: nothing was written
        raise click.ClickException(printable(f"cannot write {output}: {e}")) from None
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(written) + b"\n")
    sys.stdout.buffer.flush()
    refuse_to_vouch(built.unvalidated)


@click.command(short_help="Check the store's schema and every run; exit 1 on a problem.")
@click.option(
    "--anchor",
    "anchors",
    multiple=True,
    metavar="RUN:SEQ:HASH",
    help="A head kept elsewhere (from ledger head): the record must still be there, unchanged.",
)
@store_option
@json_option
def verify(anchors: tuple[str, ...], store: storage.Location | None, as_json: bool) -> None:
    """Check the database, the schema and its guards, and every row and chain of every run.

    With --anchor, also check that a run still holds the head recorded earlier: this
    catches a truncated run, or a chain recomputed after a change. Exits 0 when the
    store is clean, 1 with a report of each problem when it is not.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    directory = locate(store)
    with library_errors():
        heads = tuple(_inspect.Head.parse(a) for a in anchors)
        total = _inspect.run_count(directory)
        with click.progressbar(
            length=total, label="verifying runs", file=sys.stderr, hidden=quiet()
        ) as bar:
            done = [0]

            def advance(n: int) -> None:
                bar.update(n - done[0])
                done[0] = n

            report = _inspect.verify(directory, advance, heads)
    if as_json:
        print_json(report.to_dict())
    elif report.ok:
        click.echo(f"ok: {report.runs} runs, {report.records} records, schema current")
    else:
        for problem in report.problems:
            click.echo(printable(problem))
        click.echo(printable(f"{len(report.problems)} problem(s) in {store_name(directory)}"))
    if not report.ok:
        raise SystemExit(1)


@click.command(short_help="Print a run's head: its last seq and hash, to keep elsewhere.")
@click.argument("run")
@store_option
@json_option
def head(run: str, store: storage.Location | None, as_json: bool) -> None:
    """Print a run's head as RUN:SEQ:HASH, after checking its whole chain.

    Keep it somewhere the store's users cannot write; ledger verify --anchor then
    proves the run was neither truncated nor rewritten up to that point.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with library_errors():
        found = _inspect.run_head(locate(store), run)
    if as_json:
        print_json(found.to_dict())
    else:
        click.echo(printable(str(found)))


@click.command()
@click.argument("run")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of standard output: a new file (mode 0600) takes its "
    "place, a symlink's too, never written through.",
)
@store_option
def export(run: str, output: Path | None, store: storage.Location | None) -> None:
    """Print a run as JSON lines, one record per line in seq order.

    This is the format of the earlier file-based effect logs: each line is an object
    with "v" (1), "type" (claim, outcome, observation, resolution, approval_request or
    approval_decision) and "record".
    """
    from ledger import _jsonl  # noqa: PLC0415 - see the imports

    with library_errors():
        _run_id, lines = _jsonl.export_lines(locate(store), run)
    text = "".join(line + "\n" for line in lines)
    if output is None:
        click.echo(json_text(text), nl=False)
        return
    # A new private file renamed into place: never written through a link, always 0600.
    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        temporary.replace(output)
    except OSError as e:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise click.ClickException(printable(f"cannot write {output}: {e.strerror or e}")) from None


@click.command(short_help="Print the store's database file, or its URL.")
@store_option
@json_option
def path(store: storage.Location | None, as_json: bool) -> None:
    """Print the path of the store's database file, or a PostgreSQL store's URL.

    The URL is printed with its password removed (and, with --json, a null path).
    """
    location = locate(store)
    if not isinstance(location, Path):
        from ledger import storage  # noqa: PLC0415 - see the imports

        if as_json:
            print_json({"path": None, "store": storage.describe(location), "exists": None})
        else:
            click.echo(printable(storage.describe(location)))
        return
    db = location / DB_NAME
    if as_json:
        print_json({"path": str(db), "exists": db.exists()})
        return
    # The path as bytes, whatever their encoding, so that "$(ledger path)" names the file.
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(db) + b"\n")
    sys.stdout.buffer.flush()


@click.command(
    short_help="Open the store's own shell (sqlite3 or psql), read-only.",
    context_settings={"ignore_unknown_options": True},
)
@click.argument("sqlite3_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARG]...")
@store_option
def sql(sqlite3_args: tuple[str, ...], store: storage.Location | None) -> None:
    """Open the store's own shell, read-only: sqlite3 in its safe mode, or psql.

    Extra arguments go to the shell, e.g. ledger sql -box "SELECT * FROM effect_status"
    (sqlite3) or ledger sql -c "SELECT * FROM effect_status" (psql). A store directory
    owned by another user is opened from a private copy. On PostgreSQL every
    transaction is read-only.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    directory = locate(store)
    with library_errors(), _inspect.reader(directory).shell(sqlite3_args) as shell:
        for note in shell.notes:
            click.echo(printable(note), err=True)
        if shell.wait:  # the copy it reads is removed when the shell ends
            raise SystemExit(_wait_for_shell(shell.argv))
        os.execv(shell.argv[0], shell.argv)  # noqa: S606 - the user's own shell


def _wait_for_shell(argv: list[str]) -> int:
    """Run the shell to its end and return its exit code; the copy is removed afterwards.

    Ctrl-C reaches the shell (the terminal signals its whole process group), which
    interrupts a query and goes on: this process must neither die of it nor ignore it
    (an ignored signal stays ignored in the child), so it catches it and does nothing.
    """
    import subprocess  # noqa: PLC0415 - see the imports

    with subprocess.Popen(argv) as child:  # noqa: S603 - the user's own shell
        forward = lambda signum, _frame: child.send_signal(signum)  # noqa: E731
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, lambda _signum, _frame: None),
            signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
            signal.SIGHUP: signal.signal(signal.SIGHUP, forward),
        }
        try:
            return child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
