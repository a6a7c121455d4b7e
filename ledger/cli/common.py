"""What every `ledger` command shares: exit codes, CommandError, the consoles and the store opener."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3

out = Console(highlight=False)
if not out.is_terminal:  # piped or captured: no 80-column squeeze, hashes stay whole
    out = Console(highlight=False, width=200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code


def _store(args: argparse.Namespace, create: bool = True):
    from ledger.store import SchemaVersionMismatch, StoreError, default_db_url, open_store

    url = args.db or default_db_url()
    if url.startswith("sqlite:///") and create:
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return open_store(url, create=create)
    except SchemaVersionMismatch as exc:
        raise CommandError(str(exc), EXIT_REFUSED) from None
    except StoreError as exc:
        raise CommandError(f"{url}: {exc}") from None
