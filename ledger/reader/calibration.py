"""Reader calibration: a simulated perfect executor must score 100% through the reader.

``calibrate(reader, rows)`` builds, for every row, the outputs that a perfect system
would produce -- from the row's true path -- in every form an arm can hand to the
reader, feeds them through the *same* :class:`~ledger.reader.shared.Reader` methods the
arms use, and checks that every read is correct. Any miss raises
:class:`CalibrationError` naming the failing rows (first 10 and the count) and the
form. (The published code claimed such a calibration but had none.)

Forms checked (cells = one read each):

Recurrent loops, for every row and every loop t = 1..depth, target ``path[t]`` (the
final loop's target is ``row.answer``):

* ``symbol_scores``   -- per-symbol scores in the reader's order; the target gets
  the top score, every other symbol a strictly lower one; symbols that are not the
  row's get a score ABOVE the target's (they must be ignored);
* ``symbol_dict``     -- the same as a dict symbol -> score;
* ``vocab_logits``    -- (only with a tokenizer) full-vocabulary logits, the
  target's token on top of the whole vocabulary;
* ``vocab_logits_offrow`` -- (only with a tokenizer) full-vocabulary logits where
  non-answer tokens and non-row symbols score above the target (restriction check).

When ``len(path) != depth + 1`` (e.g. a multiple-choice row with no chain), only the
final read (target ``row.answer``) is checked, with the executor emitting
``row.answer``; a rule-chasing row whose ``path[-1] != answer`` therefore fails.

Dense generation, once per row (target ``row.answer``), read by the
first-completed-answer rule (:meth:`Reader.read_text`); where the format allows it,
the reader's stop rule (:meth:`Reader.is_complete`) must also fire one character
after the answer, and that prefix must read the same:

* ``direct``               -- ``" T"`` (read at end of text; not complete mid-stream);
* ``direct_newline``       -- ``" T\\n"``;
* ``direct_trailing``      -- ``" T\\n\\nSome trailing words"`` plus other symbols of
  the row and a wrong ``"answer: X"``: the lenient continuation of a dense arm that
  never learnt EOS;
* ``direct_punct``         -- ``" T."``;
* ``scratchpad``           -- ``" steps: a -> b -> ... answer: T"`` with
  ``a, b, ... = path[1:]`` (only when the row has a chain);
* ``scratchpad_trailing``  -- the scratchpad followed by further wrong
  ``" answer: X"`` repetitions (the degenerate continuation of arm C);
* ``answer_marker``        -- ``" Answer: T"`` followed by a newline.

With a tokenizer, also ``tokenization``: the prompt's tokens followed by the
target's answer token equal the tokens of ``render(row) + " " + T`` (the symbol token
does not merge with ``"Answer:"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ledger.reader.shared import Reader, read_generated_text_detail

__all__ = ["CalibrationError", "CalibrationFailure", "CalibrationReport", "calibrate", "perfect_path"]


@dataclass(frozen=True)
class CalibrationFailure:
    row_id: str
    form: str
    loop: int | None
    expected: str
    got: str | None
    detail: str = ""


class CalibrationError(AssertionError):
    """The reader failed the perfect-executor calibration."""

    def __init__(self, failures: list[CalibrationFailure], checked: int):
        self.failures = failures
        self.checked = checked
        by_form: dict[str, int] = {}
        for f in failures:
            by_form[f.form] = by_form.get(f.form, 0) + 1
        rows = sorted({f.row_id for f in failures})
        lines = [
            f"reader calibration failed: {len(failures)} of {checked} cells wrong, {len(rows)} rows; by form {by_form}",
            "first failing rows: " + ", ".join(rows[:10]) + (f" (+{len(rows) - 10} more)" if len(rows) > 10 else ""),
        ]
        for f in failures[:10]:
            where = f"loop {f.loop}" if f.loop is not None else "final"
            lines.append(
                f"  {f.row_id} [{f.form}, {where}]: expected {f.expected!r}, read {f.got!r}"
                + (f" ({f.detail})" if f.detail else "")
            )
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class CalibrationReport:
    """``rows``: rows checked; ``cells``: reads checked; ``per_form``: reads per form
    (every one correct, else ``CalibrationError`` was raised)."""

    rows: int
    cells: int
    per_form: dict[str, int] = field(default_factory=dict)
    reader: str = ""

    @property
    def accuracy(self) -> float:
        return 1.0

    def summary(self) -> str:
        forms = ", ".join(f"{k} {v}" for k, v in sorted(self.per_form.items()))
        return f"calibration 100%: {self.rows} rows, {self.cells} cells ({forms})"


def perfect_path(row: Any) -> list[tuple[int | None, str]]:
    """(loop, symbol) pairs a perfect recurrent executor emits: ``path[t]`` for
    t = 1..depth when the row has a full chain, else only ``(depth, answer)`` (loop None: read once)."""
    path = list(getattr(row, "path", None) or [])
    if len(path) == row.depth + 1 and row.depth >= 1:
        return [(t, path[t]) for t in range(1, row.depth + 1)]
    return [(row.depth if row.depth >= 1 else None, row.answer)]


def _symbol_scores(reader: Reader, own_mask: np.ndarray, emitted: str, rng: np.random.Generator) -> np.ndarray:
    """Per-symbol scores (reader order): the emitted symbol 0, the row's other symbols
    strictly below, symbols that are not the row's ABOVE it (they must be ignored)."""
    n = len(reader.symbols)
    scores = np.where(own_mask, -1.0 - 10.0 * rng.random(n), 5.0 + rng.random(n))
    scores[reader.symbols.index(emitted)] = 0.0
    return scores


def calibrate(reader: Reader, rows_or_manifest: Any, *, seed: int = 0) -> CalibrationReport:
    """Run the simulated perfect executor through ``reader`` over every row.

    Returns a :class:`CalibrationReport`; raises :class:`CalibrationError` if any
    read is wrong (or raises), naming the failing rows and forms.
    """
    rows: Iterable[Any] = getattr(rows_or_manifest, "rows", rows_or_manifest)
    rows = list(rows)
    rng = np.random.default_rng(seed)
    failures: list[CalibrationFailure] = []
    per_form: dict[str, int] = {}
    cells = 0

    vocab_n: int | None = None
    token_ids: dict[str, int] = {}
    if reader.has_tokenizer:
        token_ids = reader.symbol_token_ids
        vocab_n = max(reader.vocab_size or 0, max(token_ids.values()) + 1)

    def record(form: str, row_id: str, loop: int | None, expected: str, got: str | None, ok: bool, detail=""):
        nonlocal cells
        cells += 1
        per_form[form] = per_form.get(form, 0) + 1
        if not ok:
            failures.append(CalibrationFailure(row_id, form, loop, expected, got, detail))

    for row in rows:
        row_id = getattr(row, "row_id", "?")
        try:
            row_syms = reader.row_symbols(row)
        except ValueError as exc:
            record("vocabulary", row_id, None, row.answer, None, False, str(exc))
            continue
        others = [s for s in row_syms if s != row.answer]
        own = set(row_syms)
        own_mask = np.array([s in own for s in reader.symbols])

        # -- recurrent loops ------------------------------------------------------
        for loop, emitted in perfect_path(row):
            try:
                expected = reader.target_for(row, loop=loop)
            except ValueError as exc:
                record("target", row_id, loop, emitted, None, False, str(exc))
                continue
            if emitted not in own:
                record(
                    "symbol_scores", row_id, loop, expected, None, False, f"path symbol {emitted!r} is not the row's"
                )
                continue
            per_symbol = _symbol_scores(reader, own_mask, emitted, rng)
            forms: list[tuple[str, Any]] = [
                ("symbol_scores", per_symbol),
                ("symbol_dict", {s: float(v) for s, v in zip(reader.symbols, per_symbol)}),
            ]
            if vocab_n is not None and emitted in token_ids:
                logits = np.minimum(rng.normal(-5.0, 1.0, size=vocab_n), -1.0)  # below the target's 0
                for s, v in zip(reader.symbols, per_symbol):
                    logits[token_ids[s]] = v if s in own else -20.0
                forms.append(("vocab_logits", logits))
                offrow = rng.normal(20.0, 1.0, size=vocab_n)  # every other token above the target
                for s, v in zip(reader.symbols, per_symbol):
                    if s in own:
                        offrow[token_ids[s]] = v
                forms.append(("vocab_logits_offrow", offrow))
            for form, scores in forms:
                try:
                    result = reader.decode_scores(
                        scores, row, loop=loop, form="vocab" if form.startswith("vocab") else "auto"
                    )
                    ok = (
                        result.correct and result.prediction == emitted and (result.margin is None or result.margin > 0)
                    )
                    record(form, row_id, loop, expected, result.prediction, ok)
                except ValueError as exc:
                    record(form, row_id, loop, expected, None, False, str(exc))

        # -- dense generation -----------------------------------------------------
        t = row.answer
        trailing_syms = " ".join(others[:3])
        texts: list[tuple[str, str, bool]] = [  # (form, text, must be complete)
            ("direct", " " + t, False),
            ("direct_newline", " " + t + "\n", True),
            (
                "direct_trailing",
                " "
                + t
                + "\n\nSome trailing words "
                + trailing_syms
                + " answer: "
                + (others[0] if others else t)
                + "\n",
                True,
            ),
            ("direct_punct", " " + t + ".", True),
            ("answer_marker", " Answer: " + t + "\n", True),
        ]
        path = list(getattr(row, "path", None) or [])
        if len(path) == row.depth + 1 and row.depth >= 1:
            scratch = " steps: " + " -> ".join(path[1:]) + " answer: " + t
            texts.append(("scratchpad", scratch, False))
            wrong = " ".join(f"answer: {s}" for s in others[:3])
            texts.append(("scratchpad_trailing", scratch + " " + wrong + " answer:", True))
        for form, text, must_complete in texts:
            try:
                result = reader.read_text(text, row)
                detail = read_generated_text_detail(text, row_syms)
                # The stop rule must agree: a complete prefix reads the same as the whole.
                stop_ok = True
                if must_complete:  # the reader's stop rule fires one character after the answer
                    cut = text[: (detail.end or 0) + 1]
                    stop_ok = reader.is_complete(cut, row) and reader.read_text(cut, row).prediction == t
                ok = result.correct and stop_ok
                record(form, row_id, None, t, result.prediction, ok, "" if stop_ok else "stop rule did not fire")
            except ValueError as exc:
                record(form, row_id, None, t, None, False, str(exc))

        # -- tokenization ---------------------------------------------------------
        if reader.has_tokenizer and t in token_ids:
            try:
                prompt = reader.render(row)
                tok = reader.tokenizer
                add_special = not reader.chat_template
                base = list(tok(prompt, add_special_tokens=add_special)["input_ids"])
                full = list(tok(prompt + " " + t, add_special_tokens=add_special)["input_ids"])
                ok = full == base + [token_ids[t]]
                record(
                    "tokenization",
                    row_id,
                    None,
                    t,
                    None if ok else str(full[len(base) - 1 :]),
                    ok,
                    "" if ok else "answer token merges with the prompt",
                )
            except Exception as exc:
                record("tokenization", row_id, None, t, None, False, repr(exc))

    if failures:
        raise CalibrationError(failures, cells)
    return CalibrationReport(rows=len(rows), cells=cells, per_form=per_form, reader=repr(reader))
