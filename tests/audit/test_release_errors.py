"""A release whose data files are damaged or wrongly typed is refused with one located line (file, line,
field) and exit 2 -- never a traceback, never a half-written import."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger.cli.main import main

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "recurrent-qwen-svgd"

MAPPING = """\
release: damaged
source: the first rows of the split-bridge paper's release, then damaged by the test
root: data
manifests:
  - id: phaseA
    file: rows.jsonl
    task: rule_chasing
    surface: symbolic
    fields: {row_id: id, prompt: question, answer: target, depth: depth, table: mapping, start: start, path: orbit}
    symbols_from: table
predictions:
  - {arm: A, manifest: phaseA, file: arm_A.jsonl.gz, prediction: prediction, loop: forced_loop_count, scores: scores}
counts:
  - {id: n24, arm: A_n24, file: summary.json, select: [checkpoint_evals, 0, score, diagonal_counts]}
"""


def _lines(name: str, n: int) -> list[dict]:
    with (REFERENCE / "phase_a" / name).open(encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(n)]


@pytest.fixture()
def release(tmp_path, shared_reference) -> Path:
    """A valid five-row release in ``tmp_path``; returns its mapping file."""
    data = tmp_path / "data"
    data.mkdir()
    rows = _lines("frozen_rows.jsonl", 5)
    ids = {row["id"] for row in rows}
    with (REFERENCE / "phase_a" / "arm_A_rows.jsonl").open(encoding="utf-8") as handle:
        predictions = [record for record in map(json.loads, handle) if record["id"] in ids]
    (data / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (data / "arm_A.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(record) + "\n" for record in predictions).encode())
    )
    summary = json.loads((REFERENCE / "n24" / "support12_rung_summary.json").read_text(encoding="utf-8"))
    (data / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (tmp_path / "mapping.yaml").write_text(MAPPING, encoding="utf-8")
    return tmp_path / "mapping.yaml"


def _edit_rows(edit: Callable[[list[dict]], None]) -> Callable[[Path], None]:
    def apply(data: Path) -> None:
        rows = [json.loads(line) for line in (data / "rows.jsonl").read_text(encoding="utf-8").splitlines()]
        edit(rows)
        (data / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    return apply


def _edit_predictions(edit: Callable[[list[dict]], None]) -> Callable[[Path], None]:
    def apply(data: Path) -> None:
        path = data / "arm_A.jsonl.gz"
        records = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
        edit(records)
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))

    return apply


def _truncate_gzip(data: Path) -> None:
    path = data / "arm_A.jsonl.gz"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _non_object_line(data: Path) -> None:
    path = data / "rows.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = json.dumps([lines[2]])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _invalid_utf8(data: Path) -> None:
    path = data / "rows.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"Function table", b"Function \xff table", 1)
    path.write_bytes(b"\n".join(lines))


def _set(index: int, name: str, value) -> Callable[[list[dict]], None]:
    def edit(records: list[dict]) -> None:
        records[index][name] = value

    return edit


def _counts_not_counts(data: Path) -> None:
    summary = json.loads((data / "summary.json").read_text(encoding="utf-8"))
    summary["checkpoint_evals"][0]["score"]["diagonal_counts"] = {"1": {"correct": "all", "total": 128}}
    (data / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


CASES = {
    "truncated gzip": (_truncate_gzip, "arm_A.jsonl.gz: not a complete gzip file"),
    "a JSON line that is not an object": (_non_object_line, "rows.jsonl:3: a JSON object expected, got list"),
    "invalid UTF-8": (_invalid_utf8, "rows.jsonl:4: not UTF-8 text"),
    "a depth that is not a number": (
        _edit_rows(_set(1, "depth", "deep")),
        "rows.jsonl:2: field 'depth' must be an integer",
    ),
    "a table that is a list": (
        _edit_rows(_set(0, "mapping", ["E", "M"])),
        "rows.jsonl:1: field 'mapping' must be an object",
    ),
    "a path that is a number": (_edit_rows(_set(4, "orbit", 7)), "rows.jsonl:5: field 'orbit' must be a list"),
    "a loop that is a word": (
        _edit_predictions(_set(0, "forced_loop_count", "one")),
        "arm_A.jsonl.gz:1: field 'forced_loop_count' must be an integer",
    ),
    "scores that are text": (
        _edit_predictions(_set(2, "scores", "high")),
        "arm_A.jsonl.gz:3: field 'scores' must be an object",
    ),
    "a score that is not a number": (
        _edit_predictions(lambda records: records[1]["scores"].update(M="-1.5")),
        "arm_A.jsonl.gz:2: field 'scores' must map symbols to numbers",
    ),
    "counts that are not integers": (
        _counts_not_counts,
        "summary.json: path ['checkpoint_evals', 0, 'score', 'diagonal_counts'] does not lead",
    ),
}


def test_the_undamaged_release_imports(release, tmp_path, capsys):
    assert main(["import", str(release), "--db", f"sqlite:///{tmp_path / 'ledger.db'}"]) == 0
    assert "evidence" in capsys.readouterr().out


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_release_file_is_one_located_line_and_writes_nothing(release, tmp_path, capsys, case):
    damage, expected = CASES[case]
    damage(tmp_path / "data")
    db = tmp_path / "ledger.db"
    capsys.readouterr()
    assert main(["import", str(release), "--db", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err, err
    assert main(["query", "SELECT COUNT(*) AS n FROM evidence", "--db", f"sqlite:///{db}", "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["n", "0"]
