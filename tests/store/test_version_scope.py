"""Two versions of one protocol share arm names and manifests: each claim reads the runs of the versions that
preregistered it, never a later version's checkpoint of an arm of the same name."""

from __future__ import annotations

from store_helpers import example_manifest

from ledger.audit.verify import _protocol_scope
from ledger.protocol.claims import load_claims
from ledger.store import open_store
from ledger.store.evidence import StoreEvidence


def _version(store, version: int, manifest, checkpoint: str, correct: bool) -> str:
    sha = store.add_protocol({"name": "p", "version": version, "arms": ["A"]}, name="p", version=str(version))
    manifest_sha = store.add_manifest(manifest, protocol_sha256=sha)
    run = store.add_run(run_id=f"run-{version}", kind="arm", protocol_sha256=sha, arm="A")
    store.add_checkpoint(sha256=checkpoint, arm="A", status="promoted", path=None, run_id=run, stage="s")
    store.add_evidence(
        {
            "run_id": run,
            "manifest_sha256": manifest_sha,
            "row_id": row.row_id,
            "arm": "A",
            "checkpoint_sha256": checkpoint,
            "loop": 0,
            "prediction": row.answer if correct else "?",
            "correct": correct,
        }
        for row in manifest.rows
    )
    store.append(
        "registration",
        {
            "protocol": "p",
            "protocol_sha256": sha,
            "file": "p.yaml",
            "file_sha256": "0" * 64,
            "manifests": {"eval": manifest_sha},
            "claims": [f"p/claim_v{version}"],
        },
    )
    return sha


def test_each_version_reads_its_own_runs_and_a_claim_file_is_scoped_to_the_versions_that_registered_it(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        manifest = example_manifest(4, name="eval")
        v1 = _version(store, 1, manifest, "1" * 64, correct=True)
        v2 = _version(store, 2, manifest, "2" * 64, correct=False)
        manifest_sha = store.manifests_of([v1])[0].sha256
        assert store.latest_checkpoint_on("A", manifest_sha) == "2" * 64  # unscoped: the newest of any version
        assert store.latest_checkpoint_on("A", manifest_sha, [v1]) == "1" * 64
        assert store.checkpoints_on("A", manifest_sha, [v2]) == ["2" * 64]
        for shas, correct in (((v1,), True), ((v2,), False), ((v1, v2), False)):
            records = StoreEvidence(store, shas).records("A", "eval")
            assert len(records) == 4 and {r.correct for r in records} == {correct}
        for version, expected in ((1, (v1,)), (2, (v2,))):
            path = tmp_path / f"claims-{version}.yaml"
            path.write_text(
                f"protocol: p\ncorrection: holm\nclaims:\n  - {{id: claim_v{version}, statement: s, statistic: accuracy, arm: A, "
                "manifest: eval, threshold: 0.5}\n"
            )
            assert _protocol_scope(store, load_claims(path)).protocol_shas == expected
        unregistered = tmp_path / "claims-new.yaml"
        unregistered.write_text(
            "protocol: p\ncorrection: holm\nclaims:\n  - {id: other, statement: s, statistic: accuracy, arm: A, manifest: eval, threshold: 0.5}\n"
        )
        assert _protocol_scope(store, load_claims(unregistered)).protocol_shas == (v1, v2)  # none registered it: all
    finally:
        store.close()


def test_a_manifest_shared_by_two_versions_is_found_in_the_scope_of_the_second(tmp_path):
    """The manifests table keeps a shared manifest under the version that registered it first; the second
    version's registration entry names it, and its claims find it there."""
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        manifest = example_manifest(4, name="eval")
        _version(store, 1, manifest, "1" * 64, correct=True)
        v2 = _version(store, 2, manifest, "2" * 64, correct=False)
        (shared,) = store.manifests_of([v2])  # stored once, under version 1; version 2's registration names it
        assert shared.sha256 == manifest.sha256 and shared.protocol_sha256 != v2
        assert [m.sha256 for m in store.manifests_of([v2], name="eval")] == [manifest.sha256]
        evidence = StoreEvidence(store, (v2,))
        assert evidence.manifest_sha256("eval") == manifest.sha256
        assert {r.correct for r in evidence.records("A", "eval")} == {False}
    finally:
        store.close()


def test_claims_of_version_1_are_scoped_to_it_and_the_file_on_disk_may_be_version_2(tmp_path):
    """Real registrations: smoke v1 with its claims, then v2 (a recorded deviation) with renamed claims. The
    v1 claim file is judged on v1 alone, and the protocol file on disk (now v2) is no finding against it."""
    from pathlib import Path

    from ledger.audit.preregistration import deviate, register

    root = Path(__file__).resolve().parents[2]
    claims_v1 = (root / "claims" / "smoke.yaml").read_text(encoding="utf-8")
    ids = [claim.id for claim in load_claims(root / "claims" / "smoke.yaml").claims]
    claims_v2 = claims_v1
    for claim_id in ids:
        claims_v2 = claims_v2.replace(f"{{id: {claim_id},", f"{{id: {claim_id}_v2,")
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "smoke.yaml").write_text(claims_v1, encoding="utf-8")
    protocol = tmp_path / "protocols" / "smoke.yaml"
    protocol.parent.mkdir()
    smoke = (root / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    protocol.write_text(smoke, encoding="utf-8")
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        v1 = register(store, protocol).sha256
        kept = tmp_path / "claims-v1.yaml"
        kept.write_text(claims_v1, encoding="utf-8")
        (tmp_path / "claims" / "smoke.yaml").write_text(claims_v2, encoding="utf-8")
        protocol.write_text(smoke.replace("version: 2", "version: 3", 1), encoding="utf-8")
        _, v2, _ = deviate(store, protocol, reason="renamed claims", timing="before_data")
        scope_v1 = _protocol_scope(store, load_claims(kept))
        scope_v2 = _protocol_scope(store, load_claims(tmp_path / "claims" / "smoke.yaml"))
    finally:
        store.close()
    assert ids and scope_v1.protocol_shas == (v1,) and scope_v2.protocol_shas == (v2,)
    assert scope_v1.problems == [] and scope_v2.problems == []
