"""The ``ledger`` command line: inspect, verify, recover, export and import stores.

Every command parses its arguments, makes one library call and renders the result:
an aligned table for people, or ``--json`` (shapes in ``docs/cli.md``) for scripts.
Reading commands open the store read-only and never change a file. Only the
library's own errors are caught; they become a one-line message and an exit code:
2 for a usage mistake (such as an unknown run), 1 for storage or integrity trouble.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

import ledger
from ledger._paths import DB_NAME, default_store
from ledger._text import UNPRINTABLE, compact_json, printable, shortened

# The command line starts before it knows its command: the storage layer (SQLAlchemy,
# Alembic, a backend), the page and the MCP SDK are imported by the commands that use
# them, so that --version, --help and a usage mistake answer at once.
if TYPE_CHECKING:
    from ledger import _inspect, _jsonl, storage
    from ledger.effects import EffectKind, Impact, Record, Resolution

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

_VERDICT_COLOURS = {
    "verified": "green",
    "failed": "blue",
    "pending": "yellow",
    "unverified": "yellow",
    "contradicted": "red",
}


class _UsageMistake(click.ClickException):
    exit_code = 2


@contextlib.contextmanager
def _library_errors() -> Iterator[None]:
    """The library's errors as one line and an exit code, never a traceback."""
    from ledger.errors import EffectPersistenceError  # noqa: PLC0415 - see the imports
    from ledger.storage import (  # noqa: PLC0415
        EffectNotFoundError,
        RunNotFoundError,
        ShellMissingError,
    )

    try:
        yield
    except (RunNotFoundError, EffectNotFoundError) as e:
        raise _UsageMistake(_one_line(e)) from None
    except (EffectPersistenceError, ValueError, ShellMissingError) as e:
        raise click.ClickException(_one_line(e)) from None


def _one_line(error: BaseException) -> str:
    return printable(" ".join(str(error).split()))


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable() or char == "\n":
        return char
    data = char.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(data[i : i + 2]):04x}" for i in range(0, len(data), 2))


class _StoreType(click.ParamType[Path | str]):
    """A store directory, or a PostgreSQL URL (postgresql://...)."""

    name = "store"

    def __init__(self, *, file_okay: bool = False) -> None:
        self._file_okay = file_okay
        self._path = click.Path(file_okay=file_okay, path_type=Path)

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> storage.Location:
        from ledger import storage  # noqa: PLC0415 - see the imports

        if isinstance(value, Path) or (isinstance(value, str) and storage.is_url(value)):
            return value
        if not isinstance(value, str):
            self.fail(f"{value!r} is not a directory or a URL", param, ctx)
        if value.lower().startswith("postgres"):
            try:
                storage.backend(value)
            except ValueError as e:
                self.fail(str(e), param, ctx)
        named = Path(value)
        if not self._file_okay and named.name == DB_NAME and not named.is_dir():
            # The file `ledger path` prints, given where its directory is wanted.
            holder = named.absolute().parent
            self.fail(
                printable(
                    f"{value} is the store's database file: give the directory that holds "
                    f"it: {holder}"
                ),
                param,
                ctx,
            )
        converted: Path = self._path.convert(value, param, ctx)
        return converted


def _store_option(f: F) -> F:
    return click.option(
        "--store",
        type=_StoreType(),
        default=None,
        metavar="DIR|URL",
        help="The store: a directory (SQLite), or a PostgreSQL URL postgresql://... Default: "
        "$LEDGER_URL, else $LEDGER_DIR, else $XDG_STATE_HOME/ledger, else ~/.local/state/ledger.",
    )(f)


def _json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (the shape is in docs/cli.md)."
    )(f)


def _quiet() -> bool:
    """Progress bars only on a terminal: a script's stderr holds errors, one line each."""
    return not sys.stderr.isatty()


def _directory(store: storage.Location | None) -> storage.Location:
    found = store if store is not None else default_store()
    return found.absolute() if isinstance(found, Path) else found


def _store_name(location: storage.Location) -> str:
    """The database file of a store directory, or a PostgreSQL store's URL without password."""
    if isinstance(location, Path):
        return str(location / DB_NAME)
    from ledger import storage  # noqa: PLC0415 - see the imports

    return storage.describe(location)


def _print_json(value: object) -> None:
    # json.dumps escapes C0 controls only: DEL, C1 controls (a terminal's CSI) and format
    # characters are escaped here, as \\uXXXX, which decodes to the same string.
    click.echo(_json_text(json.dumps(value, indent=2, ensure_ascii=False)))


def _json_text(text: str) -> str:
    return text if text.isprintable() else UNPRINTABLE.sub(_json_escape, text)


# The narrowest the last column of a wrapped table gets, however wide the others are.
_MIN_WRAP = 50


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after "; " (a longer part stays whole)."""
    parts = text.split("; ")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += f"; {part}"
        else:
            lines[-1] += ";"
            lines.append(part)
    return lines


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, wrap: int | None = None
) -> None:
    """An aligned table; a verdict column is coloured when the output is a terminal.

    ``wrap``: the last column's text goes on as many lines as it takes to keep lines
    within ``wrap`` columns, each broken after a "; " and aligned under its column.
    """
    text = [["-" if cell is None else printable(str(cell)) for cell in row] for row in rows]
    last = len(headers) - 1
    lines: list[list[str]] = [[row[last]] for row in text]
    if wrap is not None:
        offset = sum(
            max(len(h), *(len(r[i]) for r in text), 0) + 2 for i, h in enumerate(headers[:last])
        )
        lines = [_wrapped(row[last], max(wrap - offset, _MIN_WRAP)) for row in text]
        for row, wrapped in zip(text, lines, strict=True):
            row[last] = wrapped[0]
    widths = [max(len(h), *(len(r[i]) for r in text), 0) for i, h in enumerate(headers)]

    def pad(cell: str, i: int) -> str:
        return cell if i == last else cell.ljust(widths[i])  # no trailing spaces

    click.echo("  ".join(click.style(pad(h, i), bold=True) for i, h in enumerate(headers)))
    for row, cell_lines in zip(text, lines, strict=True):
        cells = []
        for i, cell in enumerate(row):
            colour = _VERDICT_COLOURS.get(cell) if headers[i] == "VERDICT" else None
            cells.append(click.style(pad(cell, i), fg=colour) if colour else pad(cell, i))
        click.echo("  ".join(cells))
        indent = " " * sum(width + 2 for width in widths[:last])
        for more in cell_lines[1:]:
            click.echo(indent + more)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# The package's own version, which is its distribution's: reading the distribution's
# metadata would cost more than the rest of --version.
@click.version_option(ledger.__version__, prog_name="ledger")
def main() -> None:
    """Inspect, verify and recover effect-ledger stores.

    A store is where workers record their effects: a directory holding one SQLite
    database, shared by every run on the machine, or a PostgreSQL database named by its
    URL (postgresql://...), shared by every host. --store names it; ledger migrate
    creates it. Reading commands never change it.
    """


# --------------------------------------------------------------------------- runs


@main.command()
@_store_option
@_json_option
def runs(store: storage.Location | None, as_json: bool) -> None:
    """One row per run: when it wrote, its writer, its verdict counts."""
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        summaries = _inspect.list_runs(_directory(store))
    if as_json:
        _print_json([s.to_dict() for s in summaries])
    else:
        _runs_table(summaries)
    _refuse_to_vouch({s.run_id: s.problem for s in summaries})


def _refuse_to_vouch(problems: Mapping[str, str | None]) -> None:
    """Say which runs shown do not validate, on stderr, and exit 1 if any: never vouch for them."""
    broken = {run_id: problem for run_id, problem in problems.items() if problem}
    for run_id, problem in broken.items():
        click.echo(
            printable(
                f"warning: run {run_id} does not validate, its verdicts are not to be "
                f"believed: {' '.join(problem.split())}"
            ),
            err=True,
        )
    if broken:
        raise SystemExit(1)


def _runs_table(summaries: list[_inspect.RunSummary]) -> None:
    from ledger.storage import VERDICTS  # noqa: PLC0415 - see the imports

    _table(
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


# How much of a claim's step and of a recorded value (arguments, result) a line of
# `ledger show` holds; `ledger show --json` and `ledger export` hold them whole.
_STEP_SHOWN = 40
_VALUE_SHOWN = 50
# How much of an id, a key and a locator (its end: a path's file name) the text of
# `ledger show` holds: its lines fit about 120 columns.
_ID_SHOWN = 12
_LOCATOR_SHOWN = 40
_WIDTH = 118


def _short_id(ident: str) -> str:
    """An id cut to a prefix (a run's or an effect's is enough to name it, as git's)."""
    return ident if len(ident) <= _ID_SHOWN + 3 else ident[:_ID_SHOWN] + "..."


def _tail(locator: str, limit: int = _LOCATOR_SHOWN) -> str:
    """A locator cut to its end, which names the thing (a path's directories come first)."""
    return locator if len(locator) <= limit else "..." + locator[-(limit - 3) :]


def _written(resolution: Resolution) -> str:
    """Which process wrote a resolution, for ``ledger show``: a person's command or a worker."""
    from ledger.effects import ResolutionOrigin  # noqa: PLC0415

    if resolution.origin is None:
        return "writer not recorded"
    if resolution.origin is ResolutionOrigin.PERSON:
        return f"written by {resolution.program}, user {resolution.os_user} on {resolution.host}"
    kind = "the worker itself" if resolution.origin is ResolutionOrigin.WORKER else "a reconciler"
    return f"written by {kind}, not a person ({resolution.program}, pid {resolution.pid})"


def _describe(record: Record) -> tuple[str, str]:
    from ledger.effects import EffectClaim, EffectOutcome, Resolution  # noqa: PLC0415

    if isinstance(record, Resolution):
        word = "applied" if record.applied else "not applied"
        note = f": {record.note}" if record.note else ""
        return record.effect_id, f"resolved {word} by {record.by}{note}; {_written(record)}"
    if isinstance(record, EffectClaim):
        scope = ", ".join(_tail(r.locator) for r in record.impact_scope[:2]) or "-"
        if len(record.impact_scope) > 2:
            scope += f" and {len(record.impact_scope) - 2} more"
        alone = {r.locator for r in record.impact_scope} if len(record.impact_scope) == 1 else ()
        duties = ", ".join(
            p.predicate.value
            + (f"={p.expected[:12]}" if p.expected else "")
            # The scope's one resource is not named twice.
            + ("" if p.target.locator in alone else f" {_tail(p.target.locator)}")
            for p in record.obligations
        )
        retry = f", retry of {record.retry_of}" if record.retry_of else ""
        step = f"; step {shortened(compact_json(record.step), _STEP_SHOWN)}" if record.step else ""
        args = (
            ""
            if record.args is None
            else f"; args {shortened(compact_json(record.args), _VALUE_SHOWN)}"
        )
        return (
            record.effect_id,
            f"{record.operation.name} ({record.kind.value}{retry}) on {scope}"
            + (f"; expects {duties}" if duties else "")
            + f"; key {_short_id(record.idempotency_key)}{step}{args}",
        )
    if isinstance(record, EffectOutcome):
        replayed = " (recovery)" if record.replayed else ""
        result = (
            f"; result {shortened(compact_json(record.result), _VALUE_SHOWN)}"
            if record.result_recorded
            else ""
        )
        return (
            record.effect_id,
            f"{record.execution.value}, impact {record.impact.value}{replayed}{result}",
        )
    seen = {True: "exists", False: "absent", None: "existence unknown"}[record.exists]
    extra = "".join(
        f", {name} {value[:12]}"
        for name, value in (("sha256", record.sha256), ("revision", record.revision))
        if value
    )
    how = f"{record.mechanism.value}, {record.coverage.value}"
    return record.observation_id, f"{_tail(record.resource.locator)}: {seen}{extra}; by {how}"


@main.command(short_help="A run's timeline and the verdict on each effect.")
@click.argument("run", required=False)
@_store_option
@_json_option
def show(run: str | None, store: storage.Location | None, as_json: bool) -> None:
    """A run's timeline, every record in seq order, and the verdict on each effect.

    RUN is a run id or a unique prefix of one; without RUN, the run that wrote last
    (said on stderr). Long fields (ids, keys, paths, recorded values) are cut to fit
    the lines in about 120 columns; --json holds everything whole.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    location = _directory(store)
    with _library_errors():
        if run is None:
            run = _newest_run(location)
        report = _inspect.show_run(location, run)
    if as_json:
        _print_json(report.to_dict())
        return
    writer = "unknown" if report.writer is None else report.writer.label()
    records = report.history.records()
    day, times = _times([r.recorded_at or "" for r in records])
    on = f"  on {day} (UTC)" if day else ""
    click.echo(printable(f"run {report.run_id}  writer {writer}{on}") + "\n")
    rows = []
    for record, time in zip(records, times, strict=True):
        ident, what = _describe(record)
        rows.append((record.seq, time, record.record_type, _short_id(ident), what))
    _table(("SEQ", "RECORDED", "KIND", "ID", "WHAT"), rows, wrap=_WIDTH)
    click.echo()
    operations = {c.effect_id: c.operation.name for c in report.history.claims}
    _table(
        (
            "EFFECT",
            "OPERATION",
            "EXECUTION",
            "IMPACT",
            "VERDICT",
            "UNRESOLVED",
            "NEXT",
            "EVIDENCE",
            "STALE",
        ),
        [
            (
                _short_id(a.effect_id),
                operations[a.effect_id],
                None if a.execution is None else a.execution.value,
                None if a.impact is None else a.impact.value,
                a.verdict.value,
                "yes" if a.unresolved_impact else "no",
                d.step.value,
                _ids(a.evidence),
                _ids(a.stale),
            )
            for a, d in zip(report.assessments, report.decisions, strict=True)
        ],
    )
    click.echo()
    for d in report.decisions:  # each effect's whole id, to copy
        click.echo(printable(f"{d.effect_id}: {d.step.value.upper()}: {d.reason}"))


def _newest_run(location: storage.Location) -> str:
    """The id of the run that wrote last, said on stderr; a usage mistake if there is none."""
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    summaries = _inspect.list_runs(location)
    if not summaries:
        raise _UsageMistake("no RUN given, and the store holds no run yet")
    newest = max(summaries, key=lambda s: (s.last_at or "", s.run_id))
    click.echo(
        printable(f"no RUN given: the run that wrote last, {newest.run_id}, at {newest.last_at}"),
        err=True,
    )
    return newest.run_id


def _times(stamps: Sequence[str]) -> tuple[str | None, list[str]]:
    """The day of a run's records and their times of day (to the millisecond), if one day.

    A run whose records span days, or any time not in UTC, keeps its times whole.
    """
    days = {stamp[:10] for stamp in stamps}
    if len(days) == 1 and all(len(t) > 23 and t.endswith("+00:00") for t in stamps):
        return days.pop(), [stamp[11:23] for stamp in stamps]
    return None, list(stamps)


# How many ids a cell of evidence or stale observations names before it counts the rest.
_IDS_SHOWN = 2


def _ids(idents: Sequence[str]) -> str | None:
    shown = ",".join(_short_id(i) for i in idents[:_IDS_SHOWN])
    more = f" +{len(idents) - _IDS_SHOWN} more" if len(idents) > _IDS_SHOWN else ""
    return shown + more or None


@main.command()
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
@_store_option
@_json_option
def status(
    run: str | None,
    unresolved: bool,
    attention: bool,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """Effects across runs with their verdicts, oldest claim first.

    With --attention, only the effects a person must act on, most urgent first: those
    whose next step is escalate (a reported success the evidence contradicts, then
    irreversible effects, then writes that may have landed), then claims left without
    an outcome by a writer that is gone. Each comes with the command that settles it.
    The exit status is 1 when anything is listed, 0 when nothing: fit for a cron job or
    a CI step.
    """
    if attention:
        if unresolved:
            raise click.UsageError("give --attention or --unresolved, not both")
        _attention(run, store, as_json=as_json)
        return
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        rows = _inspect.effect_statuses(_directory(store), run, unresolved=unresolved)
    if as_json:
        _print_json([r.to_dict() for r in rows])
    else:
        _status_table(rows)
    # Every run of the scope that does not validate, with a row shown or not: one whose
    # forged row settled its last open effect would otherwise leave the list quietly.
    _refuse_to_vouch(rows.problems)


def _attention(run: str | None, store: storage.Location | None, *, as_json: bool) -> None:
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        found = _inspect.attention(_directory(store), run)
    if as_json:
        _print_json([a.to_dict() for a in found])
    elif found:
        _table(
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
    else:
        click.echo("nothing needs a person")
    _refuse_to_vouch(found.problems)
    if found:
        raise SystemExit(1)


def _status_table(rows: list[_inspect.EffectRow]) -> None:
    _table(
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
    from ledger import _report  # noqa: PLC0415 - see the imports

    try:
        return _report.parse_since(value)
    except ValueError as e:
        raise click.BadParameter(_one_line(e)) from None


@main.command(short_help="Write an HTML page of runs: incidents, timelines, verdicts.")
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
@_store_option
def report(
    runs: tuple[str, ...],
    unresolved: bool,
    since: str | None,
    output: Path,
    store: storage.Location | None,
) -> None:
    """Write one self-contained HTML page of a store's runs, for a person to look at.

    At the top, what needs a person (as status --attention), with the commands that
    settle it; then every effect whose impact is unresolved; then, per run, a summary, a
    timeline of its effects, its resolutions and each record's fields. RUN is a run id or a unique
    prefix; without RUN, every run. The page loads nothing from anywhere.
    """
    from ledger import _report  # noqa: PLC0415 - see the imports

    with _library_errors():
        built = _report.build(_directory(store), runs, unresolved=unresolved, since=since)
    try:
        written = _report.write(output, _report.render(built))
    except OSError as e:
        raise click.ClickException(printable(f"cannot write {output}: {e.strerror or e}")) from None
    except UnicodeError as e:  # a text the page cannot hold: nothing was written
        raise click.ClickException(printable(f"cannot write {output}: {e}")) from None
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(written) + b"\n")
    sys.stdout.buffer.flush()
    _refuse_to_vouch(built.unvalidated)


# --------------------------------------------------------------------------- writes


@main.command(short_help="Mark claims that never got an outcome as interrupted.")
@click.argument("run", required=False)
@click.option(
    "--dead",
    is_flag=True,
    help="Recover every run with unsettled claims that no live process has loaded.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Recover RUN even though a live process has it loaded (known dead or hung): "
    "that process's next write then fails.",
)
@_store_option
@_json_option
def recover(
    run: str | None, dead: bool, force: bool, store: storage.Location | None, as_json: bool
) -> None:
    """Mark claims that never got an outcome as interrupted, with possible impact.

    Give RUN (an id or a unique prefix), or --dead. A run is in use while a live
    process has it loaded: that process holds a lock on it, gone with the process
    whatever its pid namespace, container or host (a kernel lock in a store
    directory's ledger.lock, a session's advisory lock on PostgreSQL). RUN is refused
    while in use, unless --force; --dead leaves such runs alone. A run another recover
    is recovering at the same moment is left alone (exit 0).
    """
    if (run is None) == (not dead):
        raise click.UsageError("give a RUN or --dead (exactly one)")
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        if dead:
            results = _inspect.recover_dead(_directory(store))
        else:
            assert run is not None  # noqa: S101 - checked above
            results = [_inspect.recover_run(_directory(store), run, force=force)]
    if as_json:
        _print_json([r.to_dict() for r in results])
        return
    for result in results:
        if result.skipped:
            click.echo(printable(f"run {result.run_id}: left alone, {result.skipped}"))
        elif not result.outcomes:
            click.echo(f"run {result.run_id}: nothing to recover")
        for outcome in result.outcomes:
            click.echo(
                printable(
                    f"run {result.run_id}: {outcome.effect_id} interrupted, impact possible "
                    f"(seq {outcome.seq})"
                )
            )
    if not results:
        click.echo("nothing to recover")


@main.command(short_help="Record that a person checked whether an effect landed.")
@click.argument("run")
@click.argument("effect")
@click.option(
    "--applied/--not-applied",
    default=None,
    help="What the person found: the effect landed, or it did not (one is required).",
)
@click.option("--by", "by", required=True, metavar="NAME", help="Who checked (an identifier).")
@click.option("--note", default="", metavar="TEXT", help="What they saw.")
@_store_option
@_json_option
def resolve(
    run: str,
    effect: str,
    *,
    applied: bool | None,
    by: str,
    note: str,
    store: storage.Location | None,
    as_json: bool,
) -> None:
    """Settle EFFECT of RUN after checking the world: it landed (--applied) or not.

    RUN is a run id or a unique prefix of one; EFFECT an effect id of that run or a
    unique prefix of one. The resolution is a record of the run,
    chained like the others, at most one per effect. It leaves the verdict as the
    evidence says and settles the effect: it leaves the incident list, and its next
    step becomes done (applied) or retry with the same idempotency key (not applied).
    """
    if applied is None:
        raise click.UsageError("say what you found: --applied or --not-applied")
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        resolution = _inspect.resolve_effect(
            _directory(store), run, effect, applied=applied, by=by, note=note
        )
    if as_json:
        _print_json(resolution.to_dict())
        return
    click.echo(
        printable(
            f"{resolution.effect_id}: resolved {resolution.word.replace('_', ' ')} "
            f"by {resolution.by} (seq {resolution.seq})"
        )
    )


@main.command(short_help="Check the store's schema and every run; exit 1 on a problem.")
@click.option(
    "--anchor",
    "anchors",
    multiple=True,
    metavar="RUN:SEQ:HASH",
    help="A head kept elsewhere (from ledger head): the record must still be there, unchanged.",
)
@_store_option
@_json_option
def verify(anchors: tuple[str, ...], store: storage.Location | None, as_json: bool) -> None:
    """Check the database, the schema and its guards, and every row and chain of every run.

    With --anchor, also check that a run still holds the head recorded earlier: this
    catches a truncated run, or a chain recomputed after a change. Exits 0 when the
    store is clean, 1 with a report of each problem when it is not.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    directory = _directory(store)
    with _library_errors():
        heads = tuple(_inspect.Head.parse(a) for a in anchors)
        total = _inspect.run_count(directory)
        with click.progressbar(
            length=total, label="verifying runs", file=sys.stderr, hidden=_quiet()
        ) as bar:
            done = [0]

            def advance(n: int) -> None:
                bar.update(n - done[0])
                done[0] = n

            report = _inspect.verify(directory, advance, heads)
    if as_json:
        _print_json(report.to_dict())
    elif report.ok:
        click.echo(f"ok: {report.runs} runs, {report.records} records, schema current")
    else:
        for problem in report.problems:
            click.echo(printable(problem))
        click.echo(printable(f"{len(report.problems)} problem(s) in {_store_name(directory)}"))
    if not report.ok:
        raise SystemExit(1)


@main.command(short_help="Print a run's head: its last seq and hash, to keep elsewhere.")
@click.argument("run")
@_store_option
@_json_option
def head(run: str, store: storage.Location | None, as_json: bool) -> None:
    """Print a run's head as RUN:SEQ:HASH, after checking its whole chain.

    Keep it somewhere the store's users cannot write; ledger verify --anchor then
    proves the run was neither truncated nor rewritten up to that point.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    with _library_errors():
        found = _inspect.run_head(_directory(store), run)
    if as_json:
        _print_json(found.to_dict())
    else:
        click.echo(printable(str(found)))


@main.command()
@click.argument("run")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of standard output: a new file (mode 0600) takes its "
    "place, a symlink's too, never written through.",
)
@_store_option
def export(run: str, output: Path | None, store: storage.Location | None) -> None:
    """Print a run as JSON lines, one record per line in seq order.

    This is the format of the earlier file-based effect logs: each line is an object
    with "v" (1), "type" (claim, outcome or observation) and "record".
    """
    from ledger import _jsonl  # noqa: PLC0415 - see the imports

    with _library_errors():
        _run_id, lines = _jsonl.export_lines(_directory(store), run)
    text = "".join(line + "\n" for line in lines)
    if output is None:
        click.echo(_json_text(text), nl=False)
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


@main.command(name="import", short_help="Import JSON-lines effect logs, each file as a new run.")
@click.argument(
    "files",
    nargs=-1,
    required=True,
    metavar="FILE...",
    type=click.Path(dir_okay=False, path_type=Path),
)
@click.option(
    "--run",
    "run",
    default=None,
    metavar="RUN",
    help="Run id for the imported file (only with one file). Default: from <run_id>.jsonl.",
)
@_store_option
@_json_option
def import_(
    files: tuple[Path, ...], run: str | None, store: storage.Location | None, as_json: bool
) -> None:
    """Import JSON-lines effect logs, each file as a new run, each all or nothing.

    A torn final line (a crash mid-append) is ignored; any other malformed or forged
    line refuses the whole file, naming the line.
    """
    if run is not None and len(files) > 1:
        raise click.UsageError("--run goes with a single file")
    from ledger import _jsonl  # noqa: PLC0415 - see the imports

    directory = _directory(store)
    imported = []
    with _library_errors():
        sizes = [f.stat().st_size if f.exists() else 0 for f in files]
        with click.progressbar(
            length=sum(sizes), label="importing", file=sys.stderr, hidden=_quiet()
        ) as bar:
            try:
                for path, size in zip(files, sizes, strict=True):
                    imported.append(_jsonl.import_file(directory, path, run))
                    bar.update(size)
            finally:
                # Files imported before a refused one stay imported: say which.
                _report_imports(imported, as_json=as_json)


def _report_imports(imported: list[_jsonl.Imported], *, as_json: bool) -> None:
    if as_json:
        _print_json([i.to_dict() for i in imported])
        return
    for item in imported:
        torn = " (torn final line ignored)" if item.torn_tail else ""
        click.echo(printable(f"{item.path}: run {item.run_id}, {item.records} records{torn}"))


# --------------------------------------------------------------------------- the store


@main.command(short_help="Print the store's database file, or its URL.")
@_store_option
@_json_option
def path(store: storage.Location | None, as_json: bool) -> None:
    """Print the path of the store's database file, or a PostgreSQL store's URL.

    The URL is printed with its password removed (and, with --json, a null path).
    """
    location = _directory(store)
    if not isinstance(location, Path):
        from ledger import storage  # noqa: PLC0415 - see the imports

        if as_json:
            _print_json({"path": None, "store": storage.describe(location), "exists": None})
        else:
            click.echo(printable(storage.describe(location)))
        return
    db = location / DB_NAME
    if as_json:
        _print_json({"path": str(db), "exists": db.exists()})
        return
    # The path as bytes, whatever their encoding, so that "$(ledger path)" names the file.
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(db) + b"\n")
    sys.stdout.buffer.flush()


@main.command(short_help="Create the store, or bring its schema to this version's.")
@_store_option
@_json_option
def migrate(store: storage.Location | None, as_json: bool) -> None:
    """Create the store, or bring its schema to the newest revision this version knows.

    A worker's first write does the same; run it beforehand to create a store, to
    upgrade one before its workers are upgraded, or as the role that owns a PostgreSQL
    schema when the workers' role may not change it. Running it again changes nothing.
    A store a newer version wrote is refused, and so is a database that holds other
    tables: nothing is changed.
    """
    from ledger import storage  # noqa: PLC0415 - see the imports

    location = _directory(store)
    with _library_errors():
        storage.backend(location)  # the driver it needs, or why it is missing
        if isinstance(location, Path):
            from ledger.sqlite.migrate import migrate  # noqa: PLC0415 - see the imports

            before, after = migrate(location)
        else:
            from ledger.postgresql import engine as server  # noqa: PLC0415 - see the imports

            before, after = server.migrate(location)
    name = storage.describe(location)
    action = "created" if before is None else "current" if before == after else "upgraded"
    if as_json:
        _print_json({"store": name, "action": action, "from": before, "revision": after})
    elif action == "created":
        click.echo(printable(f"created the store {name} at schema revision {after}"))
    elif action == "upgraded":
        click.echo(printable(f"upgraded the store {name} from schema revision {before} to {after}"))
    else:
        click.echo(printable(f"the store {name} is already at schema revision {after}"))


@main.command(
    short_help="Open the store's own shell (sqlite3 or psql), read-only.",
    context_settings={"ignore_unknown_options": True},
)
@click.argument("sqlite3_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARG]...")
@_store_option
def sql(sqlite3_args: tuple[str, ...], store: storage.Location | None) -> None:
    """Open the store's own shell, read-only: sqlite3 in its safe mode, or psql.

    Extra arguments go to the shell, e.g. ledger sql -box "SELECT * FROM effect_status"
    (sqlite3) or ledger sql -c "SELECT * FROM effect_status" (psql). A store directory
    owned by another user is opened from a private copy. On PostgreSQL every
    transaction is read-only.
    """
    from ledger import _inspect  # noqa: PLC0415 - see the imports

    directory = _directory(store)
    with _library_errors(), _inspect.reader(directory).shell(sqlite3_args) as shell:
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


def _kind_option(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, EffectKind]:
    from ledger.effects import EffectKind  # noqa: PLC0415 - see the imports

    known = {kind.value: kind for kind in EffectKind}
    kinds = {}
    for value in values:
        tool, sep, word = value.rpartition("=")
        if not sep or not tool or word.lower() not in known:
            raise click.BadParameter(
                printable(f"{value!r} is not TOOL=KIND, KIND one of {', '.join(known)}")
            )
        kinds[tool] = known[word.lower()]
    return kinds


def _error_impact_option(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, Impact]:
    from ledger.effects import Impact  # noqa: PLC0415 - see the imports

    known = {"possible": Impact.POSSIBLE, "none": Impact.NONE}
    impacts = {}
    for value in values:
        tool, sep, word = value.rpartition("=")
        if not sep or not tool or word.lower() not in known:
            raise click.BadParameter(printable(f"{value!r} is not TOOL=possible or TOOL=none"))
        impacts[tool] = known[word.lower()]
    return impacts


@main.command(
    name="mcp-proxy",
    short_help="Put an MCP server behind the ledger: every tool call an effect.",
    context_settings={"allow_interspersed_args": False},
)
@click.argument("command", nargs=-1, required=True, metavar="-- COMMAND [ARG]...")
@click.option(
    "--name",
    default=None,
    metavar="NAME",
    help="The name of this proxy's runs. Default: the server's name (its serverInfo).",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="TOOL=KIND",
    callback=_kind_option,
    help="The kind of TOOL's calls (read, idempotent, write, irreversible), whatever the "
    "server's annotations say. Repeatable.",
)
@click.option(
    "--error-impact",
    "error_impacts",
    multiple=True,
    metavar="TOOL=IMPACT",
    callback=_error_impact_option,
    help="The impact recorded when TOOL's result says isError: possible (it may have acted "
    "before failing) or none. Default: none, possible for an irreversible tool. Repeatable.",
)
@click.option(
    "--no-record",
    is_flag=True,
    default=False,
    help="Record neither the calls' arguments nor their results (only their digests).",
)
@_store_option
def mcp_proxy(  # click passes every option by name
    *,
    command: tuple[str, ...],
    name: str | None,
    kinds: dict[str, EffectKind],
    error_impacts: dict[str, Impact],
    no_record: bool,
    store: Path | None,
) -> None:
    """Start COMMAND, an MCP server speaking stdio, and relay MCP between it and the client.

    Every message passes through; every tools/call is claimed in the ledger before the
    server gets it (its idempotency key in params._meta["ledger/idempotency-key"]) and
    its answer recorded before the client gets it, with the call's arguments and
    result unless --no-record. Each proxy process is one run, its
    id on stderr. Runs of the same NAME left unsettled by a dead proxy are recovered at
    start, and a write identical to an earlier one a person must check is refused
    until it is resolved. See docs/mcp.md.
    """
    try:
        from ledger._mcp import proxy as _mcp  # noqa: PLC0415 - the MCP SDK is an optional extra
    except ImportError as e:
        if (e.name or "").partition(".")[0] not in ("mcp", "mcp_types", "pydantic"):
            raise
        raise click.ClickException(
            "ledger mcp-proxy needs the MCP SDK: pip install effect-ledger[mcp]"
        ) from None

    def say(line: str) -> None:
        click.echo(printable(f"ledger mcp-proxy: {line}"), err=True)

    with _library_errors():
        try:
            status = _mcp.run(
                command,
                _directory(store),
                name=name,
                kinds=kinds,
                error_impacts=error_impacts,
                record=not no_record,
                say=say,
            )
        except _mcp.ProxyError as e:
            raise click.ClickException(_one_line(e)) from None
    raise SystemExit(status)


@main.command(short_help="Kill a worker mid-effect, recover, show every verdict.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE.html",
    help="Then write the run's page (as ledger report does) to this file.",
)
@_store_option
def demo(report: Path | None, store: storage.Location | None) -> None:
    """Kill a scripted agent worker mid-effect, recover, and show every verdict."""
    location = _directory(store)
    if not isinstance(location, Path):
        raise click.UsageError("ledger demo runs on a store directory, not a PostgreSQL store")
    from ledger import _demo  # noqa: PLC0415 - only this command needs it

    with _library_errors():
        code = _demo.run(location, click.echo, report)
    raise SystemExit(code)


@main.command(short_help="Measure what a durable claim costs on this disk.")
@click.option(
    "--store",
    # A file is refused by the bench itself, in its own words.
    type=_StoreType(file_okay=True),
    default=None,
    metavar="DIR|URL",
    help="Measure in a scratch directory created in DIR and removed afterwards. Default: "
    "the directory that holds the default store (or its nearest existing ancestor), on the "
    "disk workers write to. A PostgreSQL URL: measure on that server, in a scratch schema "
    "dropped afterwards.",
)
@_json_option
@click.option(
    "--quick", is_flag=True, help="Smaller runs and stores, fewer samples: under half a minute."
)
@click.option(
    "--reads",
    is_flag=True,
    help="Instead: the reading commands (status, runs, show, report) on runs of 1,000 and "
    "100,000 effects, their cost per effect, and start-up against a bare Python.",
)
def bench(store: storage.Location | None, as_json: bool, quick: bool, reads: bool) -> None:
    """Measure what a durable claim costs on this disk, against what it cannot beat.

    Runs stdlib sqlite3 (the floor), fsynced JSON lines (the file-based logs) and the
    ledger's claims interleaved, then threads, processes, and assess and recovery on
    large runs and stores. Prints medians, p99 and ratios against their targets. A
    full run takes a few minutes.
    """
    from ledger._bench import runner as _bench  # noqa: PLC0415 - only this command needs it (and it is large)

    progress = None if _quiet() else (lambda line: click.echo(line, err=True))
    if reads:
        from ledger._bench import reads as _bench_reads  # noqa: PLC0415 - only this command needs it

        if isinstance(store, str):
            raise click.UsageError("ledger bench --reads measures SQLite stores only")
        with _library_errors():
            found = _bench_reads.run(store, quick=quick, progress=progress)
        if as_json:
            _print_json(found)
        else:
            _bench_reads.render(found, _table, click.echo)
        return
    if isinstance(store, str):
        from ledger._bench import postgresql as _bench_postgresql  # noqa: PLC0415 - only this command needs it

        with _library_errors():
            found = _bench_postgresql.run(store, quick=quick, progress=progress)
        if as_json:
            _print_json(found)
        else:
            _bench_postgresql.render(found, click.echo)
        return
    with _library_errors():
        try:
            report = _bench.run(store, quick=quick, progress=progress)
        except OSError as e:
            raise click.ClickException(f"the benchmark failed: {_one_line(e)}") from None
    if as_json:
        _print_json(report)
    else:
        _bench.render(report, _table, click.echo)


if __name__ == "__main__":  # pragma: no cover - python -m ledger.cli
    main()
