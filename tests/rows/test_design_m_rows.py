"""Design M's rows: text documents (generated, worked problems, CPython's manual) and arithmetic word problems."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ledger.rows.tasks.text import generate_text, python_docs_paragraphs
from ledger.rows.tasks.word_problems import NUMBER_WORDS, generate_word_problems

ROOT = Path(__file__).resolve().parents[2]
TINY_VOCAB = set(json.loads((ROOT / "bases" / "tiny-base" / "tokenizer.json").read_text())["model"]["vocab"])


def replay(prompt: str) -> int:
    """The asked person's final count, recomputed from the problem's own sentences."""
    counts: dict[str, int] = {}
    for name, value in re.findall(r"(\w+) has (\d+) points \.", prompt):
        counts[name] = int(value)
    for giver, moved, taker in re.findall(r"(\w+) passes (\d+) points to (\w+) \.", prompt):
        counts[giver] -= int(moved)
        counts[taker] += int(moved)
    (asked,) = re.findall(r"What value has (\w+) \?", prompt)
    return counts[asked]


def test_word_problems_answer_what_their_sentences_say():
    rows = generate_word_problems(seed=5, split="t", steps=(1, 4), rows_per_step=40)
    assert len(rows) == 160 and len({r.prompt for r in rows}) == 160
    for row in rows:
        assert int(row.answer) == replay(row.prompt)
        assert len(row.path) == row.depth + 1 and row.path[-1] == row.answer
        assert row.prompt.count(" passes ") == row.depth
        assert 0 <= int(row.answer) <= 9 and row.symbols == [str(v) for v in range(10)]
        assert set(row.prompt.split()) <= TINY_VOCAB  # the tiny bases read every word
    assert rows == generate_word_problems(seed=5, split="t", steps=(1, 4), rows_per_step=40)
    assert rows != generate_word_problems(seed=6, split="t", steps=(1, 4), rows_per_step=40)


def test_word_problems_in_number_words():
    rows = generate_word_problems(seed=5, split="t", steps=(2, 2), rows_per_step=10, answer_format="words")
    assert all(row.answer == NUMBER_WORDS[replay(row.prompt)] and row.symbols == NUMBER_WORDS[:10] for row in rows)
    with pytest.raises(ValueError, match="up to 20"):
        generate_word_problems(seed=5, split="t", steps=(1, 1), rows_per_step=1, answer_max=30, answer_format="words")


def test_generated_text_is_in_the_tiny_vocabulary_and_parts_differ():
    train = generate_text(source="generated", part="train", documents=20, words=30, seed=1, split="g")
    heldout = generate_text(source="generated", part="heldout", documents=20, words=30, seed=1, split="g")
    assert all(len(row.prompt.split()) >= 30 and set(row.prompt.split()) <= TINY_VOCAB for row in train)
    assert not {row.prompt for row in train} & {row.prompt for row in heldout}
    assert all(row.task == "text" and row.symbols == [] and row.depth == 0 for row in train)


def test_worked_problems_carry_their_answers():
    rows = generate_text(source="word_problems", part="heldout", documents=5, words=40, seed=2, split="w")
    for row in rows:
        for problem in row.prompt.split("\n"):
            if problem.startswith("Answer:"):
                continue
            assert "What value has" in problem
        answers = re.findall(r"Answer: (\d+)", row.prompt)
        questions = [p for p in row.prompt.split("\n") if not p.startswith("Answer:")]
        assert [int(a) for a in answers] == [replay(q) for q in questions]


def test_python_docs_train_and_heldout_are_disjoint_by_their_text():
    assert len(python_docs_paragraphs()) > 1000  # the whole reference manual ships with CPython
    train = generate_text(source="python_docs", part="train", documents=200, words=40, seed=1, split="p")
    heldout = generate_text(source="python_docs", part="heldout", documents=20, words=40, seed=9, split="q")
    assert not {row.prompt for row in train} & {row.prompt for row in heldout}
    assert all(row.meta["python"] and len(row.prompt.split()) >= 40 for row in heldout)
    with pytest.raises(ValueError, match="fewer than"):
        generate_text(source="python_docs", part="heldout", documents=100_000, words=40, seed=1, split="p")


def _docs(part: str, version: int, seed: int = 1, split: str = "p", documents: int = 0) -> set[str]:
    pool = generate_text(
        source="python_docs", part=part, documents=documents or 1, words=40, seed=seed, split=split, version=version
    )
    if documents:
        return {row.prompt for row in pool}
    # every document of the part: ask for too many and read the count the refusal names
    with pytest.raises(ValueError, match="fewer than") as refused:
        generate_text(
            source="python_docs", part=part, documents=100_000, words=40, seed=seed, split=split, version=version
        )
    count = int(str(refused.value).split(" has ")[1].split()[0])
    return {
        row.prompt
        for row in generate_text(
            source="python_docs", part=part, documents=count, words=40, seed=seed, split=split, version=version
        )
    }


def test_version_2_dev_part_is_disjoint_from_train_and_heldout_and_version_1_is_unchanged():
    train_v1, heldout_v1 = _docs("train", 1), _docs("heldout", 1)
    train_v2, dev_v2, heldout_v2 = _docs("train", 2), _docs("dev", 2), _docs("heldout", 2)
    assert heldout_v2 == heldout_v1  # the held-out band is the same at both versions
    assert dev_v2 and not dev_v2 & train_v2 and not dev_v2 & heldout_v2
    assert train_v2 | dev_v2 == train_v1  # version 2 carves dev out of version 1's train part, nothing else
    # a seed or split reorders a part, never moves a document between parts
    assert _docs("dev", 2, seed=7, split="z", documents=10) <= dev_v2
    generated_dev = generate_text(source="generated", part="dev", documents=10, words=30, seed=1, split="g", version=2)
    generated_train = generate_text(
        source="generated", part="train", documents=50, words=30, seed=1, split="g", version=2
    )
    assert not {r.prompt for r in generated_dev} & {r.prompt for r in generated_train}
    with pytest.raises(ValueError, match="dev from version 2"):
        generate_text(source="python_docs", part="dev", documents=1, words=40, seed=1, split="p", version=1)


def test_a_dev_text_manifest_needs_version_2():
    from pydantic import ValidationError

    from ledger.protocol.manifests import TextManifest

    spec = {
        "id": "d",
        "role": "dev",
        "generator": "text",
        "source": "python_docs",
        "part": "dev",
        "documents": 4,
        "seed": 1,
        "split": "t",
    }
    with pytest.raises(ValidationError, match="needs version: 2"):
        TextManifest.model_validate(spec)
    assert TextManifest.model_validate({**spec, "version": 2}).part == "dev"
