"""Stage 9, the `ledger` command: one file per group of subcommands."""

from ledger.cli.main import main

__all__ = ["main"]
