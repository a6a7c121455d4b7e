"""Multiple-choice rows from a local ARC-schema JSONL file: both schemas (Hugging Face's and AI2's nesting),
options lettered by position, the file pinned by its SHA-256, every bad record one located line; and the
paper's cyclic-label reading, which cancels a model's preference for a letter."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from ledger.reader.choices import loglik_pairs, mean_over_rotations, rotated
from ledger.rows.tasks.choice_file import ChoiceFileError, generate_choice_file

HF = {"id": "q1", "question": "Which is a planet?", "choices": {"text": ["Moon", "Mars", "Sun", "Comet"],
      "label": ["A", "B", "C", "D"]}, "answerKey": "B"}  # fmt: skip
AI2 = {"id": "q2", "question": {"stem": "Which is hot?", "choices": [{"text": "Ice", "label": "1"},
      {"text": "Fire", "label": "2"}, {"text": "Snow", "label": "3"}]}, "answerKey": "2"}  # fmt: skip


def _file(folder: Path, records: list, name: str = "arc.jsonl") -> tuple[Path, str]:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_both_schemas_become_lettered_rows_pinned_by_the_files_hash(tmp_path) -> None:
    path, sha = _file(tmp_path, [HF, AI2])
    first, second = generate_choice_file(path=path.name, sha256=sha, split="arc", folder=tmp_path)
    assert (
        first.row_id == "arc_q1" and first.answer == "B" and first.choices == dict(zip("ABCD", HF["choices"]["text"]))
    )
    assert "B. Mars\n" in first.prompt and first.prompt.startswith("Question: Which is a planet?")
    assert second.symbols == ["A", "B", "C"] and second.answer == "B" and second.meta["labels"] == ["1", "2", "3"]
    assert len(generate_choice_file(path=str(path), sha256=sha, split="arc", limit=1)) == 1
    with pytest.raises(ChoiceFileError, match="another file is another manifest"):
        generate_choice_file(path=path.name, sha256="0" * 64, split="arc", folder=tmp_path)


@pytest.mark.parametrize(
    "record,message",
    [
        ({**HF, "answerKey": "E"}, "answerKey 'E'"),
        ({**HF, "question": ""}, "'question'"),
        ({**HF, "choices": {"text": ["x"], "label": ["A"]}}, "2-26 options"),
        ("not an object", "a JSON object"),
    ],
)
def test_a_bad_record_is_one_located_line(tmp_path, record, message) -> None:
    path, sha = _file(tmp_path, [HF, record])
    with pytest.raises(ChoiceFileError, match=message) as caught:
        generate_choice_file(path=path.name, sha256=sha, split="arc", folder=tmp_path)
    assert f"{path}:2:" in str(caught.value)


def test_cyclic_rotations_cancel_a_preference_for_a_letter(tmp_path) -> None:
    records = [{**HF, "id": f"q{i}", "answerKey": "ABCD"[i % 4]} for i in range(8)]
    path, sha = _file(tmp_path, records)
    rows = generate_choice_file(path=path.name, sha256=sha, split="arc", folder=tmp_path)

    def biased(row) -> dict[str, float]:  # loves the letter A (+5), and knows the answer (+1)
        return {letter: (5.0 if letter == "A" else 0.0) + (1.0 if letter == row.answer else 0.0) for letter in "ABCD"}

    plain = [max(biased(row), key=biased(row).get) == row.answer for row in rows]
    assert sum(plain) == 2  # only the rows whose answer is A
    shifts = [0, 1, 2, 3]
    for row in rows:
        shown = [rotated(row, shift) for shift in shifts]
        for shift, view in zip(shifts, shown):  # each showing keeps the row's options, moved over the letters
            assert view.choices["A"] == row.choices["ABCD"[shift]]
            assert view.choices[view.answer] == row.choices[row.answer]
        means = mean_over_rotations(row, shifts, [biased(view) for view in shown])
        assert max(means, key=means.get) == row.answer  # every option had the A bonus once: it cancels


def test_loglik_pairs_ask_the_question_and_score_each_options_text(tmp_path) -> None:
    path, sha = _file(tmp_path, [HF])
    (row,) = generate_choice_file(path=path.name, sha256=sha, split="arc", folder=tmp_path)
    assert loglik_pairs(row) == [("Question: Which is a planet?\nAnswer:", f" {t}") for t in HF["choices"]["text"]]


def test_a_changed_choice_file_is_one_line_in_check_and_register_and_nothing_is_written(tmp_path, capsys) -> None:
    from ledger.cli.main import main

    base = Path(__file__).resolve().parents[2] / "bases" / "tiny-base"
    path, sha = _file(tmp_path, [HF, AI2])
    protocol = tmp_path / "p.yaml"
    protocol.write_text(
        f"""name: cf
version: 1
description: A choice file.
seed: 1
bases:
  tiny: {{source: {base}, dtype: float32, num_layers: 4}}
manifests:
  - {{id: arc, role: eval, generator: choice_file, path: arc.jsonl, sha256: {sha}, seed: 0, split: arc}}
arms:
  - {{id: B, kind: dense, base: tiny, evaluation: {{manifests: [arc]}}}}
""",
        encoding="utf-8",
    )
    assert main(["check", str(protocol)]) == 0
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({**HF, "id": "q3"}) + "\n")
    capsys.readouterr()
    db = tmp_path / "ledger.db"
    for argv in (["check", str(protocol)], ["register", str(protocol), "--db", f"sqlite:///{db}"]):
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert "another file is another manifest" in error and "Traceback" not in error
    assert not db.exists()


def _benchmark_file(folder: Path, ids: list[str], name: str = "arc_easy.jsonl") -> Path:
    records = [{**HF, "id": row_id} for row_id in ids]
    return _file(folder, records, name)[0]


def test_a_benchmark_file_holds_exactly_the_releases_questions_by_their_ids(tmp_path) -> None:
    from ledger.rows.tasks.benchmarks import benchmark_ids

    known = list(benchmark_ids("arc_easy"))
    splits = benchmark_ids("arc_easy")
    assert len(known) == len(set(known)) and set(splits.values()) == {"train", "validation", "test"}
    # the dataset's own ids, or the release's split:id form; in any order; no SHA-256 needed
    given = [f"{splits[row_id]}:{row_id}" if n % 2 else row_id for n, row_id in enumerate(reversed(known))]
    rows = generate_choice_file(path=str(_benchmark_file(tmp_path, given)), sha256=None, split="arce", ids="arc_easy")
    assert len(rows) == len(known)
    first_four = generate_choice_file(
        path=str(_benchmark_file(tmp_path, known[:4], "four.jsonl")), sha256=None, split="arce", ids="arc_easy", limit=4
    )
    assert len(first_four) == 4  # with a limit, a part of the benchmark is enough
    cases = [
        (known[:-1], "5,196 of arc_easy's 5,197 questions (1 missing, e.g. "),
        ([*known[:3], "Mercury_0000000", *known[3:]], ":4: id 'Mercury_0000000' is not one of arc_easy's 5,197"),
        ([known[0], f"{splits[known[0]]}:{known[0]}", *known[1:]], f":2: question '{known[0]}' appears twice"),
    ]
    for ids, message in cases:
        with pytest.raises(ChoiceFileError, match=re.escape(message)):
            generate_choice_file(path=str(_benchmark_file(tmp_path, ids)), sha256=None, split="arce", ids="arc_easy")
    with pytest.raises(ChoiceFileError, match="the arc_easy file is not here: put the public dataset's questions"):
        generate_choice_file(path=str(tmp_path / "absent.jsonl"), sha256=None, split="arce", ids="arc_easy")


def test_a_choice_file_names_its_sha256_or_its_benchmark(tmp_path) -> None:
    from ledger.protocol.manifests import ChoiceFileManifest

    common = {"id": "arc", "role": "guardrail", "generator": "choice_file", "path": "x.jsonl", "seed": 0, "split": "a"}
    with pytest.raises(ValueError, match="give its sha256, or the benchmark whose ids it holds"):
        ChoiceFileManifest(**common)
    pinned = ChoiceFileManifest(**common, sha256="0" * 64)
    assert "ids" not in pinned.model_dump(mode="json")  # a file pinned by its hash keeps its canonical form
    assert pinned.file_to_come(tmp_path) is None
    assert ChoiceFileManifest(**common, ids="arc_easy").file_to_come(tmp_path) == (tmp_path / "x.jsonl").resolve()


def test_registration_pins_a_benchmark_files_rows_and_refuses_them_changed(tmp_path, capsys) -> None:
    """`ledger check` names the missing file and passes; `ledger register` builds and pins its rows; the same
    protocol over a changed file is refused (register again, and `ledger run` registers first), in one line."""
    from benchmark_files import write_stand_in

    from ledger.cli.main import main

    base = Path(__file__).resolve().parents[2] / "bases" / "tiny-base"
    protocol = tmp_path / "p.yaml"
    protocol.write_text(
        f"""name: bench
version: 1
description: A benchmark file pinned by its ids.
seed: 1
bases:
  tiny: {{source: {base}, dtype: float32, num_layers: 4}}
manifests:
  - {{id: arc, role: guardrail, generator: choice_file, path: data/arc_challenge.jsonl, ids: arc_challenge, seed: 0, split: arcc}}
arms:
  - {{id: B, kind: dense, base: tiny, evaluation: {{manifests: [arc]}}}}
""",
        encoding="utf-8",
    )
    assert main(["check", str(protocol)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "manifest arc: its file" in out and "is not here yet; put it there before `ledger register`" in out
    assert "manifests are built (1 wait for their files)" in out
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert main(["register", str(protocol), "--db", db]) == 2
    assert "the arc_challenge file is not here" in capsys.readouterr().err
    data = write_stand_in(tmp_path / "data" / "arc_challenge.jsonl", "arc_challenge")
    assert main(["register", str(protocol), "--db", db]) == 0
    capsys.readouterr()
    assert main(["register", str(protocol), "--db", db]) == 0  # the same rows: already registered
    data.write_text(data.read_text().replace("Which colour", "What colour", 1))
    capsys.readouterr()
    assert main(["register", str(protocol), "--db", db]) == 3  # refused, as a changed protocol is
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "manifest arc of 'bench': its rows now hash to" in error
    assert "the file it reads changed since registration" in error
