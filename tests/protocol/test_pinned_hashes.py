"""Every committed protocol, claim and manifest keeps the hash it had before the house moved.

``tests/pins/canonical_hashes.json`` was computed by the code at commit 0fa6d87 (before the
layout by flow stage); a registered protocol's canonical hash must never change, nor may a
refactor move one row of a manifest or one field of a preregistered claim. The only changes
are new versions recorded in ``tests/pins/deviations.json`` (old hash, new hash, the items
that changed and why, the claims' new hashes, the previous version's text under
``tests/pins/versions/``), and each is replayed here through ``ledger deviate``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.canonical import sha256_canonical
from ledger.protocol.claims import load_claims
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests, files_to_come

ROOT = Path(__file__).resolve().parents[2]
PINS = json.loads((ROOT / "tests" / "pins" / "canonical_hashes.json").read_text())
DEVIATIONS = json.loads((ROOT / "tests" / "pins" / "deviations.json").read_text())


def test_every_committed_file_is_pinned() -> None:
    protocols = {str(p.relative_to(ROOT)) for p in (ROOT / "protocols").glob("*.yaml")}
    claims = {str(p.relative_to(ROOT)) for p in (ROOT / "claims").rglob("*.yaml")}
    assert protocols == set(PINS["protocols"]), "a new protocol needs its pin (tests/pins/canonical_hashes.json)"
    assert claims == set(PINS["claims"])


def _steps(relative: str) -> list[dict]:
    """A protocol's recorded versions after its pin, in order (one deviation, or a list of them)."""
    recorded = DEVIATIONS.get(relative, [])
    return recorded if isinstance(recorded, list) else [recorded]


@pytest.mark.parametrize("relative", sorted(PINS["protocols"]))
def test_protocol_and_manifest_hashes_unchanged(relative: str) -> None:
    protocol = load_protocol(ROOT / relative)
    steps = _steps(relative)
    if not steps:
        assert protocol.sha256 == PINS["protocols"][relative]
    else:  # a chain from the pin: each version deviates from the one before, the last is the committed file
        assert steps[0]["from"] == PINS["protocols"][relative]
        assert all(a["to"] == b["from"] for a, b in zip(steps, steps[1:]))
        assert protocol.sha256 == steps[-1]["to"] and protocol.version == steps[-1]["version"]
    # the manifests of files a user supplies (ARC) are pinned by each user's registration, not here
    built = {name: m.sha256 for name, m in build_manifests(protocol, leave_out=files_to_come(protocol)).items()}
    latest = steps[-1] if steps else {}
    assert built == latest.get("manifests", PINS["manifests"][relative])  # a new version's own rows


def _claims_of_new_versions() -> dict[str, dict[str, str]]:
    """Claim files changed with a recorded new version of their protocol: their pins are the latest hashes."""
    return {
        path: hashes
        for relative in DEVIATIONS
        for step in _steps(relative)
        for path, hashes in step.get("claims", {}).items()
    }


@pytest.mark.parametrize("relative", sorted(PINS["claims"]))
def test_claim_hashes_unchanged(relative: str) -> None:
    claim_file = load_claims(ROOT / relative)
    hashes = {claim.id: sha256_canonical(claim.model_dump(mode="json", by_alias=True)) for claim in claim_file.claims}
    assert hashes == _claims_of_new_versions().get(relative, PINS["claims"][relative])


# steps registered before `ledger register` refused claims that hold without acquisition (their new versions break
# it; each has a later version that meets it)
BEFORE_THE_ACQUISITION_RULE = {
    ("protocols/phaseA-tiny.yaml", 0),
    ("protocols/phaseA-tiny.yaml", 1),
    ("protocols/phaseA.yaml", 0),
}
STEPS = [(relative, index) for relative in sorted(DEVIATIONS) for index in range(len(_steps(relative)))]


@pytest.mark.long  # every recorded version replayed (minutes): the long call
@pytest.mark.parametrize("relative,index", STEPS, ids=[f"{r}-step{i + 1}" for r, i in STEPS])
def test_a_new_version_is_a_recorded_deviation_of_exactly_its_items(relative: str, index: int, tmp_path: Path) -> None:
    """A ledger holding the version before (its kept text and claims, or for the num_layers fix that version's
    text with the value `ledger check` now refuses) deviates to the version after (the committed file, or for an
    earlier step its kept text): the ledger records exactly the listed items, and the claims registered with the
    new version are that version's."""
    import yaml

    from ledger.audit.preregistration import _write, deviate
    from ledger.store import open_store

    deviation = _steps(relative)[index]
    # the version after this step: the committed file and claims, or (an earlier step) their kept texts
    current = (ROOT / deviation["after"]).read_text() if "after" in deviation else (ROOT / relative).read_text()
    claims_after = deviation.get("after_claims", {})
    claims_before = deviation.get("previous_claims", {})  # the claims the version before registered, if kept
    if "previous" in deviation:  # the registered text of the version before, kept beside the pins
        previous_text = (ROOT / deviation["previous"]).read_text()
    else:
        data = yaml.safe_load(current)
        data["version"] = 1
        data["bases"]["tiny_large"]["num_layers"] = 4  # the value before the deviation
        previous_text = yaml.safe_dump(data, sort_keys=False)
    # each version in a folder of its own, beside what it names relative to itself (../claims, ../bases)
    old, new = tmp_path / "a" / "v1" / Path(relative).name, tmp_path / "b" / "v2" / Path(relative).name
    for path, text in ((old, previous_text), (new, current)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
        (path.parent.parent / "bases").symlink_to(ROOT / "bases")
    for folder, kept in ((old.parent, claims_before), (new.parent, claims_after)):
        if kept:
            (folder.parent / "claims").mkdir()
            for named, text_file in kept.items():
                (folder / named).resolve().write_text((ROOT / text_file).read_text())
        else:
            (folder.parent / "claims").symlink_to(ROOT / "claims")
    from benchmark_files import supply_benchmark_files

    for version in (old, new):  # the ARC files and corpora a user supplies: stand-ins (ARC: with every id)
        supply_benchmark_files(load_protocol(version))
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        # as the earlier code did, before power at registration (phaseA version 1 is unwinnable, hence version 2)
        old_version = load_protocol(old)
        assert _write(store, old, old_version, power=False, acquisition=False).sha256 == deviation["from"]
        before, after, changes = deviate(
            store,
            new,
            reason=deviation["reason"],
            timing=deviation.get("timing", "before_data"),
            acquisition=(relative, index) not in BEFORE_THE_ACQUISITION_RULE,
        )
    finally:
        store.close()
    assert (before, after) == (deviation["from"], deviation["to"])
    assert sorted(item for item, _, _ in changes) == sorted(deviation["items"])
