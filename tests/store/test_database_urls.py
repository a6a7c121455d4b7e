"""A database URL that cannot be used is one line and exit 2, never a traceback, never a password.

Malformed, an unknown dialect, a driver that is not installed, a server that is not there:
the store raises ``DatabaseUnavailable``; every ``ledger`` command prints it as one
``error: ...`` line and exits 2 (EXIT_BAD_INPUT).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.cli.main import main
from ledger.store import DatabaseUnavailable, display_url, make_engine, open_store, upgrade

REPO = Path(__file__).resolve().parents[2]
NOTHING_LISTENING = "postgresql+psycopg://u@127.0.0.1:1/x"  # port 1: connection refused at once
WITH_PASSWORD = "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"
MALFORMED = "postgresql+psycopg://u@127.0.0.1:notaport/x"
DRIVER_MISSING = "error: the database driver for 'postgresql+psycopg' is not installed: pip install 'ledger[postgres]'"


# --------------------------------------------------------------------------- the store


def test_display_url_hides_the_password():
    assert display_url(WITH_PASSWORD) == "postgresql+psycopg://u:***@127.0.0.1:1/x"
    assert display_url("postgresql+psycopg://u:pw@h:bad/x") == "postgresql+psycopg://u:***@h:bad/x"  # unparsable too
    assert display_url("sqlite:///runs/ledger.db") == "sqlite:///runs/ledger.db"


def test_unreachable_server():
    for connect in (open_store, upgrade):
        with pytest.raises(DatabaseUnavailable) as info:
            connect(WITH_PASSWORD)
        message = str(info.value)
        assert message.startswith("cannot connect to the database at postgresql+psycopg://u:***@127.0.0.1:1/x: ")
        assert "refused" in message.lower() and "hunter2" not in message and "\n" not in message


@pytest.mark.parametrize(
    "url, says",
    [
        (MALFORMED, "not a database URL: 'postgresql+psycopg://u@127.0.0.1:notaport/x'"),
        ("://nothing", "not a database URL"),
        ("foo://u@h/x", "unknown database 'foo' in foo://u@h/x"),
        ("postgresql+nosuch://u@h/x", "unknown database 'postgresql+nosuch'"),
    ],
)
def test_unusable_urls(url, says):
    with pytest.raises(DatabaseUnavailable, match=says.replace("+", r"\+")) as info:
        open_store(url)
    assert "\n" not in str(info.value)


def test_missing_driver(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails as if it were not installed
    with pytest.raises(DatabaseUnavailable) as info:
        open_store(NOTHING_LISTENING)
    assert f"error: {info.value}" == DRIVER_MISSING


def test_plain_postgresql_urls_use_psycopg():
    engine = make_engine("postgresql://u@127.0.0.1:1/x")  # nothing is connected yet
    try:
        assert (engine.dialect.name, engine.dialect.driver) == ("postgresql", "psycopg")
    finally:
        engine.dispose()


def test_a_sqlite_folder_that_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DatabaseUnavailable, match="cannot create its folder"):
        open_store(f"sqlite:///{tmp_path / 'file' / 'sub' / 'ledger.db'}")


# --------------------------------------------------------------------------- the command line


def _ledger(*args: str, without_psycopg: bool = False) -> subprocess.CompletedProcess:
    """The command in a process of its own, as a user runs it."""
    setup = "import sys; sys.modules['psycopg'] = None; " if without_psycopg else "import sys; "
    code = setup + "from ledger.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def _one_line(code: int, out: str, err: str) -> str:
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_cli_unreachable_server_and_missing_driver():
    result = _ledger("head", "--db", NOTHING_LISTENING)
    line = _one_line(result.returncode, result.stdout, result.stderr)
    assert line.startswith(f"error: cannot connect to the database at {NOTHING_LISTENING}: "), line
    result = _ledger("head", "--db", NOTHING_LISTENING, without_psycopg=True)
    assert _one_line(result.returncode, result.stdout, result.stderr) == DRIVER_MISSING


@pytest.mark.parametrize(
    "args",
    [
        ("head",),
        ("db", "upgrade"),
        ("query", "SELECT 1"),
        ("verify", "claims/smoke.yaml"),
        ("verify", "claims/smoke.yaml", "--import"),
        ("import", "releases/recurrent-qwen-svgd.yaml"),
        ("register", "protocols/smoke.yaml"),
        ("deviate", "protocols/smoke.yaml", "--reason", "r", "--timing", "before_data"),
    ],
)
def test_every_ledger_command_says_it_in_one_line_without_the_password(args, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main([*args, "--db", WITH_PASSWORD])
    out, err = capsys.readouterr()
    line = _one_line(code, out, err)
    assert line.startswith("error: cannot connect to the database at postgresql+psycopg://u:***@127.0.0.1:1/x: "), line
    assert "hunter2" not in out + err
    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert _one_line(main([*args, "--db", WITH_PASSWORD]), *capsys.readouterr()) == DRIVER_MISSING
    assert _one_line(main([*args, "--db", MALFORMED]), *capsys.readouterr()).startswith(
        "error: not a database URL: 'postgresql+psycopg://u@127.0.0.1:notaport/x'"
    )
