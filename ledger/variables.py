"""The ``LEDGER_*`` environment variables: the ones the ledger knows, and what a run records of them.

None of them changes a reading: they say where the store and the artifacts live, which plugins to import,
which key signs and whether a bug shows its traceback. A run records every ``LEDGER_*`` variable that was
set (``ledger/run/environment.py``), and ``ledger verify`` flags a run made with one not named here: an old
build's switch, a typo, or something that should never have reached a confirmatory run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

PREFIX = "LEDGER_"

KNOWN = {
    "LEDGER_DB": "the store's database URL",
    "LEDGER_ARTIFACTS": "where checkpoint files are kept",
    "LEDGER_PLUGINS": "modules imported for their kinds (recorded with the run)",
    "LEDGER_SIGNING_KEY": "the private key file that signs tree heads",
    "LEDGER_DEBUG": "show the traceback of an internal error",
}

# the test suite's own services (its PostgreSQL, Slurm, caches): read by tests/ only, never by a run
KNOWN_PREFIXES = ("LEDGER_TEST_",)

# a database URL's password (postgresql://user:secret@host/db) is never recorded
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def recorded_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every ``LEDGER_*`` variable set in ``environ`` (this process's by default), passwords masked."""
    environ = os.environ if environ is None else environ
    return {name: _PASSWORD.sub(r"\1***@", value) for name, value in sorted(environ.items()) if name.startswith(PREFIX)}


def unknown_variables(recorded: Mapping[str, object]) -> list[str]:
    """The names in a recorded ``ledger_variables`` that this ledger does not know."""
    return sorted(name for name in recorded if name not in KNOWN and not name.startswith(KNOWN_PREFIXES))
