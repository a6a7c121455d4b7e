"""Every case of issue 40 against one tree of ledger: the exit code and the first line said, one row per case.

    .venv/bin/python docs/hostile-input/run_cases.py --tree /tmp/before     # a worktree of another revision
    .venv/bin/python docs/hostile-input/run_cases.py --tree .               # this one

The fixtures (small ledgers, files) are made with this checkout's code; the commands run with the tree's
(`python -m ledger` with the tree first on PYTHONPATH), each with a time limit: a hang shows as "timeout".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from audit.test_peeking_guardrails import CLAIMS as GUARD_CLAIMS  # noqa: E402
from audit.test_peeking_guardrails import CONFIRMATORY, TUNING, _tuning_reads_the_guard_rows  # noqa: E402
from audit.test_problem_identity import TRAINER  # noqa: E402
from audit.test_tamper_matrix import _edit  # noqa: E402
from audit.test_verify import CLAIMS, PROTOCOL, write_evidence  # noqa: E402

from ledger.audit.proofs import prove  # noqa: E402
from ledger.audit.signed_head import TreeHead, generate_key, sign_tree_head  # noqa: E402
from ledger.cli.main import main as ledger_here  # noqa: E402
from ledger.store import merkle, open_store  # noqa: E402

LIMIT_S = 30


class Case:
    def __init__(self, tree: Path, work: Path):
        self.tree, self.work = tree, work

    def ledger(self, *args: str, cwd: Path | None = None) -> tuple[str, str]:
        env = dict(os.environ, PYTHONPATH=str(self.tree))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "ledger", *args],
                cwd=cwd or self.work,
                env=env,
                capture_output=True,
                text=True,
                timeout=LIMIT_S,
            )
        except subprocess.TimeoutExpired:
            return "timeout", f"no answer within {LIMIT_S} s"
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        traceback = " (traceback)" if "Traceback" in done.stderr else ""
        return str(done.returncode), (said[-1] if traceback else said[0] if said else "")[:150] + traceback

    def python(self, code: str) -> tuple[str, str]:
        env = dict(os.environ, PYTHONPATH=str(self.tree))
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.work, env=env, capture_output=True, text=True, timeout=LIMIT_S
        )
        return str(done.returncode), (done.stdout.strip() or done.stderr.strip().splitlines()[-1])[:150]


def _folder(work: Path, name: str) -> Path:
    folder = work / name
    folder.mkdir()
    return folder


def _verified_ledger(work: Path, name: str) -> tuple[Path, str]:
    """test_verify's hand-written ledger, its first outcomes recorded."""
    folder = _folder(work, name)
    os.chdir(folder)
    (folder / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{folder / 'ledger.db'}"
    assert ledger_here(["register", "protocol.yaml", "--db", db]) == 0
    write_evidence(folder, db, relative=True)
    return folder, db


def case_reshuffled_options(c: Case) -> tuple[str, str]:
    folder = _folder(c.work, "reshuffled")
    os.chdir(folder)
    db = f"sqlite:///{folder / 'ledger.db'}"
    (folder / "tuning.yaml").write_text(TUNING, encoding="utf-8")
    _tuning_reads_the_guard_rows(folder, db)
    (folder / "protocol.yaml").write_text(CONFIRMATORY.replace("per_op: 4", "per_op: 8"), encoding="utf-8")
    (folder / "claims.yaml").write_text(GUARD_CLAIMS, encoding="utf-8")
    return c.ledger("register", "protocol.yaml", "--db", db, cwd=folder)


def case_training_rows(c: Case) -> tuple[str, str]:
    folder = _folder(c.work, "training")
    os.chdir(folder)
    db = f"sqlite:///{folder / 'ledger.db'}"
    (folder / "trainer.yaml").write_text(TRAINER, encoding="utf-8")
    assert ledger_here(["register", "trainer.yaml", "--db", db]) == 0
    (folder / "protocol.yaml").write_text(CONFIRMATORY, encoding="utf-8")
    (folder / "claims.yaml").write_text(GUARD_CLAIMS, encoding="utf-8")
    return c.ledger("register", "protocol.yaml", "--db", db, cwd=folder)


def _fifo(c: Case, name: str) -> Path:
    path = c.work / name
    os.mkfifo(path)
    return path


def case_fifo_check(c: Case) -> tuple[str, str]:
    return c.ledger("check", str(_fifo(c, "check.fifo")))


def case_fifo_register(c: Case) -> tuple[str, str]:
    return c.ledger("register", str(_fifo(c, "register.fifo")), "--db", f"sqlite:///{c.work / 'fifo.db'}")


def case_fifo_proof(c: Case) -> tuple[str, str]:
    return c.ledger("verify-proof", str(_fifo(c, "proof.fifo")))


def case_huge_description(c: Case) -> tuple[str, str]:
    text = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    path = c.work / "huge.yaml"
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("description:"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    lines[start:end] = [f"description: {'x' * (50 << 20)}"]
    path.write_text("\n".join(lines).replace("../claims/", str(ROOT / "claims") + "/"), encoding="utf-8")
    return c.ledger("check", str(path))


def _path_case(c: Case, name: str, recorded: str) -> tuple[str, str]:
    folder, db = _verified_ledger(c.work, name)
    _edit(folder, lambda connection: connection.execute(
        "UPDATE checkpoints SET path = ? WHERE arm = 'A'", (recorded,)
    ))  # fmt: skip
    code, said = c.ledger("verify", "claims.yaml", "--db", db, "--json", cwd=folder)
    try:
        report = json.loads(subprocess.run(
            [sys.executable, "-m", "ledger", "verify", "claims.yaml", "--db", db, "--json"],
            cwd=folder, env=dict(os.environ, PYTHONPATH=str(c.tree)), capture_output=True, text=True, timeout=LIMIT_S,
        ).stdout)  # fmt: skip
        problems = [p for claim in report["claims"] for p in claim["problems"] if "checkpoint" in p]
        said = problems[0][:150] if problems else said
    except (ValueError, KeyError):
        pass
    return code, said


def case_absolute_path(c: Case) -> tuple[str, str]:
    return _path_case(c, "absolute", "/etc/hostname")


def case_climbing_path(c: Case) -> tuple[str, str]:
    return _path_case(c, "climbing", "../../../../../../../../etc/hostname")


def case_deep_json(c: Case) -> tuple[str, str]:
    path = c.work / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return c.ledger("verify-proof", str(path))


def case_huge_integer(c: Case) -> tuple[str, str]:
    path = c.work / "huge-int.json"
    path.write_text('{"format": 1, "leaf_index": ' + "9" * 100_000 + "}")
    return c.ledger("verify-proof", str(path))


def case_read_only_files(c: Case) -> tuple[str, str]:
    folder, db = _verified_ledger(c.work, "readonly")
    before = sorted(p.name for p in folder.iterdir())
    env = dict(os.environ, PYTHONPATH=str(c.tree))
    # a reader holding the database open while we look: what does it create beside it?
    reader = subprocess.Popen(
        [sys.executable, "-c", f"import time; from ledger.store import open_store\n"
         f"with open_store({db!r}, read_only=True) as s:\n s.head(); print('open', flush=True); time.sleep(3)"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert reader.stdout is not None
    reader.stdout.readline()
    during = sorted(p.name for p in folder.iterdir())
    reader.wait()
    code, _ = c.ledger("head", "--db", db, cwd=folder)
    created = sorted(set(during) - set(before))
    return code, f"beside the database while `head` reads: {', '.join(created) or 'nothing'}"


def _signed(c: Case) -> tuple[Path, Path, str]:
    folder = _folder(c.work, f"note{len(list(c.work.iterdir()))}")
    key = generate_key("example.org/cases")
    db = f"sqlite:///{folder / 'ledger.db'}"
    with open_store(db) as store:
        for index in range(3):
            store.append("note", {"index": index})
        leaves = [merkle.leaf_hash(entry["payload"].encode()) for entry in store.rows_of("chain_entries")]
        head = sign_tree_head(TreeHead(key.name, 3, merkle.merkle_root(leaves)), key)
        proof = prove(store, 2, signed_head=head)
    (folder / "key.pub").write_text(key.verifier().text() + "\n")
    (folder / "proof.json").write_text(json.dumps(proof))
    return folder, folder / "key.pub", head


def case_trailing_blank_line(c: Case) -> tuple[str, str]:
    folder, key, head = _signed(c)
    (folder / "head.note").write_text(head + "\n")
    return c.ledger("verify-proof", str(folder / "proof.json"), "--key", str(key), "--head", str(folder / "head.note"))


def case_consistency_from_zero(c: Case) -> tuple[str, str]:
    return c.python(
        "from ledger.store import merkle; leaves = [merkle.leaf_hash(bytes([i])) for i in range(9)]; "
        "print('accepted' if merkle.verify_consistency(merkle.EMPTY_ROOT, 0, merkle.merkle_root(leaves), 9, []) "
        "else 'refused')"
    )


def case_unverifiable_without_outcome(c: Case) -> tuple[str, str]:
    folder = _folder(c.work, "unverifiable")
    os.chdir(folder)
    (folder / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{folder / 'ledger.db'}"
    assert ledger_here(["register", "protocol.yaml", "--db", db]) == 0  # no evidence: nothing can be judged
    return c.ledger("verify", "claims.yaml", "--db", db, cwd=folder)


def case_load_extension(c: Case) -> tuple[str, str]:
    folder, db = _verified_ledger(c.work, "extension")
    return c.ledger("query", "SELECT load_extension('x')", "--db", db, cwd=folder)


def case_truncated_outcome(c: Case) -> tuple[str, str]:
    folder, db = _verified_ledger(c.work, "truncated")
    assert ledger_here(["verify", "claims.yaml", "--db", db, "--record"]) == 0

    def cut(connection: sqlite3.Connection) -> None:
        (last,) = connection.execute("SELECT MAX(entry_seq) FROM claim_outcomes").fetchone()
        for (table,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('chain_entries', 'alembic_version')"
        ).fetchall():
            connection.execute(f'DELETE FROM "{table}" WHERE entry_seq >= ?', (last,))
        connection.execute("DELETE FROM chain_entries WHERE seq >= ?", (last,))

    _edit(folder, cut)  # the chain's own hashes stay consistent: the tail is simply gone
    code, _ = c.ledger("verify", "claims.yaml", "--db", db, cwd=folder)
    env = dict(os.environ, PYTHONPATH=str(c.tree))
    table = subprocess.run(
        [sys.executable, "-m", "ledger", "verify", "claims.yaml", "--db", db],
        cwd=folder, env=env, capture_output=True, text=True, timeout=LIMIT_S,
    ).stdout  # fmt: skip
    marks = [mark for mark in ("(missing)", "(new)") if mark in table]
    return code, f"the cut claim's first outcome shows as {marks[0] if marks else '?'}"


CASES: dict[str, Callable[[Case], tuple[str, str]]] = {
    "1. same questions, options reshuffled (per_op 4 read, per_op 8 registered)": case_reshuffled_options,
    "1. another protocol's training rows as frozen guardrail rows": case_training_rows,
    "2. check on a FIFO": case_fifo_check,
    "2. register on a FIFO": case_fifo_register,
    "2. verify-proof on a FIFO": case_fifo_proof,
    "2. check on a 50 MB description": case_huge_description,
    "3. checkpoint path /etc/hostname": case_absolute_path,
    "3. checkpoint path ../../../etc/hostname": case_climbing_path,
    "4. verify-proof on deeply nested JSON": case_deep_json,
    "4. verify-proof on a 100,000-digit integer": case_huge_integer,
    "5. files created beside the database by a reader": case_read_only_files,
    "6. signed head with a trailing blank line": case_trailing_blank_line,
    "6. consistency proof from size 0 (merkle.verify_consistency)": case_consistency_from_zero,
    "7. verify: unverifiable, no first outcome": case_unverifiable_without_outcome,
    "7. query SELECT load_extension('x')": case_load_extension,
    "8. the last claim outcome cut from the chain, verify": case_truncated_outcome,
}


def print_table(cases: dict, make_case: Callable[[Path, Path], Any], description: str, header: str) -> None:
    """Run every case against ``--tree`` in a temporary folder of its own and print one Markdown row each."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tree", type=Path, required=True, help="the checkout whose `ledger` runs the cases")
    tree = parser.parse_args().tree.resolve()
    here = Path.cwd()
    print(f"| case | exit | {header} |\n| --- | --- | --- |")
    for name, case in cases.items():
        with tempfile.TemporaryDirectory() as temporary, contextlib.redirect_stdout(io.StringIO()):
            try:
                code, said = case(make_case(tree, Path(temporary)))
            finally:
                os.chdir(here)
        print(f"| {name} | {code} | {said.replace('|', '/').replace(temporary, '…')} |", flush=True)


def main() -> None:
    print_table(CASES, Case, __doc__.splitlines()[0], "first line said")


if __name__ == "__main__":
    main()
