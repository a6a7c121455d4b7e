"""`ledger export`: a recorded checkpoint as a model folder that loads back without the ledger
and reproduces the readings the ledger recorded (full-block and adapter budgets)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from run_helpers import ROOT, SMOKE, ledger_cli

from arms.export import load_exported
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store

pytestmark = pytest.mark.models


@pytest.fixture()
def ran(reference) -> Path:
    return reference[0]  # the shared smoke run: every arm, read only here


def _final(folder: Path, arm: str) -> str:
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        return [row["sha256"] for row in store.rows_of("checkpoints") if row["arm"] == arm][-1]


@pytest.mark.parametrize("arm", ["A", "E"])
def test_an_exported_checkpoint_loads_back_and_reproduces_its_recorded_readings(ran: Path, tmp_path, arm) -> None:
    sha = _final(ran, arm)
    out = tmp_path / f"export-{arm}"
    if arm == "A":  # the command, as a user calls it
        done = ledger_cli("export", sha[:12], "--out", str(out), "--db", f"sqlite:///{ran / 'ledger.db'}")
        assert done.returncode == 0, done.stderr
    else:  # the same function in this process (no second start of torch)
        from ledger.run.export import export_checkpoint

        with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:
            export_checkpoint(store, sha, out)
    meta = json.loads((out / "ledger-export.json").read_text(encoding="utf-8"))
    assert meta["checkpoint_sha256"] == sha and meta["arm"] == arm and (out / "base" / "config.json").is_file()

    runtime = load_exported(out)
    protocol = load_protocol(SMOKE)
    rows = list(build_manifests(protocol)["eval"].rows)[::5][:4]
    readings = runtime.evaluate(rows, protocol.arm(arm).evaluation)
    with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:
        recorded = {
            (row["row_id"], row["loop"]): row
            for row in store.rows_of("evidence", arm=arm, checkpoint_sha256=sha)
            if row["row_id"] in {r.row_id for r in rows}
        }
    assert len(readings) == len(recorded) > 0
    for reading in readings:
        expected = recorded[(reading.row_id, reading.loop)]
        assert reading.prediction == expected["prediction"], (reading.row_id, reading.loop)
        assert math.isclose(reading.margin or 0.0, expected["score_margin"] or 0.0, rel_tol=1e-4, abs_tol=1e-5)


def test_export_refuses_an_unknown_checkpoint_a_base_and_an_existing_folder(ran: Path, tmp_path) -> None:
    db = f"sqlite:///{ran / 'ledger.db'}"
    unknown = ledger_cli("export", "0" * 12, "--out", str(tmp_path / "x"), "--db", db)
    assert unknown.returncode == 2 and "no checkpoint" in unknown.stderr and not (tmp_path / "x").exists()
    base = _final(ran, "base:tiny")
    refused = ledger_cli("export", base, "--out", str(tmp_path / "y"), "--db", db)
    assert refused.returncode == 2 and "is a base" in refused.stderr and not (tmp_path / "y").exists()
    existing = ledger_cli("export", _final(ran, "A"), "--out", str(ROOT / "protocols"), "--db", db)
    assert existing.returncode == 2 and "exists" in existing.stderr
    for result in (unknown, refused, existing):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("format", ["hf", "ledger"])
def test_export_refuses_a_checkpoint_file_swapped_for_another_of_its_arm(ran: Path, tmp_path, format) -> None:
    """The export vouches for the bytes it re-hashed, not for the path: a file swapped under the recorded
    object (another checkpoint of the same arm, loadable into it) is exit 4 and writes nothing."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(ran, folder, ignore=shutil.ignore_patterns("out"))
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        install, anneal = (row for row in store.rows_of("checkpoints", arm="A"))
    recorded = next(folder.rglob(anneal["sha256"]))
    shutil.copyfile(next(folder.rglob(install["sha256"])), recorded)
    out = tmp_path / "export"
    refused = ledger_cli(
        "export",
        anneal["sha256"][:12],
        "--out",
        str(out),
        "--format",
        format,
        "--db",
        f"sqlite:///{folder / 'ledger.db'}",
    )
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert f"hashes to {install['sha256'][:12]}" in refused.stderr and anneal["sha256"][:12] in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not out.exists()
    assert not list(tmp_path.glob("export*")), "nothing half-written"
