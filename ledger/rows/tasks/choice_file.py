"""Multiple-choice rows from a local JSONL file in the ARC schema (a benchmark the team holds locally).

Each line is one question, in the schema of the Hugging Face ARC datasets::

    {"id": "Mercury_7175875", "question": "An astronomer ...", "choices": {"text": [...], "label": ["A", ...]},
     "answerKey": "C"}

or AI2's original nesting (``"question": {"stem": ..., "choices": [{"text": ..., "label": ...}, ...]}``).
Options are lettered A, B, C, ... in the file's order (a file's numeric labels "1"-"4" too; the file's own
label is kept in ``meta``), and the answer is the letter of ``answerKey``. The file is pinned one of two ways:
its bytes hash to the SHA-256 the protocol names, or (``ids``: a public benchmark, whose files differ by
source) it holds exactly the benchmark's questions by their ids, and registration pins its rows: the manifest's
hash, which a later run and ``ledger verify`` rebuild and compare.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from ledger.canonical import sha256_file
from ledger.inputs import MAX_DATA_BYTES, InputFileError, parse_json, read_text
from ledger.protocol.common import local_path
from ledger.rows.manifest import Row

GENERATOR = "choice_file"
INSTRUCTION = "Answer with the letter of the correct option."


class ChoiceFileError(ValueError):
    """A choice file that is missing, changed, or not in the ARC schema (names the file and line)."""


class ChoiceFileNotHere(ChoiceFileError):
    """A benchmark file (pinned by its ids) the user has not put in place yet."""


def _options(record: dict[str, Any], where: str) -> tuple[str, list[str], list[str]]:
    question, choices = record.get("question"), record.get("choices")
    if isinstance(question, dict):  # AI2's nesting
        choices = question.get("choices")
        question = question.get("stem")
        if isinstance(choices, list) and all(isinstance(c, dict) for c in choices):
            choices = {"text": [c.get("text") for c in choices], "label": [c.get("label") for c in choices]}
    if not isinstance(question, str) or not question.strip():
        raise ChoiceFileError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(choices, dict) or not isinstance(choices.get("text"), list):
        raise ChoiceFileError(f"{where}: 'choices' must be {{'text': [...], 'label': [...]}}")
    texts, labels = choices["text"], choices.get("label") or []
    if len(labels) != len(texts) or not 2 <= len(texts) <= len(string.ascii_uppercase):
        raise ChoiceFileError(f"{where}: 'choices' needs 2-26 options, each with a text and a label")
    if not all(isinstance(value, str) for value in (*texts, *labels)):
        raise ChoiceFileError(f"{where}: every option's text and label must be strings")
    return question, [str(t) for t in texts], [str(label) for label in labels]


def generate_choice_file(
    *,
    path: str,
    sha256: str | None,
    split: str,
    limit: int | None = None,
    ids: str | None = None,
    folder: str | Path | None = None,
) -> list[Row]:
    file = local_path(path, folder)
    if not file.is_file():
        if sha256 is None and ids is not None:
            raise ChoiceFileNotHere(
                f"{file}: the {ids} file is not here: put the public dataset's questions there (one JSONL file, "
                "every split)"
            )
        raise ChoiceFileError(f"{file}: choice file not found")
    actual = sha256_file(file)
    if sha256 is not None and actual != sha256:
        raise ChoiceFileError(
            f"{file}: its SHA-256 is {actual}, the protocol names {sha256} (another file is another manifest: "
            "record a deviation)"
        )
    rows: list[Row] = []
    given: list[tuple[str, int]] = []  # each row's id as the file gives it, and its line
    seen: set[str] = set()
    try:
        text = read_text(file, "questions", MAX_DATA_BYTES)
    except InputFileError as exc:
        raise ChoiceFileError(str(exc)) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if limit is not None and len(rows) >= limit:
            break
        where = f"{file}:{number}"
        try:
            record = parse_json(line, where)
        except InputFileError as exc:
            raise ChoiceFileError(str(exc)) from None
        if not isinstance(record, dict):
            raise ChoiceFileError(f"{where}: a JSON object expected")
        question, texts, labels = _options(record, where)
        key = record.get("answerKey")
        if key not in labels:
            raise ChoiceFileError(f"{where}: answerKey {key!r} is not one of the labels {labels}")
        letters = list(string.ascii_uppercase[: len(texts)])
        row_id = f"{split}_{record.get('id', number)}"
        if row_id in seen:
            raise ChoiceFileError(f"{where}: duplicate id {record.get('id')!r}")
        seen.add(row_id)
        given.append((str(record.get("id", number)), number))
        prompt = (
            f"Question: {question}\n"
            + "".join(f"{letter}. {text}\n" for letter, text in zip(letters, texts))
            + INSTRUCTION
        )
        answer = letters[labels.index(key)]
        rows.append(
            Row(
                row_id=row_id,
                task="multiple_choice_qa",
                surface="multiple_choice",
                depth=0,
                prompt=prompt,
                answer=answer,
                path=[answer],
                symbols=letters,
                choices=dict(zip(letters, texts)),
                meta={"generator": GENERATOR, "question": question, "labels": labels, "line": number},
            )
        )
    if not rows:
        raise ChoiceFileError(f"{file}: no questions")
    if ids is not None:
        _check_ids(file, given, ids, complete=limit is None)
    return rows


def _check_ids(file: Path, given: list[tuple[str, int]], benchmark: str, *, complete: bool) -> None:
    """Every row's id is one of the benchmark's (``split:id`` or the dataset's bare id), each once; with no
    ``limit``, every one of them is there."""
    from ledger.rows.tasks.benchmarks import benchmark_ids

    known = benchmark_ids(benchmark)
    splits = set(known.values())
    seen: set[str] = set()
    for row_id, line in given:
        prefix, _, rest = row_id.partition(":")
        bare = rest if prefix in splits and rest else row_id
        if bare not in known:
            raise ChoiceFileError(f"{file}:{line}: id {row_id!r} is not one of {benchmark}'s {len(known):,} questions")
        if bare in seen:
            raise ChoiceFileError(f"{file}:{line}: question {bare!r} appears twice")
        seen.add(bare)
    if complete and len(seen) < len(known):
        missing = next(row_id for row_id in known if row_id not in seen)
        raise ChoiceFileError(
            f"{file}: {len(seen):,} of {benchmark}'s {len(known):,} questions ({len(known) - len(seen):,} missing, "
            f"e.g. {known[missing]}:{missing})"
        )
