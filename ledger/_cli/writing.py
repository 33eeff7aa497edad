"""The commands that write a store: recover, resolve, import and migrate.

Each writes through the library as a worker does (recovery and resolutions are records
of the run, an import is a new run, a migration what a worker's first write does).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger._cli.common import (
    json_option,
    library_errors,
    locate,
    print_json,
    quiet,
    store_option,
)
from ledger._text import printable

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import _jsonl, storage

__all__ = ["import_", "migrate", "recover", "resolve"]


@click.command(short_help="Mark claims that never got an outcome as interrupted.")
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
@store_option
@json_option
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

    with library_errors():
        if dead:
            results = _inspect.recover_dead(locate(store))
        else:
            assert run is not None  # noqa: S101 - checked above
            results = [_inspect.recover_run(locate(store), run, force=force)]
    if as_json:
        print_json([r.to_dict() for r in results])
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


@click.command(short_help="Record that a person checked whether an effect landed.")
@click.argument("run")
@click.argument("effect")
@click.option(
    "--applied/--not-applied",
    default=None,
    help="What the person found: the effect landed, or it did not (one is required).",
)
@click.option("--by", "by", required=True, metavar="NAME", help="Who checked (an identifier).")
@click.option("--note", default="", metavar="TEXT", help="What they saw.")
@store_option
@json_option
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

    with library_errors():
        resolution = _inspect.resolve_effect(
            locate(store), run, effect, applied=applied, by=by, note=note
        )
    if as_json:
        print_json(resolution.to_dict())
        return
    click.echo(
        printable(
            f"{resolution.effect_id}: resolved {resolution.word.replace('_', ' ')} "
            f"by {resolution.by} (seq {resolution.seq})"
        )
    )


@click.command(name="import", short_help="Import JSON-lines effect logs, each file as a new run.")
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
@store_option
@json_option
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

    directory = locate(store)
    imported = []
    with library_errors():
        sizes = [f.stat().st_size if f.exists() else 0 for f in files]
        with click.progressbar(
            length=sum(sizes), label="importing", file=sys.stderr, hidden=quiet()
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
        print_json([i.to_dict() for i in imported])
        return
    for item in imported:
        torn = " (torn final line ignored)" if item.torn_tail else ""
        click.echo(printable(f"{item.path}: run {item.run_id}, {item.records} records{torn}"))


@click.command(short_help="Create the store, or bring its schema to this version's.")
@store_option
@json_option
def migrate(store: storage.Location | None, as_json: bool) -> None:
    """Create the store, or bring its schema to the newest revision this version knows.

    A worker's first write does the same; run it beforehand to create a store, to
    upgrade one before its workers are upgraded, or as the role that owns a PostgreSQL
    schema when the workers' role may not change it. Running it again changes nothing.
    A store a newer version wrote is refused, and so is a database that holds other
    tables: nothing is changed.
    """
    from ledger import storage  # noqa: PLC0415 - see the imports

    location = locate(store)
    with library_errors():
        storage.backend(location)  # the driver it needs, or why it is missing
        if isinstance(location, Path):
            from ledger.sqlite import migrate as schema  # noqa: PLC0415 - see the imports

            before, after = schema.migrate(location)
        else:
            from ledger.postgresql import engine as server  # noqa: PLC0415 - see the imports

            before, after = server.migrate(location)
    name = storage.describe(location)
    action = "created" if before is None else "current" if before == after else "upgraded"
    if as_json:
        print_json({"store": name, "action": action, "from": before, "revision": after})
    elif action == "created":
        click.echo(printable(f"created the store {name} at schema revision {after}"))
    elif action == "upgraded":
        click.echo(printable(f"upgraded the store {name} from schema revision {before} to {after}"))
    else:
        click.echo(printable(f"the store {name} is already at schema revision {after}"))
