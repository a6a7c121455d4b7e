"""Build a protocol's manifests from their specs, and refuse contaminated protocols."""

from __future__ import annotations

from ledger.rows.contamination import check_contamination
from ledger.rows.manifest import Manifest
from ledger.spec.protocol import ArithmeticManifest, Protocol, RuleChasingManifest
from ledger.rows.tasks import generate_arithmetic, generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet


def build_manifest(spec: RuleChasingManifest | ArithmeticManifest) -> Manifest:
    """The rows a manifest spec names: deterministic in the spec alone."""
    if isinstance(spec, RuleChasingManifest):
        rows = generate_rule_chasing(
            surface=spec.surface,
            symbols=resolve_alphabet(spec.alphabet),
            depth_range=tuple(spec.depths),
            rows_per_depth=spec.rows_per_depth,
            seed=spec.seed,
            split=spec.split,
            version=spec.version,
            distractors=spec.distractors,
        )
    else:
        rows = generate_arithmetic(seed=spec.seed, split=spec.split, per_op=spec.per_op, version=spec.version)
    return Manifest(name=spec.id, rows=tuple(rows))


def build_manifests(protocol: Protocol, *, check: bool = True) -> dict[str, Manifest]:
    """Every manifest of ``protocol``, in declaration order; refuses train/eval overlap."""
    manifests = {spec.id: build_manifest(spec) for spec in protocol.manifests}
    if check:
        by_role: dict[str, list[Manifest]] = {}
        for spec in protocol.manifests:
            by_role.setdefault(spec.role, []).append(manifests[spec.id])
        check_contamination(by_role)
    return manifests
