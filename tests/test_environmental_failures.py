"""Exit codes keep their promise: the machine's failures (a full disk, a file-size limit, a permission) are exit 2
with one line naming them, and nothing is left half-written; exit 70 stays for a true bug."""

from __future__ import annotations

import errno
import resource
import subprocess
import sys
from pathlib import Path

from ledger.cli.environmental import environmental_failure

ROOT = Path(__file__).resolve().parents[1]


def test_a_file_size_limit_mid_write_is_exit_2_naming_it_and_leaves_no_partial_file(tmp_path):
    def limited() -> None:  # writes past 2,000 bytes fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    out = tmp_path / "rows"
    done = subprocess.run(
        [sys.executable, "-m", "ledger", "manifest", "protocols/smoke.yaml", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, preexec_fn=limited, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: File too large (the file-size limit (ulimit -f) is below what this writes)"
    ]
    assert "internal error" not in done.stderr
    assert not [path for path in out.iterdir() if path.name.endswith(".tmp")]


def test_the_machines_failure_is_found_behind_a_librarys_own_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/ckpt/stage.safetensors")
        except OSError as disk:
            raise RuntimeError("[enforce fail at inline_container.cc] : file write failed") from disk
    except RuntimeError as wrapped:
        found = environmental_failure(wrapped)
    assert found is not None and "No space left on device: /ckpt/stage.safetensors" in found
    # a library that keeps only the words of the OSError (safetensors: "os error 28")
    assert "No space left" in (
        environmental_failure(
            Exception('IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')
        )
        or ""
    )
    # a true bug is not the machine's
    assert environmental_failure(KeyError("arm")) is None
    assert environmental_failure(OSError(errno.ENOENT, "No such file or directory")) is None
