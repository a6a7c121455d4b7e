"""One registry per extension point: what each kind declares, resolved and checked."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from ledger.protocol.arms import ARM_KINDS, BRIDGES, BUDGETS, OBJECTIVES, RECURRENCES
from ledger.protocol.claims import STATISTICS
from ledger.protocol.gates import GATE_KINDS
from ledger.protocol.manifests import GENERATORS
from ledger.registry import Kind, Registry, UnknownKind, check_union

REGISTRIES = (ARM_KINDS, BRIDGES, BUDGETS, RECURRENCES, OBJECTIVES, STATISTICS, GATE_KINDS, GENERATORS)


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.point)
def test_every_declared_reference_resolves(registry: Registry) -> None:
    """Every "module:attribute" a kind declares names a real, callable object (imported here, as on first use)."""
    for kind in registry:
        for field in fields(kind):
            value = getattr(kind, field.name)
            if isinstance(value, str) and ":" in value and field.name in ("implementation", "counter"):
                assert callable(registry.resolve(kind.name, field.name)), (registry.point, kind.name, field.name)


def test_an_unknown_kind_is_named_with_the_closest_known_one() -> None:
    with pytest.raises(UnknownKind, match=r"unknown bridge 'splt' \(did you mean 'split'\?\)"):
        BRIDGES["splt"]
    with pytest.raises(UnknownKind, match="known: full_block, adapter"):
        BUDGETS["lora"]


def test_a_kind_is_registered_once() -> None:
    registry: Registry[Kind] = Registry("thing")
    registry.add(Kind("a", int, "math:sqrt"))
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(Kind("a", int, "math:sqrt"))
    assert registry.implementation("a")(9.0) == 3.0


def test_the_schema_union_must_list_exactly_the_registered_specs() -> None:
    class One(BaseModel):
        kind: str = "one"

    class Two(BaseModel):
        kind: str = "two"

    registry: Registry[Kind] = Registry("toy")
    registry.add(Kind("one", One, "math:sqrt"))
    registry.add(Kind("two", Two, "math:sqrt"))
    check_union(registry, Annotated[One | Two, Field(discriminator="kind")])
    with pytest.raises(TypeError, match="add the new kind to both"):
        check_union(registry, Annotated[One, Field(discriminator="kind")])
