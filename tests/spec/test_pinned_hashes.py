"""Every committed protocol, claim and manifest keeps the hash it had before the house moved.

``tests/pins/canonical_hashes.json`` was computed by the code at commit 0fa6d87 (before the
layout by flow stage); a registered protocol's canonical hash must never change, nor may a
refactor move one row of a manifest or one field of a preregistered claim.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.canonical import sha256_canonical
from ledger.rows.builder import build_manifests
from ledger.spec.claims import load_claims
from ledger.spec.loader import load_protocol

ROOT = Path(__file__).resolve().parents[2]
PINS = json.loads((ROOT / "tests" / "pins" / "canonical_hashes.json").read_text())


def test_every_committed_file_is_pinned() -> None:
    protocols = {str(p.relative_to(ROOT)) for p in (ROOT / "protocols").glob("*.yaml")}
    claims = {str(p.relative_to(ROOT)) for p in (ROOT / "claims").rglob("*.yaml")}
    assert protocols == set(PINS["protocols"]), "a new protocol needs its pin (tests/pins/canonical_hashes.json)"
    assert claims == set(PINS["claims"])


@pytest.mark.parametrize("relative", sorted(PINS["protocols"]))
def test_protocol_and_manifest_hashes_unchanged(relative: str) -> None:
    protocol = load_protocol(ROOT / relative)
    assert protocol.sha256 == PINS["protocols"][relative]
    built = {name: manifest.sha256 for name, manifest in build_manifests(protocol).items()}
    assert built == PINS["manifests"][relative]


@pytest.mark.parametrize("relative", sorted(PINS["claims"]))
def test_claim_hashes_unchanged(relative: str) -> None:
    claim_file = load_claims(ROOT / relative)
    hashes = {claim.id: sha256_canonical(claim.model_dump(mode="json", by_alias=True)) for claim in claim_file.claims}
    assert hashes == PINS["claims"][relative]
