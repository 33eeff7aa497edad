"""The commands that run a program of their own: mcp-proxy, demo and bench.

Each loads its package (:mod:`ledger._mcp`, :mod:`ledger._demo`, :mod:`ledger._bench`)
only when it runs; the MCP SDK is an optional extra, said so in one line when missing.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger._cli.common import (
    StoreType,
    json_option,
    library_errors,
    locate,
    one_line,
    print_json,
    quiet,
    store_option,
    table,
)
from ledger._text import printable

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import storage
    from ledger.effects import EffectKind, Impact

__all__ = ["bench", "demo", "mcp_proxy"]


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


_DURATION = re.compile(r"(\d+)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_option(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> dt.timedelta | None:
    if value is None:
        return None
    found = _DURATION.fullmatch(value.strip())
    seconds = int(found[1]) * _UNITS[found[2]] if found else 0
    if seconds <= 0:
        raise click.BadParameter(
            printable(f"{value!r} is not a duration: seconds, or 90s, 30m, 2h, 7d")
        )
    return dt.timedelta(seconds=seconds)


@click.command(
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
@click.option(
    "--approve",
    "approve",
    multiple=True,
    metavar="TOOL_PATTERN",
    help="Gate the tools matching this shell-style pattern (send_*, *): a call runs only "
    "once a person has approved that exact call, with ledger approve or in the client's "
    "own form (MCP elicitation). Repeatable.",
)
@click.option(
    "--approval-ttl",
    metavar="DURATION",
    callback=_duration_option,
    help="How long a gated call's request for approval stays open: seconds, or 90s, 30m, "
    "2h, 7d. Default: 24h.",
)
@click.option(
    "--elicitation-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="How long to wait for the client's answer to the approval form before answering "
    "the call with the approval error. Default: 50.",
)
@store_option
def mcp_proxy(  # click passes every option by name
    *,
    command: tuple[str, ...],
    name: str | None,
    kinds: dict[str, EffectKind],
    error_impacts: dict[str, Impact],
    no_record: bool,
    approve: tuple[str, ...],
    approval_ttl: dt.timedelta | None,
    elicitation_timeout: float | None,
    store: Path | None,
) -> None:
    """Start COMMAND, an MCP server speaking stdio, and relay MCP between it and the client.

    Every message passes through; every tools/call is claimed in the ledger before the
    server gets it (its idempotency key in params._meta["ledger/idempotency-key"]) and
    its answer recorded before the client gets it, with the call's arguments and
    result unless --no-record. Each proxy process is one run, its
    id on stderr. Runs of the same NAME left unsettled by a dead proxy are recovered at
    start, and a write identical to an earlier one a person must check is refused
    until it is resolved. A tool gated with --approve runs only under a person's
    approval of the exact call. See docs/mcp.md.
    """
    try:
        from ledger._mcp import proxy as _mcp  # noqa: PLC0415 - the MCP SDK is an optional extra
    except ImportError as e:
        if (e.name or "").partition(".")[0] not in ("mcp", "mcp_types", "pydantic"):
            raise
        raise click.ClickException(
            "ledger mcp-proxy needs the MCP SDK: pip install tool-ledger[mcp]"
        ) from None

    def say(line: str) -> None:
        click.echo(printable(f"ledger mcp-proxy: {line}"), err=True)

    with library_errors():
        try:
            status = _mcp.run(
                command,
                locate(store),
                name=name,
                kinds=kinds,
                error_impacts=error_impacts,
                record=not no_record,
                approve=approve,
                approval_ttl=approval_ttl,
                elicitation_timeout=(
                    _mcp.ELICITATION_TIMEOUT if elicitation_timeout is None else elicitation_timeout
                ),
                say=say,
            )
        except _mcp.ProxyError as e:
            raise click.ClickException(one_line(e)) from None
    raise SystemExit(status)


@click.command(short_help="Kill a worker mid-effect, recover, show every verdict.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE.html",
    help="Then write the run's page (as ledger report does) to this file.",
)
@store_option
def demo(report: Path | None, store: storage.Location | None) -> None:
    """Kill a scripted agent worker mid-effect, recover, and show every verdict."""
    location = locate(store)
    if not isinstance(location, Path):
        raise click.UsageError("ledger demo runs on a store directory, not a PostgreSQL store")
    from ledger import _demo  # noqa: PLC0415 - only this command needs it

    with library_errors():
        code = _demo.run(location, click.echo, report)
    raise SystemExit(code)


@click.command(short_help="Measure what a durable claim costs on this disk.")
@click.option(
    "--store",
    # A file is refused by the bench itself, in its own words.
    type=StoreType(file_okay=True),
    default=None,
    metavar="DIR|URL",
    help="Measure in a scratch directory created in DIR and removed afterwards. Default: "
    "the directory that holds the default store (or its nearest existing ancestor), on the "
    "disk workers write to. A PostgreSQL URL: measure on that server, in a scratch schema "
    "dropped afterwards.",
)
@json_option
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

    progress = None if quiet() else (lambda line: click.echo(line, err=True))
    if reads:
        from ledger._bench import reads as _bench_reads  # noqa: PLC0415 - only this command needs it

        if isinstance(store, str):
            raise click.UsageError("ledger bench --reads measures SQLite stores only")
        with library_errors():
            found = _bench_reads.run(store, quick=quick, progress=progress)
        if as_json:
            print_json(found)
        else:
            _bench_reads.render(found, table, click.echo)
        return
    if isinstance(store, str):
        from ledger._bench import postgresql as _bench_postgresql  # noqa: PLC0415 - only this command needs it

        with library_errors():
            found = _bench_postgresql.run(store, quick=quick, progress=progress)
        if as_json:
            print_json(found)
        else:
            _bench_postgresql.render(found, click.echo)
        return
    with library_errors():
        try:
            report = _bench.run(store, quick=quick, progress=progress)
        except OSError as e:
            raise click.ClickException(f"the benchmark failed: {one_line(e)}") from None
    if as_json:
        print_json(report)
    else:
        _bench.render(report, table, click.echo)
