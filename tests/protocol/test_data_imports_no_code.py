"""Data never imports code: resolving a base's ``package:`` source finds the package's files without importing
any module, and never from the working folder that ``python -m`` puts on ``sys.path``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _package(folder: Path, name: str, marker: Path) -> None:
    """A package whose import (of it, or of its sub-package) leaves ``marker`` behind."""
    (folder / name / "inner").mkdir(parents=True)
    for init in (folder / name / "__init__.py", folder / name / "inner" / "__init__.py"):
        init.write_text(f"open({str(marker)!r}, 'a').write({str(init)!r} + '\\n')\n", encoding="utf-8")
    (folder / name / "inner" / "weights.gguf").write_bytes(b"GGUF")


def test_a_dotted_package_source_is_found_without_importing_its_parent(tmp_path):
    marker = tmp_path / "imported.txt"
    _package(tmp_path / "site", "plantedpkg", marker)
    found = subprocess.run(
        [sys.executable, "-c", "from ledger.protocol.bases import package_file; "
         "print(package_file('package:plantedpkg.inner/weights.gguf'))"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])},
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(tmp_path / "site" / "plantedpkg" / "inner" / "weights.gguf")
    assert not marker.exists(), marker.read_text(encoding="utf-8")


def test_a_package_in_the_working_folder_is_neither_imported_nor_used(tmp_path):
    marker = tmp_path / "imported.txt"
    work = tmp_path / "work"
    _package(work, "cwdpkg", marker)
    protocol = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    source = next(line for line in protocol.splitlines() if line.strip().startswith("source: builtin:"))
    planted = protocol.replace(source, "    source: 'package:cwdpkg.inner/weights.gguf'", 1)
    (work / "protocols").mkdir()
    (work / "protocols" / "planted.yaml").write_text(planted, encoding="utf-8")
    (work / "claims").mkdir()
    (work / "claims" / "smoke.yaml").write_bytes((ROOT / "claims" / "smoke.yaml").read_bytes())
    checked = subprocess.run(
        [sys.executable, "-m", "ledger", "check", "protocols/planted.yaml"],
        capture_output=True, text=True, cwd=work, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "Traceback" not in checked.stderr
    assert not marker.exists(), marker.read_text(encoding="utf-8")
    # not read either: ./cwdpkg's four-byte "GGUF" would have been refused as a model file
    assert checked.returncode == 0, checked.stderr
