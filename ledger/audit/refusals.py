"""What registration refuses with: below preregistration and the peeking rules, which both raise it."""

from __future__ import annotations


class RegistrationRefused(Exception):
    """The ledger refuses: a protocol changed without a deviation, or was never registered."""
