"""A recorded file is used only as the bytes its recorded SHA-256 vouches for: a swapped file is refused (exit 4
where a command meets it), a FIFO swapped in does not hang, and a checked copy is the bytes that were hashed."""

from __future__ import annotations

import hashlib
import os

import pytest

from ledger.checked_file import ArtifactMismatch, check_in_place, checked_copy


def test_a_checked_copy_holds_the_hashed_bytes_and_a_swap_is_refused(tmp_path):
    recorded = tmp_path / "object"
    recorded.write_bytes(b"the checkpoint the ledger records")
    sha = hashlib.sha256(recorded.read_bytes()).hexdigest()
    with checked_copy(recorded, sha, "checkpoint") as copy:
        recorded.write_bytes(b"swapped while the copy is in use")  # the copy does not follow the path
        assert copy.read_bytes() == b"the checkpoint the ledger records"
    assert not copy.exists()
    with pytest.raises(ArtifactMismatch, match=f"records {sha[:12]}"), checked_copy(recorded, sha, "checkpoint"):
        pass
    with pytest.raises(ArtifactMismatch, match="hashes to"):
        check_in_place(recorded, sha, "checkpoint")


def test_a_fifo_in_place_of_a_recorded_file_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "object"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactMismatch, match="not a regular file"):
        check_in_place(fifo, "0" * 64, "checkpoint")


def test_an_export_folder_whose_weights_were_swapped_is_refused_before_loading(tmp_path):
    from arms.export import MANIFEST, WEIGHTS, load_exported

    (tmp_path / WEIGHTS).write_bytes(b"not the exported checkpoint")
    (tmp_path / MANIFEST).write_text('{"checkpoint_sha256": "' + "ab" * 32 + '"}', encoding="utf-8")
    with pytest.raises(ArtifactMismatch, match="ababababab"):
        load_exported(tmp_path)
