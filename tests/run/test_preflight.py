"""Before anything is written, `register` and `run` calibrate the reader on every manifest the arms are read
on (a perfect executor must score 100%) and refuse an unwinnable claim: a failure is one line, exit 2, and
leaves no database and no run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

import ledger.run.preflight as preflight_module
from ledger.cli.main import main
from ledger.reader.calibration import CalibrationError, CalibrationFailure
from tests.audit.test_verify import CLAIMS, PROTOCOL

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    return tmp_path


def test_register_calibrates_the_reader_on_every_read_manifest(project, monkeypatch, capsys):
    calibrated = []
    real = preflight_module.calibrate

    def spy(reader, manifest):
        report = real(reader, manifest)
        calibrated.append((manifest.name, report.cells))
        return report

    monkeypatch.setattr(preflight_module, "calibrate", spy)
    assert main(["register", "protocol.yaml", "--db", f"sqlite:///{project / 'ledger.db'}"]) == 0
    # the eval manifest (24 rows, depths 1-3: a read per loop and form), not the training rows
    assert [name for name, _ in calibrated] == ["eval"] and calibrated[0][1] > 24


def _failing(reader, manifest):
    failure = CalibrationFailure(manifest.rows[0].row_id, "symbol_scores", 1, "A", "B")
    raise CalibrationError([failure], checked=10)


def test_a_reader_that_fails_calibration_is_refused_before_anything_is_written(project, monkeypatch, capsys):
    monkeypatch.setattr(preflight_module, "calibrate", _failing)
    db = project / "ledger.db"
    assert main(["register", "protocol.yaml", "--db", f"sqlite:///{db}"]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert "the reader fails the perfect-executor calibration on manifest 'eval'" in message
    assert not db.exists()


def test_run_refuses_an_uncalibrated_reader_before_its_folder_or_ledger(tmp_path, monkeypatch, capsys):
    """The smoke protocol, with the tokenizer's calibration failing: nothing written."""
    monkeypatch.chdir(tmp_path)
    calls = []

    def fail_with_tokenizer(reader, manifest):
        calls.append(reader.has_tokenizer)
        if reader.has_tokenizer:
            _failing(reader, manifest)
        return preflight_module.__dict__["_real_calibrate"](reader, manifest)

    monkeypatch.setattr(preflight_module, "_real_calibrate", preflight_module.calibrate, raising=False)
    monkeypatch.setattr(preflight_module, "calibrate", fail_with_tokenizer)
    db, out = tmp_path / "ledger.db", tmp_path / "run"
    code = main(
        ["run", str(ROOT / "protocols" / "smoke.yaml"), "--db", f"sqlite:///{db}", "--out", str(out), "--no-progress"]
    )
    assert code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the reader fails the perfect-executor calibration" in message and "base" in message
    assert calls[0] is False and calls[-1] is True  # registration's calibration first, then the tokenizer's
    assert not db.exists() and not out.exists()
