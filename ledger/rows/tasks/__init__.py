"""Task generators: deterministic, hash-seeded rows for every manifest.

``generate(name, **params)`` dispatches to a registered generator; protocols name a
generator and its parameters, and the manifest hash pins the result.

- ``rule_chasing``: :func:`ledger.rows.tasks.rule_chasing.generate_rule_chasing`
  (surface, symbols, depth_range, rows_per_depth, seed, split, version, distractors)
- ``arithmetic``: :func:`ledger.rows.tasks.arithmetic.generate_arithmetic`
  (seed, split, per_op, version)
"""

from __future__ import annotations

from typing import Any

from ledger.protocol.manifests import GENERATORS
from ledger.registry import UnknownKind
from ledger.rows.manifest import Manifest, Row
from ledger.rows.tasks.alphabets import ALPHABETS, resolve_alphabet
from ledger.rows.tasks.arithmetic import generate_arithmetic
from ledger.rows.tasks.rule_chasing import generate_rule_chasing, make_table
from ledger.rows.tasks.seeds import derive_seed, row_rng
from ledger.rows.tasks.surfaces import SURFACES, render

__all__ = [
    "ALPHABETS",
    "GENERATORS",
    "SURFACES",
    "derive_seed",
    "generate",
    "generate_arithmetic",
    "generate_manifest",
    "generate_rule_chasing",
    "make_table",
    "render",
    "resolve_alphabet",
    "row_rng",
]


def generate(generator: str, **params: Any) -> list[Row]:
    """Run the registered generator ``generator`` (``ledger.protocol.manifests.GENERATORS``) with keyword ``params``."""
    try:
        function = GENERATORS.implementation(generator)
    except UnknownKind as exc:
        raise ValueError(str(exc)) from None
    if "depth_range" in params and isinstance(params["depth_range"], list):  # YAML gives lists
        params["depth_range"] = tuple(params["depth_range"])
    try:
        return function(**params)
    except TypeError as exc:
        raise TypeError(f"generator {generator!r}: {exc}") from exc


def generate_manifest(name: str, generator: str, **params: Any) -> Manifest:
    """``Manifest(name, generate(generator, **params))``."""
    return Manifest(name=name, rows=tuple(generate(generator, **params)))
