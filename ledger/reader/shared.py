"""The one shared reader through which every arm is measured.

Every system (recurrent loops, dense direct and scratchpad arms) is read by the
same object, so that a difference between arms can never be a difference between
readers. The reader owns four fixed things:

* **the prompt format** -- :meth:`Reader.render` is ``row.prompt + answer_suffix``
  (``"\\nAnswer:"``), optionally with the prompt wrapped as a chat user turn;
* **the answer vocabulary** -- one single token per symbol, the token of ``" X"``
  (leading space, because it follows ``"Answer:"``): :attr:`Reader.symbol_token_ids`;
* **the score decoder** -- :meth:`Reader.decode_scores`: restrict a loop's scores to
  the row's symbols, take the argmax (ties go to the first symbol in the reader's
  symbol order), report the margin;
* **the text decoder** -- :func:`read_generated_text` / :meth:`Reader.read_text`:
  the FIRST-COMPLETED-ANSWER rule for a dense arm's generated continuation, and
  :func:`is_complete_answer` / :meth:`Reader.is_complete`, the matching streaming
  stop rule.

The reader never knows which arm it reads. It imports no torch: scores may be torch
tensors, numpy arrays, sequences or dicts; they are converted with numpy.

The first-completed-answer rule and its streaming stop rule are written out, and
implemented, in :mod:`ledger.reader.text`; this module re-exports them.

Tokens and scores
-----------------
A symbol's token is the single token of ``" " + symbol`` (no special tokens);
:class:`Reader` refuses a tokenizer for which any symbol is several tokens, the
unknown token, or shares its token with another symbol. Scores for one loop of one
row are restricted to the row's symbols (a higher score on any other symbol or
token is ignored); the prediction is the argmax, ties to the first symbol in the
reader's symbol order; NaN never wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ledger.reader.scores import _to_numpy_1d, _to_numpy_2d
from ledger.reader.text import (
    TextRead,
    is_complete_answer,
    read_generated_text,
    read_generated_text_detail,
    row_symbols,
)
from ledger.reader.tokens import _encode_ids, _token_strings, _vocab_size

__all__ = [
    "ANSWER_SUFFIX",
    "ReadResult",
    "Reader",
    "TextRead",
    "is_complete_answer",
    "read_generated_text",
    "read_generated_text_detail",
    "row_symbols",
]

ANSWER_SUFFIX = "\nAnswer:"


# ---------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadResult:
    """One read of one row (one loop's scores, or one generated text).

    ``prediction``: the symbol read (None when nothing could be read).
    ``target``: what it was checked against (``row.answer``, ``row.path[loop]`` or an
    explicit target). ``correct``: ``prediction == target``.
    ``margin``: top score minus runner-up score among the row's symbols (scores
    only; None for text, or when the row has a single symbol).
    ``rule``: for text, which rule fired (``leading``/``marker``/``first_symbol``);
    ``"argmax"`` for scores. ``complete``: for text, whether the answer was complete
    before the end of the text (False means it came from rule 3 or the text ended
    mid-answer); always True for scores. ``loop``: the loop index if given.
    """

    prediction: str | None
    target: str | None
    correct: bool
    margin: float | None = None
    rule: str | None = None
    complete: bool = True
    loop: int | None = None
    scores: dict[str, float] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record (a non-finite margin becomes None; scores omitted)."""
        margin = self.margin if self.margin is not None and math.isfinite(self.margin) else None
        return {
            "prediction": self.prediction,
            "target": self.target,
            "correct": self.correct,
            "margin": margin,
            "rule": self.rule,
            "complete": self.complete,
            "loop": self.loop,
        }


class Reader:
    """The shared reader. See the module docstring for every rule it applies.

    Parameters
    ----------
    symbols:
        the fixed output vocabulary, in a fixed order (the tie rule uses this order).
    tokenizer:
        optional transformers tokenizer (or raw ``tokenizers.Tokenizer`` for the
        vocabulary only). When given, every symbol must encode ``" " + symbol`` to
        exactly one known token, and those tokens must be distinct; otherwise
        construction raises ``ValueError`` naming each offending symbol and its
        tokenisation.
    chat_template:
        if True, :meth:`render` wraps the prompt as a single user message with the
        tokenizer's chat template (``add_generation_prompt=True, tokenize=False``)
        and then appends ``answer_suffix``. Requires a tokenizer with a chat
        template (else ``ValueError``: no silent fallback to the plain format).
    answer_suffix:
        appended to every rendered prompt (default ``"\\nAnswer:"``).
    """

    def __init__(
        self,
        symbols: Sequence[str],
        tokenizer: Any = None,
        chat_template: bool = False,
        answer_suffix: str = ANSWER_SUFFIX,
    ) -> None:
        syms = [str(s) for s in symbols]
        if not syms:
            raise ValueError("a Reader needs at least one symbol")
        duplicates = sorted({s for s in syms if syms.count(s) > 1})
        if duplicates:
            raise ValueError(f"duplicate symbols: {duplicates}")
        bad = [s for s in syms if s == "" or s != s.strip() or re.search(r"\s", s)]
        if bad:
            raise ValueError(f"symbols must be non-empty and contain no whitespace: {bad!r}")
        self._symbols: tuple[str, ...] = tuple(syms)
        self._index = {s: i for i, s in enumerate(syms)}
        self.tokenizer = tokenizer
        self.answer_suffix = answer_suffix
        self.chat_template = bool(chat_template)
        if self.chat_template:
            if tokenizer is None or not getattr(tokenizer, "chat_template", None):
                raise ValueError(
                    "chat_template=True needs a tokenizer that has a chat template "
                    "(tokenizer.chat_template is empty); use chat_template=False for the plain format"
                )
        self._token_ids: tuple[int, ...] | None = None
        self._vocab_size: int | None = None
        if tokenizer is not None:
            self._token_ids = self._resolve_token_ids(tokenizer)
            self._vocab_size = _vocab_size(tokenizer)

    # -- vocabulary -----------------------------------------------------------------

    def _resolve_token_ids(self, tokenizer: Any) -> tuple[int, ...]:
        unk = getattr(tokenizer, "unk_token_id", None)
        problems: list[str] = []
        ids: list[int] = []
        for s in self._symbols:
            piece = " " + s
            tok_ids = _encode_ids(tokenizer, piece)
            if len(tok_ids) != 1:
                pieces = _token_strings(tokenizer, tok_ids)
                problems.append(f"{s!r}: {piece!r} -> {len(tok_ids)} tokens {pieces} (ids {tok_ids})")
                continue
            if unk is not None and tok_ids[0] == unk:
                problems.append(f"{s!r}: {piece!r} -> the unknown token (id {unk})")
                continue
            ids.append(tok_ids[0])
        if problems:
            raise ValueError(
                "every answer symbol must be a single token of the tokenizer when it follows "
                "'Answer:' (encoded as ' ' + symbol); offending symbols: " + "; ".join(problems)
            )
        by_id: dict[int, list[str]] = {}
        for s, i in zip(self._symbols, ids):
            by_id.setdefault(i, []).append(s)
        clashes = {i: ss for i, ss in by_id.items() if len(ss) > 1}
        if clashes:
            raise ValueError(f"answer symbols share a token id: {clashes}")
        return tuple(ids)

    @property
    def symbols(self) -> tuple[str, ...]:
        return self._symbols

    @property
    def symbol_token_ids(self) -> dict[str, int]:
        """symbol -> the token id of ``" " + symbol`` (needs a tokenizer)."""
        if self._token_ids is None:
            raise ValueError("this Reader has no tokenizer, so no token ids")
        return dict(zip(self._symbols, self._token_ids))

    @property
    def has_tokenizer(self) -> bool:
        return self.tokenizer is not None

    @property
    def vocab_size(self) -> int | None:
        return self._vocab_size

    def row_symbols(self, row: Any) -> list[str]:
        """The row's answer vocabulary, in the reader's symbol order; every one must be
        a symbol of this reader (else ``ValueError``)."""
        own = row_symbols(row)
        unknown = [s for s in own if s not in self._index]
        if unknown:
            raise ValueError(
                f"row {getattr(row, 'row_id', '?')}: symbols {unknown} are not in the reader's "
                f"vocabulary {list(self._symbols)}"
            )
        if not own:
            raise ValueError(f"row {getattr(row, 'row_id', '?')} has no symbols")
        return sorted(own, key=self._index.__getitem__)

    # -- prompt ---------------------------------------------------------------------

    def render(self, row: Any) -> str:
        """The model input for a row.

        Plain: ``row.prompt + answer_suffix``. With ``chat_template=True``:
        ``tokenizer.apply_chat_template([{"role": "user", "content": row.prompt}],
        add_generation_prompt=True, tokenize=False) + answer_suffix``.
        """
        prompt = row.prompt if hasattr(row, "prompt") else str(row)
        if self.chat_template:
            templated = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return templated + self.answer_suffix
        return prompt + self.answer_suffix

    def encode(self, rows: Iterable[Any], return_tensors: str | None = None) -> dict[str, Any]:
        """Tokenise the rendered rows, LEFT-padded, so that the last position of every
        row is the position that predicts the answer token.

        Each text is tokenised with the tokenizer's own call (special tokens added
        unless a chat template is used, whose text already carries them), then padded
        on the left with ``pad_token_id`` (else ``eos_token_id``, else 0), attention 0.
        Returns lists by default; ``return_tensors="np"`` gives numpy arrays and
        ``"pt"`` torch tensors (torch imported only then).
        """
        if self.tokenizer is None:
            raise ValueError("encode needs a Reader built with a tokenizer")
        texts = [self.render(r) for r in rows]
        add_special = not self.chat_template
        sequences = [[int(i) for i in self.tokenizer(t, add_special_tokens=add_special)["input_ids"]] for t in texts]
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        if pad is None:
            pad = 0
        width = max((len(s) for s in sequences), default=0)
        input_ids = [[pad] * (width - len(s)) + s for s in sequences]
        attention = [[0] * (width - len(s)) + [1] * len(s) for s in sequences]
        out: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention}
        if return_tensors is None:
            return out
        if return_tensors == "np":
            return {k: np.asarray(v, dtype=np.int64).reshape(len(v), width) for k, v in out.items()}
        if return_tensors == "pt":
            import torch  # lazily: ledger/ must import without torch

            return {k: torch.tensor(v, dtype=torch.long).reshape(len(v), width) for k, v in out.items()}
        raise ValueError(f"return_tensors must be None, 'np' or 'pt' (got {return_tensors!r})")

    # -- targets --------------------------------------------------------------------

    @staticmethod
    def target_for(row: Any, loop: int | None = None, target: str | None = None) -> str:
        """The symbol a read is checked against: an explicit ``target``; else for
        ``loop`` t < depth the t-th intermediate symbol ``row.path[t]``; else (no loop,
        or t == depth) ``row.answer``. A loop outside 1..depth needs an explicit target."""
        if target is not None:
            return str(target)
        if loop is None or loop == row.depth:
            return row.answer
        if not 1 <= loop <= row.depth:
            raise ValueError(f"row {row.row_id}: loop {loop} is outside 1..{row.depth}; pass target= explicitly")
        if len(row.path) != row.depth + 1:
            raise ValueError(f"row {row.row_id}: path has {len(row.path)} symbols, expected depth+1 = {row.depth + 1}")
        return row.path[loop]

    # -- scores ---------------------------------------------------------------------

    def restrict_scores(self, scores: Any, row: Any, form: str = "auto") -> dict[str, float]:
        """The row's symbols' scores, in the reader's symbol order.

        ``scores`` may be:
        * a mapping symbol -> score (must contain every row symbol; other keys ignored);
        * per-symbol scores, length ``len(reader.symbols)``, in the reader's order;
        * full-vocabulary logits (needs a tokenizer): any length greater than the
          largest symbol token id (model heads are often padded past ``len(tokenizer)``),
          indexed at :attr:`symbol_token_ids`.
        ``form="auto"`` picks by type/length (length ``len(symbols)`` means per-symbol);
        ``form="symbols"`` or ``"vocab"`` forces one.
        """
        syms = self.row_symbols(row)
        if isinstance(scores, Mapping):
            missing = [s for s in syms if s not in scores]
            if missing:
                raise ValueError(f"row {getattr(row, 'row_id', '?')}: scores lack symbols {missing}")
            return {s: float(scores[s]) for s in syms}
        array = _to_numpy_1d(scores)
        if form == "auto":
            form = "symbols" if array.shape[0] == len(self._symbols) else "vocab"
        if form == "symbols":
            if array.shape[0] != len(self._symbols):
                raise ValueError(f"per-symbol scores must have length {len(self._symbols)} (got {array.shape[0]})")
            return {s: float(array[self._index[s]]) for s in syms}
        if form == "vocab":
            if self._token_ids is None:
                raise ValueError(
                    f"scores of length {array.shape[0]} are neither per-symbol (length "
                    f"{len(self._symbols)}) nor usable as full-vocabulary logits (the reader has no tokenizer)"
                )
            if array.shape[0] <= max(self._token_ids):
                raise ValueError(
                    f"full-vocabulary logits of length {array.shape[0]} do not cover the symbol "
                    f"token ids (largest {max(self._token_ids)})"
                )
            ids = self.symbol_token_ids
            return {s: float(array[ids[s]]) for s in syms}
        raise ValueError(f"form must be 'auto', 'symbols' or 'vocab' (got {form!r})")

    def decode_scores(
        self,
        scores: Any,
        row: Any,
        *,
        loop: int | None = None,
        target: str | None = None,
        form: str = "auto",
    ) -> ReadResult:
        """Decode one loop's scores for one row.

        Scores are restricted to the row's symbols (:meth:`restrict_scores`; a higher
        score on any other symbol or token is ignored); the prediction is the argmax,
        ties broken in favour of the first symbol in the reader's symbol order. NaN
        scores never win (a row whose scores are all NaN reads as None, incorrect).
        ``margin`` = top score minus runner-up score (None for a one-symbol row).
        Correctness is checked against :meth:`target_for` (``row.answer`` by default,
        ``row.path[loop]`` for an intermediate loop, or ``target``).
        """
        restricted = self.restrict_scores(scores, row, form=form)
        expected = self.target_for(row, loop=loop, target=target)
        names = list(restricted)
        values = np.array([restricted[s] for s in names], dtype=np.float64)
        valid = ~np.isnan(values)
        if not valid.any():
            return ReadResult(None, expected, False, None, "argmax", True, loop, restricted)
        masked = np.where(valid, values, -np.inf)
        best = int(np.argmax(masked))  # numpy returns the first maximum: the tie rule
        margin: float | None = None
        if len(names) > 1:
            rest = masked.copy()
            rest[best] = -np.inf
            margin = float(masked[best] - rest.max())
            if math.isnan(margin):  # -inf minus -inf
                margin = 0.0
        prediction = names[best]
        return ReadResult(prediction, expected, prediction == expected, margin, "argmax", True, loop, restricted)

    def decode_batch(
        self,
        scores: Any,
        rows: Sequence[Any],
        *,
        loop: int | None = None,
        targets: Sequence[str | None] | None = None,
        form: str = "auto",
    ) -> list[ReadResult]:
        """:meth:`decode_scores` for a batch: ``scores`` has one row per row (a 2-D array,
        a list of per-row scores, or a list of dicts)."""
        if hasattr(scores, "detach"):
            scores = _to_numpy_2d(scores)
        if len(scores) != len(rows):
            raise ValueError(f"{len(scores)} score rows for {len(rows)} rows")
        targets = list(targets) if targets is not None else [None] * len(rows)
        return [self.decode_scores(s, r, loop=loop, target=t, form=form) for s, r, t in zip(scores, rows, targets)]

    # -- text -----------------------------------------------------------------------

    def read_text(self, text: str, row: Any, *, loop: int | None = None, target: str | None = None) -> ReadResult:
        """Read a dense arm's generated text for a row (first-completed-answer rule)."""
        detail = read_generated_text_detail(text, self.row_symbols(row))
        expected = self.target_for(row, loop=loop, target=target)
        return ReadResult(
            detail.symbol,
            expected,
            detail.symbol is not None and detail.symbol == expected,
            None,
            detail.rule,
            detail.complete,
            loop,
        )

    def is_complete(self, text: str, row: Any) -> bool:
        """Stop rule for generation: True once ``text`` holds a complete answer."""
        return is_complete_answer(text, self.row_symbols(row))

    def __repr__(self) -> str:
        return (
            f"Reader(symbols={list(self._symbols)!r}, tokenizer={type(self.tokenizer).__name__ if self.tokenizer is not None else None}, "
            f"chat_template={self.chat_template}, answer_suffix={self.answer_suffix!r})"
        )
