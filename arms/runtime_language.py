"""An arm's next-token stages and its test-recurrence sweeps (design M), for recurrent and dense arms alike.

Training: a ``next_token`` stage turns its rows into documents (``arms.train.language``), draws the
step's recurrence (``arms.train.recurrence.stage_recurrence``: curriculum, sampler seeded by the step) and
records what the step cost: iterations, iterations with gradient, tokens, and FLOPs by the seed's rule
(``arms.model.flops``). Evaluation: text rows are measured as nats per token at every test recurrence;
question rows ("answer" reading) are read by the shared reader against their answer at every test
recurrence. A dense arm (the non-recurrent control) is one pass: it is read at loop 1.
"""

from __future__ import annotations

from typing import Any

import torch

from arms.readings import Reading, _finite
from arms.runtime_common import ArmView, derived_seed
from arms.train.language import document_ids, encode_documents, encode_ids, next_token_loss, sweep_nats
from arms.train.recurrence import stage_recurrence


def text_loss(runtime: ArmView, rows, stage: Any, step: int) -> torch.Tensor:
    """The loss of one next-token step, with the step's record (``runtime.step_records[step]``)."""
    documents = [document_ids(row, runtime.reader, runtime.tokenizer) for row in rows]
    ids, mask = encode_ids(documents, runtime.tokenizer, stage.max_tokens, "cpu")  # counted on the host
    loops, grad_loops, mean = 1, 1, 1.0
    generator = None
    if stage.recurrence is not None:
        draw = stage_recurrence(
            stage.recurrence, step, stage.steps, derived_seed(runtime.arm.id, stage.id, "recurrence")
        )
        loops, grad_loops, mean = draw.loops, draw.grad_loops, draw.mean
        # a fresh s0 per step (the seed samples it every forward), the same on every rank and resume
        seed = derived_seed(runtime.arm.id, stage.id, step, "s0")
        generator = torch.Generator(device=runtime.device).manual_seed(seed)
    tokens = int((mask[:, 1:] * mask[:, :-1]).sum())  # the positions the loss reads
    runtime.record_step(step, tokens, loops=loops, grad_loops=grad_loops, mean=mean)
    ids, mask = ids.to(runtime.device), mask.to(runtime.device)
    model = runtime.sequence_model()
    return next_token_loss(model, ids, mask, loops=loops, no_grad_loops=loops - grad_loops, generator=generator)


def read_losses(runtime: ArmView, rows, evaluation: Any) -> list[Reading]:
    """Text rows: nats and tokens of each document at every test recurrence (readings without an answer)."""
    loops = runtime.arm.test_recurrences()
    readings = []
    for start in range(0, len(rows), evaluation.batch_size):
        chunk = rows[start : start + evaluation.batch_size]
        ids, mask = encode_documents(
            [row.prompt for row in chunk], runtime.tokenizer, evaluation.max_tokens, runtime.device
        )
        swept = sweep_nats(runtime.sequence_model(), ids, mask, loops)
        for loop, (nats, tokens) in sorted(swept.items()):
            nats_of, tokens_of = nats.tolist(), tokens.tolist()  # one copy per loop, not one per row
            for b, row in enumerate(chunk):
                detail = {"nats": float(nats_of[b]), "tokens": int(tokens_of[b])}
                readings.append(Reading(row.row_id, loop, None, None, detail=detail))
    return readings


def read_answers(runtime: ArmView, rows, evaluation: Any) -> list[Reading]:
    """Question rows read against their answer at every test recurrence, by the shared reader."""
    loops = runtime.arm.test_recurrences()
    readings = []
    for start in range(0, len(rows), evaluation.batch_size):
        chunk = rows[start : start + evaluation.batch_size]
        with torch.inference_mode():
            logits = runtime.readouts(chunk, max(loops))  # [loops, batch, symbols]
            scores_by_cell = logits.float().cpu().numpy()  # one copy per batch
        for b, row in enumerate(chunk):
            for loop in loops:
                scores = scores_by_cell[loop - 1, b]
                read = runtime.reader.decode_scores(scores, row, target=row.answer)
                readings.append(Reading(row.row_id, loop, read.prediction, read.correct, _finite(read.margin)))
    return readings


def reinitialise(model, seed: int) -> None:
    """Every module of a transformers model re-drawn by the model's own init (``_init_weights``), seeded."""
    torch.manual_seed(seed)
    with torch.no_grad():
        model.apply(model._init_weights)
