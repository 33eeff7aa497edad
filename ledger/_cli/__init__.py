"""The commands of ``ledger``, by job; :mod:`ledger.cli` gathers them into its group.

- :mod:`~ledger._cli.common`: the store option and its type, errors as one line, JSON
  and aligned tables, shared by every command;
- :mod:`~ledger._cli.reading`: runs, status, report, verify, head, export, path, sql;
- :mod:`~ledger._cli.show`: show, a run's timeline as text;
- :mod:`~ledger._cli.writing`: recover, resolve, import, migrate;
- :mod:`~ledger._cli.programs`: mcp-proxy, demo, bench.

The command line starts before it knows its command, and every module here is
imported to build the group: at their top they import only click and the package's
small text and path helpers. The storage layer (SQLAlchemy, Alembic, a backend), the
page (Jinja2) and the MCP SDK are imported inside the commands that use them, so that
--version, --help and a usage mistake answer at once (tests/cli/test_cli_startup.py
checks which modules they load).
"""
