"""Re-hashing what a claim rests on: manifests and rows, checkpoint files, the registered protocol and its file.

Each finding is ``(integrity, message)`` with integrity ``tampered`` or ``unverifiable``.
Everything here reads; nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ledger.audit.importer import registered_release
from ledger.canonical import sha256_file, sha256_hex
from ledger.protocol.loader import ProtocolError, load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import Store
from ledger.store.artifacts import ArtifactOutsideRoot, open_artifacts

Finding = tuple[str, str]  # (integrity, message)


class Integrity:
    """Re-hashing shared by the claims of one verify (each item is checked once)."""

    def __init__(self, store: Store, artifacts: Sequence[str | Path] | None = None):
        self.store = store
        self.artifacts = open_artifacts(artifacts, store.url)  # --artifacts first, then the ledger's own root
        self.manifest_cache: dict[str, list[str]] = {}
        self.checkpoint_cache: dict[str, Finding | None] = {}
        self.release_cache: dict[str, dict | None] = {}  # a release's registered document, read once

    def manifest_problems(self, manifest_sha: str) -> list[str]:
        if manifest_sha not in self.manifest_cache:
            self.manifest_cache[manifest_sha] = self._manifest_problems(manifest_sha)
        return self.manifest_cache[manifest_sha]

    def _manifest_problems(self, manifest_sha: str) -> list[str]:
        problems = []
        record = self.store.manifest(manifest_sha)
        if record is None:
            return [f"manifest {manifest_sha[:12]} is named but not registered"]
        rows = self.store.manifest_rows(manifest_sha)
        for row in rows:
            if sha256_hex(row.canonical_json) != row.sha256:
                problems.append(f"manifest {record.name} row {row.row_id}: content does not match its hash")
        recomputed = sha256_hex("".join(row.canonical_json + "\n" for row in rows))
        if recomputed != manifest_sha:
            problems.append(f"manifest {record.name}: rows hash to {recomputed[:12]}, registered {manifest_sha[:12]}")
        if len(rows) != record.n_rows:
            problems.append(f"manifest {record.name}: {len(rows)} rows, registered {record.n_rows}")
        return problems

    def checkpoint_status(self, sha: str) -> Finding | None:
        """None if the file re-hashes to its sha; else (integrity, message)."""
        if sha not in self.checkpoint_cache:
            self.checkpoint_cache[sha] = self._checkpoint_status(sha)
        return self.checkpoint_cache[sha]

    def lineage_problems(self, sha: str) -> list[Finding]:
        """Every ancestor of a checkpoint re-hashed, back to the base at the root of its lineage (a flipped byte
        in an earlier stage, or in the base model file, is as much a tamper as one in the final checkpoint). A
        base read from several files is recorded by a hash over their hashes with no single file, so it is
        re-hashed only where it was loaded (``ledger run`` refuses a base whose files changed)."""
        found: list[Finding] = []
        for row in self.store.lineage(sha)[1:]:
            ancestor = str(row["ancestor_sha256"])
            record = self.store.checkpoint(ancestor)
            if record is not None and not record.path and record.stage == "base":
                continue
            status = self.checkpoint_status(ancestor)
            if status is not None:
                found.append((status[0], f"in the lineage of {sha[:12]}: {status[1]}"))
        return found

    def every_file_problems(self) -> list[Finding]:
        """Every recorded checkpoint file re-hashed (``verify --all``), whatever claim reads it."""
        found: list[Finding] = []
        for row in self.store.rows_of("checkpoints"):
            if not row["path"] and row["stage"] == "base":
                continue
            status = self.checkpoint_status(str(row["sha256"]))
            if status is not None:
                found.append(status)
        return found

    def _checkpoint_status(self, sha: str) -> Finding | None:
        record = self.store.checkpoint(sha)
        if record is None:
            return ("tampered", f"checkpoint {sha[:12]} is not in the ledger")
        if record.stage == "external":
            return self._imported_file_status(sha, record.arm, self.store.checkpoint_meta([sha]).get(sha, {}))
        try:
            file = self.artifacts.locate(record.path, sha)
        except ArtifactOutsideRoot as exc:
            return ("tampered", f"checkpoint {sha[:12]} ({record.arm}): {exc}")
        if file is None:
            if not record.path:
                return ("unverifiable", f"checkpoint {sha[:12]} ({record.arm}) has no file to re-hash")
            searched = self.artifacts.searched()
            return ("unverifiable", f"checkpoint file {record.path} not found (searched {searched}; see --artifacts)")
        actual = sha256_file(file)
        if actual != sha:
            return ("tampered", f"checkpoint file {file} hashes to {actual[:12]}, registered {sha[:12]}")
        return None

    def _imported_file_status(self, sha: str, arm: str, meta: dict) -> Finding | None:
        """An imported release's file is never opened where the ledger says it was (a ledger one is sent could
        name any file on the auditor's disk): its hash must be one its registered release lists, and the release
        scope re-hashes the release's files where the auditor's claim files name them."""
        release = str(meta.get("release", ""))
        if release not in self.release_cache:
            self.release_cache[release] = registered_release(self.store, release) if release else None
        document = self.release_cache[release]
        if document is None:
            return ("tampered", f"checkpoint {sha[:12]} ({arm}) is an imported file of no imported release")
        if sha not in document.get("file_sha256", {}).values():
            return ("tampered", f"checkpoint {sha[:12]} ({arm}) is not a file release {release!r} registered")
        return None


def protocol_file_problems(store: Store, name: str, protocol_shas: tuple[str, ...]) -> list[Finding]:
    """The registered protocol's own bytes, its canonical hash, and its file on disk."""
    problems = []
    for protocol in store.protocols(sha256s=protocol_shas):
        if sha256_hex(protocol.canonical_json) != protocol.sha256:
            problems.append(
                ("tampered", f"registered protocol {name} {protocol.sha256[:12]}: content does not match its hash")
            )
    registrations = store.registrations(name)
    if registrations:
        problems.extend(_registered_file_problems(store, Path(registrations[-1].file), protocol_shas))
    return problems


def _registered_file_problems(store: Store, file: Path, protocol_shas: tuple[str, ...]) -> list[Finding]:
    """The file the latest registration names still validates, hashes to a registered version, rebuilds its rows."""
    if not file.is_file():
        return [("unverifiable", f"protocol file {file} not found: cannot check it against the registration")]
    try:
        protocol = load_protocol(file)
    except ProtocolError as exc:
        return [("tampered", f"protocol file {file} no longer validates: {exc.issues[0]}")]
    if protocol.sha256 not in protocol_shas:
        return [
            (
                "tampered",
                f"protocol file {file} was edited after registration without a recorded deviation "
                f"(file {protocol.sha256[:12]}, registered {', '.join(s[:12] for s in protocol_shas)})",
            )
        ]
    registered = {manifest.name: manifest.sha256 for manifest in store.manifests_of([protocol.sha256])}
    problems = []
    try:
        rebuilt = build_manifests(protocol, check=False)
    except ValueError as exc:  # a local file a manifest reads, changed or gone since registration
        return [("tampered", f"protocol file {file}: its manifests cannot be rebuilt: {exc}")]
    for name, manifest in rebuilt.items():
        if registered.get(name) not in (None, manifest.sha256):
            problems.append(
                (
                    "tampered",
                    f"manifest {name}: rebuilt from the protocol it hashes to "
                    f"{manifest.sha256[:12]}, registered {registered[name][:12]}",
                )
            )
    return problems
