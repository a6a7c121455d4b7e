"""A run's reading of multiple-choice rows (generators whose ``reading`` is "choice"), at each loop asked for:

- ``scoring: label`` (default): the answer letter's score after the question and its lettered options, through
  the shared reader (restricted to the row's letters); with ``permutations: 4`` the paper's cyclic-label
  reading (``ledger.reader.choices``): the options rotated over the letters, each option's log-probability
  averaged over the four showings;
- ``scoring: loglik``: each option's text scored as a continuation of the question (``arms.model.scoring``, the
  lm-eval adapter's own computation), the most likely option read as the prediction.

A dense arm (or a base) is read once, at loop 1, whatever loops the manifest names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from arms.model.recurrent import RecurrentLM
from arms.model.scoring import ContinuationScorer
from arms.runtime_common import on_device, one_pass_logits, symbol_id_tensor
from ledger.reader.choices import loglik_pairs, mean_over_rotations, rotated


class BaseView:
    """A base model seen as an arm read once: what ``read_choices`` needs of a runtime."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, reader: Any):
        self.model, self.tokenizer, self.reader = model, tokenizer, reader
        self.device = next(model.parameters()).device
        self.symbol_ids = symbol_id_tensor(reader, self.device)

    def loop1_logits(self, rows: Sequence[Any]) -> torch.Tensor:
        return one_pass_logits(
            self.model, on_device(self.reader.encode(rows, return_tensors="pt"), self.device), self.symbol_ids
        )


def read_choices(
    runtime: Any,
    rows: Sequence[Any],
    batch_size: int = 16,
    *,
    scoring: str = "label",
    permutations: int = 1,
    loops: Sequence[int] = (1,),
    progress: Callable[[int], None] | None = None,
) -> list[Any]:
    from arms.readings import Reading, _finite

    recurrent = isinstance(runtime.model, RecurrentLM)
    wanted = list(dict.fromkeys(loops)) if recurrent else [1]
    scores: dict[int, list[dict[str, float]]] = {loop: [] for loop in wanted}
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        if scoring == "loglik":  # every loop of the chunk at once (one forward to the deepest, where it can)
            for loop, by_row in _loglik_scores(runtime, chunk, wanted, batch_size).items():
                scores[loop].extend(by_row)
        else:
            for loop in wanted:
                scores[loop].extend(_label_scores(runtime, chunk, loop, permutations))
        if progress is not None:
            progress(len(chunk) * len(wanted))
    readings = []
    for loop in wanted:  # loop by loop, row by row: the order the readings were always given in
        for row, by_letter in zip(rows, scores[loop]):
            read = runtime.reader.decode_scores(by_letter, row)
            readings.append(Reading(row.row_id, loop, read.prediction, read.correct, _finite(read.margin)))
    return readings


def _letter_scores(runtime: Any, rows: Sequence[Any], loop: int) -> list[dict[str, float]]:
    """Each row's letters' scores at ``loop`` (the readout restricted to the reader's symbols)."""
    with torch.inference_mode():
        logits = runtime.loop1_logits(rows) if loop == 1 else runtime.readouts(rows, loop, read_at=[loop])[0]
    array = logits.float().cpu().numpy()
    return [runtime.reader.restrict_scores(values, row, form="symbols") for values, row in zip(array, rows)]


def _label_scores(runtime: Any, rows: Sequence[Any], loop: int, permutations: int) -> list[dict[str, float]]:
    if permutations == 1:
        return _letter_scores(runtime, rows, loop)
    # every cyclic rotation of each row's options (4 for the paper's 4-option rows; n for a row of n options,
    # so that each letter shows each option once and a preference for a letter cancels)
    shown: list[list[dict[str, float]]] = [[] for _ in rows]
    for shift in range(max(len(row.choices) for row in rows)):
        at = [i for i, row in enumerate(rows) if len(row.choices) > shift]
        for i, scores in zip(at, _letter_scores(runtime, [rotated(rows[i], shift) for i in at], loop)):
            shown[i].append(scores)
    return [mean_over_rotations(row, list(range(len(shown[i]))), shown[i]) for i, row in enumerate(rows)]


def _loglik_scores(
    runtime: Any, rows: Sequence[Any], loops: Sequence[int], batch_size: int
) -> dict[int, list[dict[str, float]]]:
    """Per loop, each row's options' log-likelihoods as continuations of its question."""
    scorer = ContinuationScorer(runtime.model, runtime.tokenizer, loops=max(loops), batch_size=batch_size)
    pairs = [scorer.pair(context, continuation) for row in rows for context, continuation in loglik_pairs(row)]
    with torch.inference_mode():
        totals_by_loop = scorer.score_at(pairs, loops)
    by_loop: dict[int, list[dict[str, float]]] = {}
    for loop, results in totals_by_loop.items():
        totals = [total for total, _ in results]
        scores, at = [], 0
        for row in rows:
            letters = list(row.choices)
            scores.append(dict(zip(letters, totals[at : at + len(letters)])))
            at += len(letters)
        by_loop[loop] = scores
    return by_loop
