"""``bases.NAME.autocast: bfloat16``: the arms' forwards run under ``torch.autocast`` over float32 weights. It is a
numeric path of its own: its checkpoints record it and differ from the float32 run's; a protocol that does not
name it hashes and trains as before; over bf16 weights it is refused."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import ValidationError
from run_helpers import SMOKE, ledger_cli

from ledger.protocol.protocol import Protocol
from ledger.store import open_store

pytestmark = pytest.mark.models


def _smoke(autocast: str | None, dtype: str = "float32") -> dict:
    data = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    data["bases"]["tiny"]["dtype"] = dtype
    if autocast is not None:
        data["bases"]["tiny"]["autocast"] = autocast
    data["arms"] = [arm for arm in data["arms"] if arm["id"] == "A"]
    data["arms"][0]["stages"] = data["arms"][0]["stages"][:1]
    data["arms"][0]["stages"][0]["gates"] = ["installation"]
    data["gates"] = [gate for gate in data["gates"] if gate["id"] == "installation"]
    data.pop("claims", None)
    data["name"] = f"smoke-autocast-{autocast or 'none'}"
    return data


def test_a_protocol_without_autocast_hashes_as_before_and_bf16_weights_refuse_it():
    plain = Protocol.model_validate(_smoke(None))
    assert "autocast" not in json.loads(plain.canonical())["bases"]["tiny"]  # a late option: absent at its default
    with_autocast = Protocol.model_validate(_smoke("bfloat16"))
    assert json.loads(with_autocast.canonical())["bases"]["tiny"]["autocast"] == "bfloat16"
    with pytest.raises(ValidationError, match="autocast: bfloat16 runs over float32 weights"):
        Protocol.model_validate(_smoke("bfloat16", dtype="bfloat16"))


@pytest.mark.long  # two runs of an arm (about 20 s): the long call
def test_an_autocast_run_records_its_numerics_and_differs_from_float32(tmp_path):
    checkpoints = {}
    for autocast in (None, "bfloat16"):
        folder = tmp_path / str(autocast)
        folder.mkdir()
        protocol = folder / "p.yaml"
        protocol.write_text(yaml.safe_dump(_smoke(autocast)), encoding="utf-8")
        db = f"sqlite:///{folder / 'l.db'}"
        ran = ledger_cli("run", str(protocol), "--db", db, "--out", str(folder / "out"), "--no-progress")
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        with open_store(db) as store:
            rows = [row for row in store.rows_of("checkpoints") if row["arm"] == "A"]
            evidence = [row for row in store.rows_of("evidence", arm="A")]
        meta = json.loads(rows[-1]["meta_json"])
        checkpoints[autocast] = (
            rows[-1]["sha256"],
            meta,
            sorted((e["row_id"], e["loop"], e["score_margin"]) for e in evidence),
        )
    (plain_sha, plain_meta, plain_rows), (cast_sha, cast_meta, cast_rows) = checkpoints[None], checkpoints["bfloat16"]
    assert "autocast" not in plain_meta and cast_meta["autocast"] == "bfloat16"
    assert plain_meta["dtype"] == cast_meta["dtype"] == "float32"  # the weights stay float32
    assert cast_sha != plain_sha  # another numeric path: other weights after the same steps
    assert [r[:2] for r in cast_rows] == [r[:2] for r in plain_rows] and cast_rows != plain_rows
