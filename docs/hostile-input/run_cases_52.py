"""Issue 52's classes against one tree of ledger: one fresh instance per class, the exit code and what was said.

    eval "$(bash .ci/postgres.sh)"                                           # the PostgreSQL row needs a server
    .venv/bin/python docs/hostile-input/run_cases_52.py --tree /tmp/before   # a worktree of another revision
    .venv/bin/python docs/hostile-input/run_cases_52.py --tree .             # this one

As ``run_cases.py``: the fixtures are made with this checkout's code, the commands run with the tree's
(``python -m ledger`` with the tree first on PYTHONPATH), each within a time limit ("timeout" is a hang).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE)]

from model_file_builders import (  # noqa: E402
    gguf_with_a_huge_array,
    gguf_with_a_tensor_past_its_end,
    safetensors_with_header_length,
    valid_safetensors_folder,
)

SMOKE = ROOT / "protocols" / "smoke.yaml"
SECRET = "hunter2-TOKEN-9f3a"


class Case:
    def __init__(self, tree: Path, work: Path):
        self.tree, self.work = tree, work
        self.output = ""  # all the last command printed

    def ledger(self, *args: str, env: dict | None = None, limit: int = 60, preexec=None) -> tuple[str, str]:
        environment = dict(os.environ, PYTHONPATH=str(self.tree), **(env or {}))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "ledger", *args], cwd=self.work, env=environment, capture_output=True,
                text=True, timeout=limit, preexec_fn=preexec,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "timeout", f"no answer within {limit} s"
        self.output = done.stdout + done.stderr
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        traceback = " (traceback)" if "Traceback" in done.stderr else ""
        return str(done.returncode), (said[-1] if traceback else said[-1] if said else "")[:150] + traceback

    def smoke(self, folder: str, *extra: str, env: dict | None = None) -> tuple[str, str, Path]:
        db = self.work / folder / "ledger.db"
        code, said = self.ledger(
            "run", str(SMOKE), "--db", f"sqlite:///{db}", "--out", str(self.work / folder / "out"), "--no-progress",
            *extra, env=env, limit=300,
        )  # fmt: skip
        return code, said, db


def _outcomes(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT COUNT(*) FROM claim_outcomes").fetchone()[0]


def case_variable(c: Case) -> tuple[str, str]:
    code, _, _ = c.smoke("planted", "--arms", "E", env={"LEDGER_FAULT_INJECTION": "tier1_regression:E"})
    stopped = "hard_stop" in c.output
    return code, "arm E hard-stopped on Tier-1 (readings rewritten)" if stopped else "arm E complete (readings as read)"


def case_swapped_export(c: Case) -> tuple[str, str]:
    _, _, db = c.smoke("ran")
    with contextlib.closing(sqlite3.connect(db)) as connection:
        (install,), (anneal,) = connection.execute(
            "SELECT sha256 FROM checkpoints WHERE arm = 'A' ORDER BY entry_seq"
        ).fetchall()
    recorded = next((c.work / "ran").rglob(anneal))
    recorded.chmod(0o644)
    shutil.copyfile(next((c.work / "ran").rglob(install)), recorded)
    code, said = c.ledger("export", anneal[:12], "--out", str(c.work / "export"), "--db", f"sqlite:///{db}")
    return code, "exported: its README vouches for the recorded hash" if code == "0" else said


def case_artifacts_run(c: Case) -> tuple[str, str]:
    code, _, db = c.smoke("team", "--artifacts", str(c.work / "team-artifacts"))
    return code, f"first outcomes recorded: {_outcomes(db)}"


def case_gguf_array(c: Case) -> tuple[str, str]:
    return c.ledger("init", str(gguf_with_a_huge_array(c.work / "huge.gguf", 1 << 61)), limit=20)


def case_gguf_cut(c: Case) -> tuple[str, str]:
    return c.ledger("init", str(gguf_with_a_tensor_past_its_end(c.work / "cut.gguf")))


def case_safetensors_header(c: Case) -> tuple[str, str]:
    return c.ledger("init", str(safetensors_with_header_length(c.work / "model", (1 << 61) + 1)))


def case_fifo_weights(c: Case) -> tuple[str, str]:
    folder = valid_safetensors_folder(c.work / "model")
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    return c.ledger("init", str(folder), limit=20)


def case_alias_characters(c: Case) -> tuple[str, str]:
    text = SMOKE.read_text(encoding="utf-8").replace("../claims/", str(ROOT / "claims") + "/")
    first = f"  - {{id: H0, statement: &long {'x' * 12_000}}}\n"
    repeated = "".join(f"  - {{id: H{i}, statement: *long}}\n" for i in range(1, 200))
    text = text.replace("hypotheses:\n", "hypotheses:\n" + first + repeated, 1)
    (c.work / "amplified.yaml").write_text(text, encoding="utf-8")
    return c.ledger("check", str(c.work / "amplified.yaml"))


def case_package_import(c: Case) -> tuple[str, str]:
    marker = c.work / "imported.txt"
    (c.work / "cwdpkg" / "inner").mkdir(parents=True)
    for init in (c.work / "cwdpkg" / "__init__.py", c.work / "cwdpkg" / "inner" / "__init__.py"):
        init.write_text(f"open({str(marker)!r}, 'a').write('ran')\n", encoding="utf-8")
    text = SMOKE.read_text(encoding="utf-8").replace("../claims/", str(ROOT / "claims") + "/")
    source = next(line for line in text.splitlines() if line.strip().startswith("source: builtin:"))
    (c.work / "p.yaml").write_text(text.replace(source, "    source: 'package:cwdpkg.inner/w.gguf'"), encoding="utf-8")
    code, _ = c.ledger("check", "p.yaml")
    return code, f"code in the working folder ran: {'yes' if marker.exists() else 'no'}"


def case_postgres_function(c: Case) -> tuple[str, str]:
    url = os.environ.get("LEDGER_TEST_POSTGRES_URL")
    if not url:
        return "-", 'not run: no LEDGER_TEST_POSTGRES_URL (eval "$(bash .ci/postgres.sh)")'
    c.ledger("db", "upgrade", "--db", url)
    code, said = c.ledger("query", "SELECT pg_catalog.PG_ADVISORY_LOCK(7) /* server state */", "--db", url)
    return code, "ran: the server's lock was taken" if code == "0" else said


def case_look_alike_base(c: Case) -> tuple[str, str]:
    text = SMOKE.read_text(encoding="utf-8").replace("../claims/", str(ROOT / "claims") + "/")
    start = text.index("  tiny:\n")
    block = text[start : text.index("\n", text.index("source:", start)) + 1]
    text = text.replace(block, block + block.replace("tiny:", "t\u0456ny:"), 1)  # a Cyrillic i
    first = text.index("    base: tiny\n")
    second = text.index("    base: tiny\n", first + 1)
    text = text[:second] + "    base: t\u0456ny\n" + text[second + len("    base: tiny\n") :]
    (c.work / "p.yaml").write_text(text, encoding="utf-8")
    return c.ledger("check", "p.yaml")


def case_quoted_secret(c: Case) -> tuple[str, str]:
    (c.work / "settings.yaml").write_text(f"name: x\nseed: *{SECRET}\n", encoding="utf-8")
    code, said = c.ledger("check", "settings.yaml")
    return code, f"secret shown: {'yes' if SECRET in said else 'no'}: {said.replace(str(c.work), '…')}"


def case_full_disk(c: Case) -> tuple[str, str]:
    def limited() -> None:  # writes past 2,000 bytes fail as on a full disk (EFBIG; SIGXFSZ is ignored)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    code, said = c.ledger("manifest", str(SMOKE), "--out", str(c.work / "rows"), preexec=limited)
    left = [path.name for path in (c.work / "rows").glob("*.tmp")]
    return code, f"{said} (half-written: {', '.join(left) or 'none'})"


CASES: dict[str, Callable[[Case], tuple[str, str]]] = {
    "1. run with LEDGER_FAULT_INJECTION=tier1_regression:E (arm E)": case_variable,
    "2. export of a checkpoint whose object was swapped for another of its arm": case_swapped_export,
    "2. run with --artifacts DIR: first outcomes": case_artifacts_run,
    "3. init on a GGUF whose array count says 2^61": case_gguf_array,
    "3. init on a GGUF cut short of its tensors": case_gguf_cut,
    "3. init on a folder whose safetensors header says 2^61 bytes": case_safetensors_header,
    "3. init on a folder whose weights are a FIFO": case_fifo_weights,
    "3. check a protocol whose aliases repeat a 12,000-character string 200 times": case_alias_characters,
    "4. check a base package:cwdpkg.inner/w.gguf planted in the working folder": case_package_import,
    "5. query SELECT pg_catalog.PG_ADVISORY_LOCK(7) on PostgreSQL": case_postgres_function,
    "6. check bases 'tiny' and 't\\u0456ny' (Cyrillic i), arm E on the second": case_look_alike_base,
    "7. check a YAML file whose undefined alias is a secret": case_quoted_secret,
    "8. manifest --out past the file-size limit (a full disk)": case_full_disk,
}


def main() -> None:
    from run_cases import print_table

    print_table(CASES, Case, __doc__.splitlines()[0], "said")


if __name__ == "__main__":
    main()
