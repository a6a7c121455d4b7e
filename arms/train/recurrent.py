"""The recurrent training step (design S forced depth, or any RecurrentLM), batch-source agnostic.

The runner decides where rows come from; this module turns rows into tensors through
the SHARED READER, runs one forced-depth forward, computes the loss on the reader's
symbol vocabulary and takes one optimiser step. Evaluation decodes every loop's
readout through the same reader.

Conventions
-----------
- **Class indices are positions in ``reader.symbols``.** ``RecurrentBatch.path_targets``,
  ``answers`` and the restricted logits all use the reader's symbol order: class ``k``
  is ``reader.symbols[k]`` whose vocabulary id is ``batch.symbol_token_ids[k]``
  (``reader.symbol_token_ids[reader.symbols[k]]``). The loss is the cross-entropy over
  the reader's WHOLE symbol vocabulary (``readouts[..., symbol_token_ids]``), not the full
  LM vocabulary and not only the row's own symbols.
- ``path_targets[b, t - 1]`` is the target of loop ``t`` (``row.path[t]``) for
  ``t = 1..depth``, ``IGNORE_INDEX`` beyond (see :mod:`arms.train.objectives`).
- **Forced recurrence**: a batch runs ``loops = max(depths)`` loops (or more if asked);
  the outcome loss reads each row at its own depth.

Public API
----------
- :class:`RecurrentBatch`, :func:`make_recurrent_batch` (rows -> tensors via
  ``reader.encode(rows, return_tensors="pt")``);
- :func:`symbol_readouts` (forward -> ``[loops, B, n_symbols]`` logits),
  :func:`objective_loss`, :func:`recurrent_loss` (the step's loss, factored so that a
  gradient audit can call exactly the loss the step optimises);
- the step itself is :func:`arms.train.step.take_step` (one step for every path);
- :func:`per_loop_accuracy` (training metric: argmax over the symbol vocabulary on the
  supervised cells);
- :func:`evaluate_loops` (every loop of every row decoded by ``reader.decode_scores``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from arms.train.objectives import (
    IGNORE_INDEX,
    anneal_loss,
    encode_path_targets,
    intermediate_loss,
    outcome_loss,
)
from arms.train.recurrence import ForcedSchedule
from ledger.protocol.arms import OBJECTIVES as OBJECTIVE_KINDS

__all__ = [
    "OBJECTIVES",
    "LossOutput",
    "RecurrentBatch",
    "accuracy_by_loop",
    "evaluate_loops",
    "make_recurrent_batch",
    "objective_loss",
    "per_loop_accuracy",
    "recurrent_loss",
    "symbol_readouts",
]

Objective = Literal["intermediate", "outcome", "anneal"]
OBJECTIVES: tuple[str, ...] = tuple(
    kind.name
    for kind in OBJECTIVE_KINDS
    if "looped" in kind.models and not kind.reads_text and not kind.trains_halting_head
)


# ----------------------------------------------------------------------------- batch


@dataclass(frozen=True)
class RecurrentBatch:
    """One forced-depth batch.

    ``input_ids``/``attention_mask`` [B, S]: the reader's rendering, left-padded (the
    last position of every row predicts the answer token). ``path_targets`` [B, T]:
    indices into ``reader.symbols`` (column ``t - 1`` = target of loop ``t``,
    ``IGNORE_INDEX`` beyond the row's depth). ``depths`` [B], ``answers`` [B] (index into
    ``reader.symbols``). ``symbol_token_ids`` [n_symbols]: vocabulary id of each reader
    symbol, in reader order (the ``restrict_to`` of the losses). ``row_ids``: for logs.
    """

    input_ids: Tensor
    attention_mask: Tensor
    path_targets: Tensor
    depths: Tensor
    answers: Tensor
    symbol_token_ids: Tensor
    row_ids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def max_depth(self) -> int:
        return ForcedSchedule().loops(self.depths)

    def to(self, device: torch.device | str) -> RecurrentBatch:
        """The model's inputs on ``device``; the labels stay on the host, where the forward decides its live
        rows and the losses their cells without waiting for the device (``arms.train.objectives``)."""
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            symbol_token_ids=self.symbol_token_ids.to(device),
        )


def _symbol_ids(reader: Any) -> Tensor:
    ids = reader.symbol_token_ids  # raises without a tokenizer
    return torch.tensor([ids[s] for s in reader.symbols], dtype=torch.long)


def _check_row(row: Any, reader_index: dict[str, int]) -> None:
    rid = getattr(row, "row_id", "?")
    depth = int(row.depth)
    path = list(row.path)
    if depth < 1:
        raise ValueError(f"row {rid}: depth must be >= 1 for recurrent training, got {depth}")
    if len(path) != depth + 1:
        raise ValueError(f"row {rid}: path has {len(path)} symbols, expected depth + 1 = {depth + 1}")
    if path[-1] != row.answer:
        raise ValueError(f"row {rid}: path ends in {path[-1]!r} but the answer is {row.answer!r}")
    unknown = sorted({s for s in path if s not in reader_index})
    if unknown:
        raise ValueError(f"row {rid}: path symbols {unknown} are not in the reader's vocabulary")


def make_recurrent_batch(
    rows: Sequence[Any],
    reader: Any,
    *,
    n_loops: int | None = None,
    device: torch.device | str | None = None,
) -> RecurrentBatch:
    """Tensors for ``rows`` through the shared reader.

    Inputs are ``reader.encode(rows, return_tensors="pt")`` (the reader's render and
    left padding); targets are ``row.path[1:]`` as indices into ``reader.symbols``
    (:func:`arms.train.objectives.encode_path_targets`), ``n_loops`` columns (default: the
    largest depth). Every row needs ``depth >= 1``, ``len(path) == depth + 1``,
    ``path[-1] == answer`` and path symbols in the reader's vocabulary (else
    ``ValueError``). The reader must have a tokenizer.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("make_recurrent_batch needs at least one row")
    index = {s: i for i, s in enumerate(reader.symbols)}
    for row in rows:
        _check_row(row, index)
    symbol_ids = _symbol_ids(reader)
    enc = reader.encode(rows, return_tensors="pt")
    targets, answers, depths = encode_path_targets(
        [list(r.path) for r in rows], index, n_loops=n_loops, pad=IGNORE_INDEX
    )
    batch = RecurrentBatch(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        path_targets=targets,
        depths=depths,
        answers=answers,
        symbol_token_ids=symbol_ids,
        row_ids=tuple(str(getattr(r, "row_id", i)) for i, r in enumerate(rows)),
    )
    return batch.to(device) if device is not None else batch


# ----------------------------------------------------------------------------- loss


@dataclass
class LossOutput:
    """``loss`` (scalar, in the graph) and the restricted per-loop logits
    ``[loops, B, n_symbols]`` it was computed from."""

    loss: Tensor
    logits: Tensor
    loops: int


def _resolve_loops(batch: RecurrentBatch, loops: int | None) -> int:
    need = batch.max_depth
    if loops is None:
        return need
    if not isinstance(loops, int) or loops < need:
        raise ValueError(f"loops={loops!r} but the batch has depth {need} (forced depth needs loops >= max depth)")
    return loops


def symbol_readouts(
    model: nn.Module,
    batch: RecurrentBatch,
    *,
    loops: int | None = None,
    no_grad_loops: int = 0,
    stop_at_depth: bool = False,
) -> Tensor:
    """Run ``model`` (a :class:`arms.model.recurrent.RecurrentLM`) for ``loops`` (default
    ``max(depths)``) and return the readouts restricted to the reader's symbols,
    ``[loops, B, n_symbols]`` (class ``k`` = ``reader.symbols[k]``).

    ``stop_at_depth=True`` stops each row at its own depth (its cells past the depth
    are zeros): what every training objective reads, at the cost of sum(depth) block
    passes instead of B x max(depth)."""
    loops = _resolve_loops(batch, loops)
    device = batch.input_ids.device
    kwargs = {"depths": batch.depths.tolist()} if stop_at_depth else {}  # host labels: no wait
    readouts = model(batch.input_ids, batch.attention_mask, loops=loops, no_grad_loops=no_grad_loops, **kwargs)
    return readouts.index_select(-1, batch.symbol_token_ids.to(device))


def objective_loss(
    symbol_logits: Tensor,
    batch: RecurrentBatch,
    objective: Objective = "intermediate",
    anneal_weight: float | None = None,
) -> Tensor:
    """The loss of ``objective`` on already-restricted logits ``[loops, B, n_symbols]``.

    ``intermediate``: CE at every loop t <= depth against ``path[t]`` (mean over active
    cells); ``outcome``: CE at loop ``depth`` against the answer (mean over rows);
    ``anneal``: ``w * intermediate + (1 - w) * outcome`` with ``w = anneal_weight``
    (required, in [0, 1]).
    """
    kind = OBJECTIVE_KINDS[objective] if objective in OBJECTIVE_KINDS else None
    if kind is None or kind.name not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if "anneal_fraction" in kind.reads:
        if anneal_weight is None:
            raise ValueError(f"objective={objective!r} needs anneal_weight (see arms.train.objectives.anneal_weight)")
    elif anneal_weight is not None:
        raise ValueError(f"anneal_weight is only meaningful with objective='anneal' (got objective={objective!r})")
    return OBJECTIVE_KINDS.implementation(objective)(symbol_logits, batch, anneal_weight)


# The recurrent objectives' entry points (``ledger.protocol.arms.OBJECTIVES``): restricted logits -> loss.


def intermediate_objective(symbol_logits: Tensor, batch: RecurrentBatch, weight: float | None = None) -> Tensor:
    return intermediate_loss(symbol_logits, batch.path_targets, batch.depths)


def outcome_objective(symbol_logits: Tensor, batch: RecurrentBatch, weight: float | None = None) -> Tensor:
    return outcome_loss(symbol_logits, batch.answers, batch.depths)


def anneal_objective(symbol_logits: Tensor, batch: RecurrentBatch, weight: float | None = None) -> Tensor:
    assert weight is not None
    return anneal_loss(symbol_logits, batch.path_targets, batch.answers, batch.depths, float(weight))


def recurrent_loss(
    model: nn.Module,
    batch: RecurrentBatch,
    *,
    objective: Objective = "intermediate",
    anneal_weight: float | None = None,
    loops: int | None = None,
    no_grad_loops: int = 0,
) -> LossOutput:
    """The loss a recurrent arm's training step optimises (forward + objective; ``arms.train.step.take_step``).

    A gradient audit calls ``lambda: recurrent_loss(model, batch).loss``. Cells in the
    first ``no_grad_loops`` loops still count in the value but carry no gradient.
    """
    loops = _resolve_loops(batch, loops)
    # every objective masks the cells past a row's depth, so rows stop there
    logits = symbol_readouts(model, batch, loops=loops, no_grad_loops=no_grad_loops, stop_at_depth=True)
    return LossOutput(objective_loss(logits, batch, objective, anneal_weight), logits, loops)


# ----------------------------------------------------------------------------- metrics


@torch.no_grad()
def per_loop_accuracy(symbol_logits: Tensor, batch: RecurrentBatch) -> tuple[list[float | None], list[int]]:
    """Training metric: per loop t, the fraction of supervised cells (rows with
    depth >= t) whose argmax over the reader's symbol vocabulary is ``path[t]``
    (``None`` for a loop with no supervised cell), and the cell counts.

    (Ties go to the first symbol in reader order, as in the reader; but this argmax is
    over all reader symbols, not only the row's: the measured numbers come from
    :func:`evaluate_loops`.)
    """
    loops = symbol_logits.shape[0]
    pred = symbol_logits.argmax(-1)  # [L, B]
    depths = batch.depths.to(pred.device)
    targets = batch.path_targets.to(pred.device)
    accs: list[float | None] = []
    counts: list[int] = []
    for t in range(1, loops + 1):
        active = depths >= t
        n = int(active.sum())
        counts.append(n)
        if n == 0 or t > targets.shape[1]:
            accs.append(None)
            continue
        accs.append(float((pred[t - 1][active] == targets[active, t - 1]).float().mean()))
    return accs, counts


# ----------------------------------------------------------------------------- evaluation


def _beyond_depth_target(row: Any, t: int) -> str:
    """Target for a loop past the row's depth: the table continued from the answer
    (``f^t(start)``) when the row's table defines it, else ``row.answer``."""
    table = getattr(row, "table", None)
    sym = row.answer
    if table:
        for _ in range(t - int(row.depth)):
            if sym not in table:
                return row.answer
            sym = table[sym]
    return sym


@torch.no_grad()
def evaluate_loops(
    model: nn.Module,
    rows: Sequence[Any],
    reader: Any,
    loops: int | None = None,
    batch_size: int = 32,
    *,
    device: torch.device | str | None = None,
) -> list[list[Any]]:
    """Every loop of every row, decoded by the shared reader.

    Returns, in row order, a list of ``ReadResult`` per loop (``result[i][t - 1]`` is loop
    ``t`` of ``rows[i]``), each from ``reader.decode_scores(scores, row, loop=t)``: scores
    restricted to the row's symbols, argmax with the reader's tie rule, checked against
    ``row.path[t]`` (the answer at ``t = depth``). ``loops=None`` is forced depth: each
    row gets loops ``1..row.depth`` (a batch runs its largest depth). With an integer
    ``loops`` every row gets ``1..loops``; a loop past a row's depth is checked against
    the table continued from the answer (else the answer itself).

    The model is put in eval mode for the call and restored after.
    """
    rows = list(rows)
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if loops is not None and (not isinstance(loops, int) or loops < 1):
        raise ValueError(f"loops must be None or an integer >= 1, got {loops!r}")
    symbol_ids = _symbol_ids(reader)
    if device is None:
        try:
            device = next(model.parameters()).device
        except StopIteration:
            device = torch.device("cpu")
    was_training = model.training
    model.eval()
    results: list[list[Any]] = []
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            enc = reader.encode(chunk, return_tensors="pt")
            n = loops if loops is not None else max(int(r.depth) for r in chunk)
            if n < 1:
                raise ValueError("a row of depth 0 needs an explicit loops >= 1")
            readouts = model(enc["input_ids"].to(device), enc["attention_mask"].to(device), loops=n)
            scores = readouts.index_select(-1, symbol_ids.to(readouts.device)).float().cpu()  # [n, B, S]
            for b, row in enumerate(chunk):
                upto = n if loops is not None else int(row.depth)
                per_row = []
                for t in range(1, upto + 1):
                    target = _beyond_depth_target(row, t) if t > int(row.depth) else None
                    # per-symbol scores in reader order == form="vocab" on the full logits
                    per_row.append(reader.decode_scores(scores[t - 1, b], row, loop=t, target=target, form="symbols"))
                results.append(per_row)
    finally:
        model.train(was_training)
    return results


def accuracy_by_loop(results: Iterable[list[Any]]) -> dict[int, float]:
    """Mean ``correct`` per loop over :func:`evaluate_loops` results."""
    sums: dict[int, list[int]] = {}
    for per_row in results:
        for t, r in enumerate(per_row, start=1):
            s = sums.setdefault(t, [0, 0])
            s[0] += int(r.correct)
            s[1] += 1
    return {t: c / n for t, (c, n) in sorted(sums.items())}
