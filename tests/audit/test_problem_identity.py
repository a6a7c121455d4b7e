"""A problem is what a row asks, not how it is rendered (issue 40): the same arithmetic question with its options
reshuffled, the same multiple-choice question with its options reordered and relettered, and another protocol's
registered training rows are all refused as a confirmatory protocol's frozen evaluation rows, with the right
count."""

from __future__ import annotations

import pytest

from ledger.cli.main import main
from ledger.rows.contamination import contamination_key
from ledger.rows.manifest import Row
from ledger.rows.tasks.arithmetic import generate_arithmetic
from tests.audit.test_peeking_guardrails import CLAIMS, CONFIRMATORY, TUNING, _project, _tuning_reads_the_guard_rows

# Another protocol that trains on the confirmatory protocol's guardrail rows (its evaluation rows are its own).
TRAINER = (
    CONFIRMATORY.replace("name: tiny-verify", "name: tiny-trainer")
    .replace("role: guardrail", "role: train")
    .replace("claims: [claims.yaml]", "claims: []")
    .replace("evaluation: {manifests: [eval, guard]}", "evaluation: {manifests: [eval]}")
    .replace("split: test}", "split: trainertest}")
)


def _choice(prompt_options: list[tuple[str, str]], answer: str, question: str | None = None) -> Row:
    lines = "\n".join(f"{label}. {text}" for label, text in prompt_options)
    return Row(
        row_id="q",
        task="multiple_choice_qa",
        surface="multiple_choice",
        depth=0,
        prompt=f"Question: Which planet is largest?\n{lines}\nAnswer:",
        answer=answer,
        symbols=[label for label, _ in prompt_options],
        choices=dict(prompt_options),
        meta={"question": question} if question else {},
    )


@pytest.mark.parametrize("with_stem", [True, False])
def test_a_choice_question_is_its_stem_and_its_options_as_a_set(with_stem):
    stem = "Which planet is largest?" if with_stem else None
    original = _choice([("A", "Mars"), ("B", "Jupiter"), ("C", "Venus")], "B", stem)
    reordered = _choice([("A", "Venus"), ("B", "Mars"), ("C", "Jupiter")], "C", stem)
    relettered = _choice([("1", "Jupiter"), ("2", "Venus"), ("3", "Mars")], "1", stem)
    other_options = _choice([("A", "Mars"), ("B", "Jupiter"), ("C", "Saturn")], "B", stem)
    assert contamination_key(original) == contamination_key(reordered) == contamination_key(relettered)
    assert contamination_key(original) != contamination_key(other_options)


def test_an_arithmetic_question_is_its_operation_and_operands_whatever_its_options():
    four, eight = (generate_arithmetic(seed=5, split="guard", per_op=n) for n in (4, 8))
    shared_prompts = {row.prompt for row in four} & {row.prompt for row in eight}
    shared_problems = {contamination_key(row) for row in four} & {contamination_key(row) for row in eight}
    assert len(shared_prompts) < len(four)  # the options moved: most prompts differ ...
    assert len(shared_problems) == len(four) == 16  # ... yet every question of the smaller set is asked again


def test_a_guardrail_whose_questions_were_read_with_other_options_is_refused_with_the_right_count(
    tmp_path, monkeypatch, capsys
):
    """The tuning run read per_op 8 (32 questions); the confirmatory guardrail asks per_op 4 of the same seed:
    its 16 questions, most with other options, were all read."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "tuning.yaml").write_text(TUNING, encoding="utf-8")
    _tuning_reads_the_guard_rows(tmp_path, db)  # per_op 4 rows read by the tuning run ...
    # ... and the confirmatory protocol asks them with per_op 8: 16 of its 32 rows pose read questions
    (tmp_path / "protocol.yaml").write_text(CONFIRMATORY.replace("per_op: 4", "per_op: 8"), encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    capsys.readouterr()
    assert main(["register", "protocol.yaml", "--db", db]) == 3
    message = capsys.readouterr().err
    assert "'guard'" in message and "16 of its rows pose 16 problems" in message and "already read" in message


def test_another_protocols_registered_training_rows_are_not_fresh_evaluation_rows(tmp_path, monkeypatch, capsys):
    """No run read them: registering them as training rows is enough, since a protocol trains on them."""
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "trainer.yaml").write_text(TRAINER, encoding="utf-8")
    assert main(["register", "trainer.yaml", "--db", db]) == 0
    _project(tmp_path)
    capsys.readouterr()
    assert main(["register", "protocol.yaml", "--db", db]) == 3
    message = capsys.readouterr().err
    assert "'guard'" in message and "16 of its rows pose 16 problems" in message
    assert "tiny-trainer" in message and "trains or tunes on" in message
    # a fresh seed for the guardrail registers (seed 6 would not: three of its small products are seed 5's)
    (tmp_path / "protocol.yaml").write_text(CONFIRMATORY.replace("seed: 5, split: guard", "seed: 7, split: guard"))
    capsys.readouterr()
    assert main(["register", "protocol.yaml", "--db", db]) == 0, capsys.readouterr().err
