"""Reads of the rows: registered manifests and the rows they hold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import exists, select

from ledger.store.base import Database
from ledger.store.models import table


@dataclass(frozen=True)
class RegisteredManifest:
    id: int
    sha256: str
    name: str
    n_rows: int
    protocol_sha256: str | None


@dataclass(frozen=True)
class StoredRow:
    position: int
    row_id: str
    sha256: str
    task: str
    depth: int
    canonical_json: str


def _manifest_columns():
    m = table("manifests")
    return m, select(m.c.id, m.c.sha256, m.c.name, m.c.n_rows, m.c.protocol_sha256).order_by(m.c.id)


class ManifestReads:
    """Registered manifests and their rows."""

    def __init__(self, db: Database):
        self.db = db

    def manifest(self, sha256: str) -> RegisteredManifest | None:
        m, stmt = _manifest_columns()
        found = self.db.records(stmt.where(m.c.sha256 == sha256), RegisteredManifest)
        return found[0] if found else None

    def _registered_by(self, protocol_sha256s: Iterable[str]):
        """Manifests these protocols registered: stored under them, or (a manifest two versions share is
        stored once, under the first) named by their registration entries."""
        m = table("manifests")
        shas = set(protocol_sha256s)
        named = {
            (name, sha)
            for _, data in self.db.entry_data("registration")
            if data.get("protocol_sha256") in shas
            for name, sha in (data.get("manifests") or {}).items()
        }
        return m.c.protocol_sha256.in_(list(shas)) | m.c.sha256.in_(sorted(sha for _, sha in named)), named

    def manifests_of(self, protocol_sha256s: Iterable[str], *, name: str | None = None) -> list[RegisteredManifest]:
        """Manifests registered by these protocols (or releases), in registration order."""
        m, stmt = _manifest_columns()
        registered, named = self._registered_by(protocol_sha256s)
        stmt = stmt.where(registered)
        if name is not None:  # the name a registration gave it, or the one it was stored under
            stmt = stmt.where((m.c.name == name) | m.c.sha256.in_(sorted(sha for n, sha in named if n == name)))
        return self.db.records(stmt, RegisteredManifest)

    def manifests_with_evidence(self, protocol_sha256s: Iterable[str], *, task: str) -> list[RegisteredManifest]:
        """The protocols' manifests holding rows of ``task`` and any evidence, in registration order."""
        m, stmt = _manifest_columns()
        r, e = table("rows"), table("evidence")
        registered, _ = self._registered_by(protocol_sha256s)
        stmt = stmt.where(
            registered,
            exists().where(r.c.manifest_sha256 == m.c.sha256, r.c.task == task),
            exists().where(e.c.manifest_sha256 == m.c.sha256),
        )
        return self.db.records(stmt, RegisteredManifest)

    def manifest_rows(self, manifest_sha256: str) -> list[StoredRow]:
        """A manifest's rows in manifest order, with their stored content and hash."""
        r = table("rows")
        stmt = (
            select(r.c.position, r.c.row_id, r.c.sha256, r.c.task, r.c.depth, r.c.canonical_json)
            .where(r.c.manifest_sha256 == manifest_sha256)
            .order_by(r.c.position)
        )
        return self.db.records(stmt, StoredRow)
