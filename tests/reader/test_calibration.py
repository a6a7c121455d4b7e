"""Reader calibration: a simulated perfect executor scores 100% through the shared reader,
and a broken reader (or broken rows) is caught and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.reader.calibration import CalibrationError, CalibrationReport, calibrate, perfect_path
from ledger.reader.shared import Reader, read_generated_text
from ledger.rows.manifest import Manifest, Row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REF = None
for _parent in Path(__file__).resolve().parents:
    if (_parent / "shared" / "reference" / "recurrent-qwen-svgd" / "phase_a").exists():
        REF = _parent / "shared" / "reference" / "recurrent-qwen-svgd"
        break
needs_reference = pytest.mark.usefixtures("shared_reference")  # a missing copy fails loudly (tests/conftest.py)

N16 = [chr(ord("A") + i) for i in range(16)]
N24 = [chr(ord("A") + i) for i in range(24)]
NAMES = ["Ben", "Max", "Eve", "Kai", "Ada", "Zoe", "Leo", "Mia"]


def frozen_rows() -> list[Row]:
    rows = []
    with open(REF / "phase_a" / "frozen_rows.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            r = json.loads(line)
            mapping = r["mapping"]
            rows.append(
                Row(
                    row_id=r["id"],
                    task="rule_chasing",
                    surface="symbolic",
                    depth=r["depth"],
                    prompt=r["question"],
                    answer=r["target"],
                    path=list(r["orbit"]),
                    symbols=sorted(set(mapping) | set(mapping.values())),
                    table=dict(mapping),
                    start=r["start"],
                )
            )
    return rows


def word_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(FIXTURES / "word_tokenizer.json"), unk_token="[UNK]", pad_token="[PAD]"
    )


def chain_row(row_id: str, path: list[str], symbols: list[str], surface="symbolic", prompt=None) -> Row:
    table = {a: b for a, b in zip(path, path[1:])}
    return Row(
        row_id=row_id,
        task="rule_chasing",
        surface=surface,
        depth=len(path) - 1,
        prompt=prompt or f"Start at {path[0]} and apply the rule {len(path) - 1} times.",
        answer=path[-1],
        path=path,
        symbols=symbols,
        table=table,
        start=path[0],
    )


def hand_rows() -> list[Row]:
    relay = [
        chain_row(
            f"relay_{i}",
            NAMES[i : i + d + 1],
            NAMES,
            surface="relay",
            prompt=" ".join(f"{a} passes to {b}." for a, b in zip(NAMES[i : i + d + 1], NAMES[i + 1 : i + d + 1])),
        )
        for i, d in [(0, 1), (1, 3), (0, 7)]
    ]
    pointer = [chain_row(f"pointer_{d}", NAMES[: d + 1][::-1], NAMES, surface="pointer") for d in (1, 2, 5)]
    n24 = [chain_row(f"n24_{d}", N24[::-1][: d + 1], N24) for d in (1, 12, 22)]
    mcq = [
        Row(
            row_id=f"arith_{k}",
            task="arithmetic",
            surface="multiple_choice",
            depth=1,
            prompt=f"What is {k} + {k}?\nA. {2 * k}\nB. {2 * k + 1}\nC. {2 * k - 1}\nD. {k}",
            answer=label,
            path=[],
            symbols=["A", "B", "C", "D"],
            choices={"A": str(2 * k), "B": str(2 * k + 1), "C": str(2 * k - 1), "D": str(k)},
        )
        for k, label in [(3, "A"), (4, "B"), (5, "C"), (6, "D")]
    ]
    return relay + pointer + n24 + mcq


# ---------------------------------------------------------------------------
# 100% on the released rows and on hand-built rows of every surface
# ---------------------------------------------------------------------------


@needs_reference
def test_calibration_is_100_percent_on_the_released_frozen_rows():
    rows = frozen_rows()
    report = calibrate(Reader(N16), Manifest(name="phase_a", rows=tuple(rows)))
    assert isinstance(report, CalibrationReport)
    assert report.rows == len(rows) == 1792
    loop_cells = sum(r.depth for r in rows)
    assert report.per_form["symbol_scores"] == report.per_form["symbol_dict"] == loop_cells
    for form in ("direct", "direct_trailing", "scratchpad", "scratchpad_trailing", "answer_marker"):
        assert report.per_form[form] == len(rows)
    assert report.cells == sum(report.per_form.values())
    assert "100%" in report.summary()


@needs_reference
def test_calibration_with_a_tokenizer_on_released_rows():
    rows = [r for r in frozen_rows() if r.row_id.endswith(("00000", "00077"))]  # 2 rows per depth
    reader = Reader(N16, tokenizer=word_tokenizer())
    report = calibrate(reader, rows)
    loop_cells = sum(r.depth for r in rows)
    assert report.per_form["vocab_logits"] == report.per_form["vocab_logits_offrow"] == loop_cells
    assert report.per_form["tokenization"] == len(rows) == 28


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_calibration_on_hand_built_rows_of_every_surface(with_tokenizer):
    rows = hand_rows()
    tok = word_tokenizer() if with_tokenizer else None
    letters = calibrate(Reader(N24, tokenizer=tok), [r for r in rows if r.surface in ("symbolic", "multiple_choice")])
    names = calibrate(Reader(NAMES, tokenizer=tok), [r for r in rows if r.surface in ("relay", "pointer")])
    assert letters.rows + names.rows == len(rows)
    # a multiple-choice row without a chain: one final read, target = its label
    assert perfect_path(rows[-1]) == [(1, "D")]


def test_calibration_checks_every_loop_of_the_chain():
    row = chain_row("r", ["A", "B", "C", "D"], N16)
    report = calibrate(Reader(N16), [row])
    assert report.per_form["symbol_scores"] == 3
    assert perfect_path(row) == [(1, "B"), (2, "C"), (3, "D")]


# ---------------------------------------------------------------------------
# what calibration catches
# ---------------------------------------------------------------------------


class LastAnswerReader(Reader):
    """The authors' first dense reader: the LAST 'answer:' marker wins."""

    def read_text(self, text, row, *, loop=None, target=None):
        import re

        found = re.findall(r"answer:\s*(\w+)", text, flags=re.I)
        result = super().read_text(text, row, loop=loop, target=target)
        if found:
            from dataclasses import replace

            prediction = found[-1]
            return replace(result, prediction=prediction, correct=prediction == result.target)
        return result


class NoRestrictionReader(Reader):
    """Argmax over the whole vocabulary, not the row's symbols."""

    def restrict_scores(self, scores, row, form="auto"):
        syms = self.row_symbols(row)
        if isinstance(scores, dict):
            return {s: float(scores[s]) for s in self.symbols if s in syms or scores[s] > max(scores[x] for x in syms)}
        return super().restrict_scores(scores, row, form=form)


def test_calibration_catches_a_last_marker_reader():
    rows = [chain_row(f"r{d}", N16[: d + 1], N16) for d in range(1, 13)]
    with pytest.raises(CalibrationError) as info:
        calibrate(LastAnswerReader(N16), rows)
    error = info.value
    message = str(error)
    assert "scratchpad_trailing" in message and "direct_trailing" in message
    assert "first failing rows: r1, r10, r11, r12, r2, r3, r4, r5, r6, r7 (+2 more)" in message
    assert {f.form for f in error.failures} == {"scratchpad_trailing", "direct_trailing"}


def test_calibration_catches_a_reader_that_does_not_restrict():
    row = chain_row("r", ["A", "B", "C"], ["A", "B", "C"])
    with pytest.raises(CalibrationError, match="symbol_dict"):
        calibrate(NoRestrictionReader(N16), [row])


def test_calibration_catches_inconsistent_rows_and_foreign_symbols():
    bad_path = Row(
        row_id="bad",
        task="rule_chasing",
        surface="symbolic",
        depth=2,
        prompt="p",
        answer="C",
        path=["A", "B", "D"],
        symbols=N16,
    )
    foreign = chain_row("foreign", ["A", "Z"], ["A", "Z"])
    with pytest.raises(CalibrationError) as info:
        calibrate(Reader(N16), [bad_path, foreign, chain_row("ok", ["A", "B"], N16)])
    rows = {f.row_id for f in info.value.failures}
    assert rows == {"bad", "foreign"}
    forms = {f.form for f in info.value.failures}
    assert "vocabulary" in forms and "symbol_scores" in forms


def test_calibration_catches_an_answer_token_that_merges_with_the_prompt():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    # A character BPE without pre-tokenizer in which ":" + " B" merge into ": B".
    chars = sorted(set("".join(chr(c) for c in range(32, 127)) + "\n"))
    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    merges = []
    for s in "ABCD":
        vocab[" " + s] = len(vocab)
        merges.append((" ", s))
    vocab[": B"] = len(vocab)
    merges.append((":", " B"))
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]")))
    reader = Reader(["A", "B", "C", "D"], tokenizer=tok)  # every symbol alone is one token
    rows = [chain_row("toA", ["C", "A"], ["A", "B", "C", "D"]), chain_row("toB", ["C", "B"], ["A", "B", "C", "D"])]
    with pytest.raises(CalibrationError) as info:
        calibrate(reader, rows)
    assert [(f.row_id, f.form) for f in info.value.failures] == [("toB", "tokenization")]
    assert "merges" in str(info.value)


def test_read_generated_text_is_the_function_calibration_uses():
    # scratchpad format of the spec, path without the start
    assert read_generated_text(" steps: B -> C -> D answer: D answer: A", N16) == "D"


# ---------------------------------------------------------------------------
# the task generators (ledger/tasks), when present
# ---------------------------------------------------------------------------

try:  # another module of the project; these tests calibrate whatever generators exist
    from ledger.rows import tasks as _tasks

    _HAS_TASKS = hasattr(_tasks, "generate") and hasattr(_tasks, "resolve_alphabet")
except ImportError:  # pragma: no cover - only while ledger/tasks is being written
    _HAS_TASKS = False
needs_tasks = pytest.mark.skipif(not _HAS_TASKS, reason="ledger.rows.tasks not available")

RULE_CHASING_CASES = [
    ("symbolic", "N16", (1, 14)),
    ("symbolic", "N24", (1, 22)),
    ("relay", "names", (1, 14)),
    ("pointer", "names", (1, 14)),
    ("relay", "names16", (1, 8)),
    ("pointer", "N16", (1, 8)),
]


@needs_tasks
@pytest.mark.parametrize("with_tokenizer", [False, True], ids=["scores", "tokenizer"])
@pytest.mark.parametrize("surface, alphabet, depth_range", RULE_CHASING_CASES)
def test_calibration_on_every_rule_chasing_generator_and_surface(surface, alphabet, depth_range, with_tokenizer):
    from ledger.rows.tasks import generate, resolve_alphabet

    rows = generate(
        "rule_chasing",
        surface=surface,
        symbols=alphabet,
        depth_range=depth_range,
        rows_per_depth=2 if with_tokenizer else 4,
        seed=11,
        split="calib",
    )
    reader = Reader(resolve_alphabet(alphabet), tokenizer=word_tokenizer() if with_tokenizer else None)
    report = calibrate(reader, rows)
    assert report.rows == len(rows)
    assert report.per_form["symbol_scores"] == sum(r.depth for r in rows)
    assert report.per_form["scratchpad"] == len(rows)
    if with_tokenizer:
        assert report.per_form["vocab_logits_offrow"] == sum(r.depth for r in rows)
        assert report.per_form["tokenization"] == len(rows)


@needs_tasks
@pytest.mark.parametrize("with_tokenizer", [False, True], ids=["scores", "tokenizer"])
def test_calibration_on_the_arithmetic_generator(with_tokenizer):
    from ledger.rows.tasks import generate

    rows = generate("arithmetic", seed=3)
    reader = Reader(["A", "B", "C", "D"], tokenizer=word_tokenizer() if with_tokenizer else None)
    report = calibrate(reader, rows)
    assert report.rows == len(rows)
    assert report.per_form["symbol_scores"] == len(rows)  # one final read per row
    assert "scratchpad" not in report.per_form


class NeverCompleteReader(Reader):
    """A stop rule that never fires (a dense arm would generate to its budget)."""

    def is_complete(self, text, row):
        return False


def test_calibration_checks_the_stop_rule():
    rows = [chain_row("r", ["A", "B", "C"], N16)]
    with pytest.raises(CalibrationError, match="stop rule did not fire"):
        calibrate(NeverCompleteReader(N16), rows)
