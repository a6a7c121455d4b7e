"""The artifact-store interface: ``--artifacts`` picks a kind by its ``KIND://``, a folder is the local store."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.store.artifacts import ArtifactOutsideRoot, ArtifactsRefused, kind_of, open_artifacts
from ledger.store.objects import LocalObjects


def test_a_folder_is_the_local_store_written_first_searched_with_the_ledgers_own(tmp_path):
    store = open_artifacts([tmp_path / "a", tmp_path / "b"], f"sqlite:///{tmp_path / 'db' / 'l.db'}")
    assert isinstance(store, LocalObjects)
    assert store.root == tmp_path / "a"
    assert store.search == [tmp_path / "a", tmp_path / "b", tmp_path / "db"]
    written = store.temporary("x.bin")
    written.write_bytes(b"weights")
    sha, recorded = store.put(written)
    assert store.locate(recorded, sha) == tmp_path / "a" / recorded
    assert store.locate(None, sha) == tmp_path / "a" / recorded  # by content name alone


def test_objects_kept_on_another_disk_by_a_link_are_found_and_what_is_under_them_stays_there(tmp_path):
    store = open_artifacts([tmp_path / "runs"], f"sqlite:///{tmp_path / 'runs' / 'l.db'}")
    written = store.temporary("x.bin")
    written.write_bytes(b"weights")
    sha, recorded = store.put(written)
    (tmp_path / "runs" / "objects").rename(tmp_path / "scratch")  # the user moves the weights to a bigger disk
    (tmp_path / "runs" / "objects").symlink_to(tmp_path / "scratch")
    assert store.locate(recorded, sha) == tmp_path / "runs" / recorded
    assert store.locate(None, sha) == tmp_path / "runs" / recorded
    found = store.locate(recorded, sha)
    assert found is not None and found.read_bytes() == b"weights"
    (tmp_path / "secret").write_bytes(b"not a checkpoint")
    found.unlink()
    found.symlink_to(tmp_path / "secret")  # a file under the linked folder that leads out of it
    with pytest.raises(ArtifactOutsideRoot):
        store.locate(recorded, sha)
    with pytest.raises(ArtifactOutsideRoot):
        store.locate(None, sha)


def test_without_a_location_the_ledgers_folder_is_the_root(tmp_path):
    store = open_artifacts(None, f"sqlite:///{tmp_path / 'l.db'}")
    assert isinstance(store, LocalObjects) and store.root == tmp_path


def test_kinds_are_read_from_the_location():
    assert kind_of("s3://bucket/x") == ("s3", "bucket/x")
    assert kind_of("runs/a") == ("local", "runs/a")
    assert kind_of(Path("/tmp/x")) == ("local", "/tmp/x")


def test_an_unknown_kind_or_two_kinds_are_refused_in_one_line(tmp_path):
    with pytest.raises(ArtifactsRefused, match=r"--artifacts s3://bucket: unknown artifact store 's3'"):
        open_artifacts(["s3://bucket"], "sqlite:///x.db")
    with pytest.raises(ArtifactsRefused, match="of different kinds"):
        open_artifacts(["s3://bucket", tmp_path], "sqlite:///x.db")


def test_ledger_run_with_an_unknown_kind_writes_nothing(tmp_path):
    from tests.run_helpers import SMOKE, ledger_cli

    db, out = tmp_path / "l.db", tmp_path / "out"
    done = ledger_cli("run", str(SMOKE), "--db", f"sqlite:///{db}", "--out", str(out), "--artifacts", "s3://bucket")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown artifact store 's3'" in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert not db.exists() and not out.exists()
