"""What every `ledger` command shares: exit codes, CommandError, the consoles and the store opener."""

from __future__ import annotations

import argparse

from rich.console import Console

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_TAMPERED = 4  # a recorded file or claim whose bytes no longer hash as recorded
EXIT_INTERNAL = 70  # a failure no check foresaw (sysexits' EX_SOFTWARE): a bug to report, never a verdict

# user text (statements, descriptions, paths) is printed as written: no markup ("E[r]" stays), no emoji
# ("file.yaml:100:" stays); our own colours are Text objects
out = Console(highlight=False, markup=False, emoji=False)
if not out.is_terminal:  # piped or captured: no 80-column squeeze, hashes stay whole
    out = Console(highlight=False, markup=False, emoji=False, width=200)
err = Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code


def _store(args: argparse.Namespace, create: bool = True, *, read_only: bool = False):
    """The ledger at ``--db`` (a new SQLite file's folder is created by the store).

    A URL that cannot be used (malformed, driver not installed, server unreachable) is the
    store's ``DatabaseUnavailable``: ``main`` prints it as one ``error:`` line, exit 2.
    """
    from ledger.store import (
        DatabaseUnavailable,
        SchemaVersionMismatch,
        StoreError,
        default_db_url,
        display_url,
        open_store,
    )

    url = args.db or default_db_url()
    try:
        return open_store(url, create=create, read_only=read_only)
    except SchemaVersionMismatch as exc:
        raise CommandError(str(exc), EXIT_REFUSED) from None
    except DatabaseUnavailable:
        raise
    except StoreError as exc:
        raise CommandError(f"{display_url(url)}: {exc}") from None
