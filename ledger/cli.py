"""The ``ledger`` command line.

It parses, makes one library call and renders. Only the library's own errors are
caught: they become a one-line message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import click

from ledger import _demo
from ledger._paths import DB_NAME
from ledger.effect_log import EffectPersistenceError, effects_dir

__all__ = ["main"]

EXIT_STORAGE = 1


def _store_option() -> click.Option:
    return click.Option(
        ["--store"],
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Store directory (default: $LEDGER_DIR, else the user's state directory).",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="effect-ledger")
def main() -> None:
    """Inspect and exercise effect-ledger stores."""


@main.command()
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Store directory (default: $LEDGER_DIR, else the user's state directory).",
)
def demo(store: Path | None) -> None:
    """Kill a scripted agent worker mid-effect, recover, and show every verdict."""
    try:
        code = _demo.run((store or effects_dir()).absolute(), click.echo)
    except EffectPersistenceError as e:
        raise click.ClickException(str(e)) from None
    raise SystemExit(code)


@main.command()
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Store directory (default: $LEDGER_DIR, else the user's state directory).",
)
def path(store: Path | None) -> None:
    """Print the path of the store's database file."""
    click.echo(str((store or effects_dir()).absolute() / DB_NAME))


if __name__ == "__main__":  # pragma: no cover - python -m ledger.cli
    main()
