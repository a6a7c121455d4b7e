"""A row generator defined here joins the protocol's manifests as the built-in ones do: the loader validates its
manifest (its own fields, its own errors), the schema publishes it, and its rows are built and hashed; removed
again, it is refused by name."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field, ValidationError

from ledger.protocol.manifests import GENERATORS, GeneratorKind, ManifestCommon
from ledger.protocol.protocol import Protocol, protocol_json_schema
from ledger.rows.builder import build_manifest
from ledger.rows.manifest import Row
from tests.run_helpers import SMOKE


class CountingManifest(ManifestCommon):
    """Rows that ask for the next number after a start: a one-hop chain on a numeral alphabet."""

    generator: Literal["counting"]
    rows: int = Field(ge=1, le=9)

    def generator_params(self) -> dict[str, Any]:
        return {"rows": self.rows, "split": self.split}


def generate_counting(*, rows: int, split: str) -> list[Row]:
    symbols = [str(n) for n in range(10)]
    return [
        Row(row_id=f"{split}_{n:05d}", task="rule_chasing", surface="symbolic", depth=1,
            prompt=f"After {n} comes", answer=str(n + 1), path=[str(n), str(n + 1)], symbols=symbols)
        for n in range(rows)
    ]  # fmt: skip


KIND = GeneratorKind("counting", CountingManifest, f"{__name__}:generate_counting", "the next number")


@pytest.fixture
def counting():
    GENERATORS.add(KIND)
    yield
    GENERATORS.remove("counting")


def _protocol(manifest: dict) -> dict:
    import yaml

    data = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    data["manifests"] = [*data["manifests"], manifest]
    return data


MANIFEST = {"id": "count", "role": "dev", "generator": "counting", "rows": 3, "seed": 1, "split": "count"}


def test_a_generator_defined_here_is_loaded_published_and_built(counting):
    protocol = Protocol.model_validate(_protocol(MANIFEST))
    spec = protocol.manifest("count")
    assert isinstance(spec, CountingManifest)
    assert "CountingManifest" in protocol_json_schema()["$defs"]
    built = build_manifest(spec)
    assert [row.answer for row in built.rows] == ["1", "2", "3"] and len(built.sha256) == 64
    with pytest.raises(ValidationError, match="rows"):  # its own fields, validated
        Protocol.model_validate(_protocol({**MANIFEST, "rows": 99}))


def test_without_it_the_generator_is_refused(counting):
    GENERATORS.remove("counting")
    try:
        with pytest.raises(ValidationError, match="counting"):
            Protocol.model_validate(_protocol(MANIFEST))
    finally:
        GENERATORS.add(KIND)
