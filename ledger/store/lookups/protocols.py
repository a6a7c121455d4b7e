"""Reads of the plan: registered protocols (and imported releases), their deviations and registrations."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select

from ledger.store.base import Database
from ledger.store.models import table

RELEASE_VERSION = "release"  # the version an imported release is registered under


@dataclass(frozen=True)
class RegisteredProtocol:
    id: int
    sha256: str
    name: str
    version: str
    canonical_json: str

    @property
    def is_release(self) -> bool:
        return self.version == RELEASE_VERSION

    def document(self) -> dict | None:
        """The registered document (None if it is not a JSON object)."""
        try:
            value = json.loads(self.canonical_json)
        except (TypeError, ValueError):
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class RecordedDeviation:
    id: int
    protocol_sha256: str
    item: str
    planned: str
    actual: str
    reason: str
    timing: str
    new_protocol_sha256: str | None


@dataclass(frozen=True)
class RegistrationEntry:
    """A ``registration`` chain entry: which file, with which bytes, registered a protocol."""

    seq: int
    protocol: str
    protocol_sha256: str
    file: str
    file_sha256: str
    claims: tuple[str, ...] = ()  # the claim keys (``protocol/id``) this registration preregistered


class ProtocolReads:
    """Registered protocols, their registrations and deviations."""

    def __init__(self, db: Database):
        self.db = db

    def protocols(
        self, *, sha256s: Iterable[str] | None = None, name: str | None = None, release: bool | None = None
    ) -> list[RegisteredProtocol]:
        """Registered protocols in registration order, filtered by sha256, name, and release (True) or not (False)."""
        p = table("protocols")
        stmt = select(p.c.id, p.c.sha256, p.c.name, p.c.version, p.c.canonical_json).order_by(p.c.id)
        if sha256s is not None:
            stmt = stmt.where(p.c.sha256.in_(list(sha256s)))
        if name is not None:
            stmt = stmt.where(p.c.name == name)
        if release is not None:
            stmt = stmt.where(p.c.version == RELEASE_VERSION if release else p.c.version != RELEASE_VERSION)
        return self.db.records(stmt, RegisteredProtocol)

    def protocol(self, sha256: str) -> RegisteredProtocol | None:
        found = self.protocols(sha256s=[sha256])
        return found[0] if found else None

    def deviations_to(self, new_protocol_sha256: str) -> list[RecordedDeviation]:
        """The deviations recorded on the way to a protocol version, in recording order."""
        d = table("deviations")
        stmt = (
            select(
                d.c.id,
                d.c.protocol_sha256,
                d.c.item,
                d.c.planned,
                d.c.actual,
                d.c.reason,
                d.c.timing,
                d.c.new_protocol_sha256,
            )
            .where(d.c.new_protocol_sha256 == new_protocol_sha256)
            .order_by(d.c.id)
        )
        return self.db.records(stmt, RecordedDeviation)

    def registrations(self, protocol: str | None = None) -> list[RegistrationEntry]:
        """``registration`` entries in chain order (of one protocol name if given)."""
        found = []
        for seq, data in self.db.entry_data("registration"):
            entry = RegistrationEntry(
                seq,
                data["protocol"],
                data["protocol_sha256"],
                data["file"],
                data["file_sha256"],
                tuple(data.get("claims") or ()),
            )
            if protocol is None or entry.protocol == protocol:
                found.append(entry)
        return found
