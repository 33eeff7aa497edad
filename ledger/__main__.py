"""``python -m ledger``: the command line."""

from ledger.cli import main

main()
