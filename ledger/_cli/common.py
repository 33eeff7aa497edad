"""What every command shares: the store option and its type, errors as one line, JSON, tables.

Only the library's own errors are caught (:func:`library_errors`); they become a
one-line message and an exit code: 2 for a usage mistake (such as an unknown run), 1
for storage or integrity trouble.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ledger._paths import DB_NAME, default_store
from ledger._text import UNPRINTABLE, printable

# The storage layer, the page and the MCP SDK are imported inside the commands that use
# them, so that --version, --help and a usage mistake answer at once (see ledger/_cli).
if TYPE_CHECKING:
    from ledger import storage

__all__ = [
    "StoreType",
    "UsageMistake",
    "json_option",
    "json_text",
    "library_errors",
    "locate",
    "one_line",
    "print_json",
    "quiet",
    "refuse_to_vouch",
    "store_name",
    "store_option",
    "table",
]

F = TypeVar("F", bound=Callable[..., Any])

_VERDICT_COLOURS = {
    "verified": "green",
    "failed": "blue",
    "pending": "yellow",
    "unverified": "yellow",
    "contradicted": "red",
}


class UsageMistake(click.ClickException):
    """A mistake in what was asked (an unknown run, say): exit status 2, as click's own."""

    exit_code = 2


@contextlib.contextmanager
def library_errors() -> Iterator[None]:
    """The library's errors as one line and an exit code, never a traceback."""
    from ledger.errors import EffectPersistenceError  # noqa: PLC0415 - see the imports
    from ledger.storage import (  # noqa: PLC0415
        ApprovalNotFoundError,
        EffectNotFoundError,
        RunNotFoundError,
        ShellMissingError,
    )

    try:
        yield
    except (RunNotFoundError, EffectNotFoundError, ApprovalNotFoundError) as e:
        raise UsageMistake(one_line(e)) from None
    except (EffectPersistenceError, ValueError, ShellMissingError) as e:
        raise click.ClickException(one_line(e)) from None


def one_line(error: BaseException) -> str:
    """An error's message on one printable line."""
    return printable(" ".join(str(error).split()))


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable() or char == "\n":
        return char
    data = char.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(data[i : i + 2]):04x}" for i in range(0, len(data), 2))


class StoreType(click.ParamType[Path | str]):
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


def store_option(f: F) -> F:
    """``--store DIR|URL``, the same on every command that opens a store."""
    return click.option(
        "--store",
        type=StoreType(),
        default=None,
        metavar="DIR|URL",
        help="The store: a directory (SQLite), or a PostgreSQL URL postgresql://... Default: "
        "$LEDGER_URL, else $LEDGER_DIR, else $XDG_STATE_HOME/ledger, else ~/.local/state/ledger.",
    )(f)


def json_option(f: F) -> F:
    """``--json``: the command prints the JSON shape docs/cli.md gives instead of a table."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (the shape is in docs/cli.md)."
    )(f)


def quiet() -> bool:
    """Progress bars only on a terminal: a script's stderr holds errors, one line each."""
    return not sys.stderr.isatty()


def locate(store: storage.Location | None) -> storage.Location:
    """The store ``--store`` names, else the default store; a directory made absolute."""
    found = store if store is not None else default_store()
    return found.absolute() if isinstance(found, Path) else found


def store_name(location: storage.Location) -> str:
    """The database file of a store directory, or a PostgreSQL store's URL without password."""
    if isinstance(location, Path):
        return str(location / DB_NAME)
    from ledger import storage  # noqa: PLC0415 - see the imports

    return storage.describe(location)


def print_json(value: object) -> None:
    """``value`` as indented JSON, every character that does not print escaped."""
    # json.dumps escapes C0 controls only: DEL, C1 controls (a terminal's CSI) and format
    # characters are escaped here, as \\uXXXX, which decodes to the same string.
    click.echo(json_text(json.dumps(value, indent=2, ensure_ascii=False)))


def json_text(text: str) -> str:
    """JSON text with the characters that do not print escaped (the same string, decoded)."""
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


def table(
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


def refuse_to_vouch(problems: Mapping[str, str | None]) -> None:
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
