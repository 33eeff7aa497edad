"""The ``ledger`` command line: inspect, verify, recover, export and import stores.

Every command parses its arguments, makes one library call and renders the result:
an aligned table for people, or ``--json`` (shapes in ``docs/cli.md``) for scripts.
Reading commands open the store read-only and never change a file. Only the
library's own errors are caught; they become a one-line message and an exit code:
2 for a usage mistake (such as an unknown run), 1 for storage or integrity trouble.

This module is the group and its order; the commands live in :mod:`ledger._cli`, by
job, and import what they need (the storage layer, the page, the MCP SDK) only when
they run.
"""

from __future__ import annotations

import click

import ledger
from ledger._cli import approving, programs, reading, show, writing

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# The package's own version, which is its distribution's: reading the distribution's
# metadata would cost more than the rest of --version.
@click.version_option(ledger.__version__, prog_name="ledger")
def main() -> None:
    """Inspect, verify and recover effect ledger stores.

    A store is where workers record their effects: a directory holding one SQLite
    database, shared by every run on the machine, or a PostgreSQL database named by its
    URL (postgresql://...), shared by every host. --store names it; ledger migrate
    creates it. Reading commands never change it.
    """


# In this order in `ledger --help` and in docs/cli.md: reading, writing, the store, programs.
for _command in (
    reading.runs,
    show.show,
    reading.status,
    reading.report,
    writing.recover,
    writing.resolve,
    approving.approvals,
    approving.approve,
    approving.deny,
    reading.verify,
    reading.head,
    reading.export,
    writing.import_,
    reading.path,
    writing.migrate,
    reading.sql,
    programs.mcp_proxy,
    programs.demo,
    programs.bench,
):
    main.add_command(_command)
del _command


if __name__ == "__main__":  # pragma: no cover - python -m ledger.cli
    main()
