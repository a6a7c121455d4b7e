"""Read-only means read-only: the auditor's commands read a ledger in a folder they cannot write (a read-only
mount, an auditor's copy) and leave it as it was, with no -wal or -shm beside the database. Run as a user without
write permission on the folder (as root, the commands run as `nobody` through setpriv)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from run_helpers import ROOT

pytestmark = pytest.mark.models


def _as_reader(args: list[str], home: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ledger", *args]
    if os.geteuid() == 0:  # root writes anywhere: run as nobody, who may only read the folder
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", *command]
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home / "mpl"), "XDG_CACHE_HOME": str(home)}
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


@contextlib.contextmanager
def _traversable_by_nobody(*paths: Path):
    """The folders above ``paths`` passable by any user while the block runs: a clone in `mktemp -d` lies in a
    0700 folder, where `nobody` could not reach the checkout or its Python. Each mode is put back after."""
    changed: dict[Path, int] = {}
    for path in paths:
        for folder in path.resolve().parents:
            mode = folder.stat().st_mode
            if folder not in changed and not mode & stat.S_IXOTH:
                changed[folder] = stat.S_IMODE(mode)
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(mode)


def _state(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        for path in sorted(folder.rglob("*"))
    }


def test_the_auditors_commands_read_a_ledger_in_a_read_only_folder_and_create_nothing(reference):
    folder, _, _ = reference
    outer = Path(tempfile.mkdtemp(prefix="ledger-ro-"))  # pytest's own temp folders are private to root
    try:
        outer.chmod(0o755)
        ledger = outer / "ledger"
        shutil.copytree(folder, ledger)
        home = outer / "home"
        home.mkdir()
        home.chmod(0o777)
        proof = home / "proof.json"
        assert not list(ledger.glob("ledger.db-*")), "the reference run left its -wal or -shm behind"
        for path in [ledger, *ledger.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        before = _state(ledger)
        db = f"sqlite:///{ledger / 'ledger.db'}"
        commands = {
            "verify": ["verify", "claims/smoke.yaml", "--db", db, "--artifacts", str(ledger)],
            "verify --all": ["verify", "claims/smoke.yaml", "--db", db, "--all", "--artifacts", str(ledger)],
            "query": ["query", "SELECT count(*) FROM chain_entries", "--db", db],
            "history": ["history", "smoke", "--db", db],
            "head": ["head", "--db", db],
            "prove": ["prove", "3", "--db", db, "--out", str(proof)],
            "fingerprint": ["fingerprint", "--db", db],
            "status": ["status", "protocols/smoke.yaml", "--db", db, "--out", str(ledger / "out")],
            "report": ["report", "smoke", "--db", db, "--out", str(home / "report")],
        }
        with _traversable_by_nobody(ROOT, Path(sys.executable)):
            for name, args in commands.items():
                done = _as_reader(args, home)
                assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-2000:])
                assert "readonly" not in done.stderr.lower() and "Traceback" not in done.stderr, (name, done.stderr)
                assert _state(ledger) == before, f"{name} changed the ledger's folder"
            # the readers could not have written even if they tried: the same user cannot create a file there
            touched = _as_reader(["query", "SELECT 1", "--db", f"sqlite:///{ledger / 'new.db'}"], home)
        assert touched.returncode != 0 and not (ledger / "new.db").exists()
    finally:
        for path in [outer, *outer.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(outer, ignore_errors=True)
