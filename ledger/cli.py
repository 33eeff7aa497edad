"""The ``ledger`` command (placeholder)."""


def main() -> None:
    """Run the command line."""
