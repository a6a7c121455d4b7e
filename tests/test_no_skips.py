"""A skip in this suite is a failure that names the command installing what the test needed (tests/no_skips.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HINT = "bash tests/run.sh installs what the tests need"


def pytest_in(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no_skips", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_in_a_test_or_by_a_mark_fails_with_its_reason_and_the_install_command(tmp_path):
    (tmp_path / "test_inside.py").write_text(
        "import pytest\n\n"
        "def test_skipped():\n    pytest.skip('no Chromium found')\n\n"
        "@pytest.mark.skipif(True, reason='no Go here')\ndef test_skipped_by_mark():\n    pass\n\n"
        "@pytest.mark.xfail(reason='a known failure', strict=True)\ndef test_expected_to_fail():\n    assert False\n\n"
        "def test_passes():\n    pass\n"
    )
    result = pytest_in(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    # a skip in the test fails it; a skip mark fails its set-up (an error); neither is counted as skipped
    assert out.splitlines()[-1].startswith("1 failed, 1 passed, 1 xfailed, 1 error in "), out
    for reason in ("no Chromium found", "no Go here"):
        assert f"skipped, which this suite does not allow: {reason} ({HINT})" in out, out


def test_a_module_that_skips_itself_is_a_collection_error_naming_the_install_command(tmp_path):
    (tmp_path / "test_module.py").write_text(
        "import pytest\n\npytest.importorskip('no_such_module_here')\n\ndef test_never_collected():\n    pass\n"
    )
    result = pytest_in(tmp_path)
    out = result.stdout
    assert result.returncode == 2 and "1 error" in out.splitlines()[-1], out + result.stderr
    assert "skipped, which this suite does not allow: could not import 'no_such_module_here'" in out, out
    assert HINT in out, out
