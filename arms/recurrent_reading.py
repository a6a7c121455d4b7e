"""How a recurrent arm is read (``RecurrentReading``, held by ``arms.runtime.RecurrentRuntime`` as ``reading``): every row at every loop 1..depth
(or at the evaluation's loops) in one forward per batch, each loop decoded by the shared reader; cells above the
diagonal labelled for persistence; the exit rules' signals and marks where the evaluation declares them, with a
halting head's lambda where the arm has one; a batch-1 latency sample per depth."""

from __future__ import annotations

import statistics
import time
from typing import Any, cast

import torch

from arms.device import synchronize
from arms.readings import Reading, Tick, _finite, _tick
from arms.runtime_common import RecurrentView
from ledger.reader.persistence import cell_behavior


class RecurrentReading:
    """Reads rows through its runtime's model, reader and device."""

    def __init__(self, runtime: RecurrentView):
        self.runtime = runtime

    def evaluate(self, rows, evaluation, progress: Tick = None) -> list[Reading]:
        """Forced depth: each row read at every loop 1..depth in one forward (rows batched by depth), on the
        merged copy where the adapter arm's fits."""
        with self.runtime.inference_copy():
            return self._evaluate(rows, evaluation, progress)

    def _evaluate(self, rows, evaluation, progress: Tick) -> list[Reading]:
        readings: list[Reading] = []
        by_depth: dict[int, list] = {}
        for row in rows:
            by_depth.setdefault(row.depth, []).append(row)
        for depth, group in sorted(by_depth.items()):
            loops = depth if evaluation.loops == "forced" else max(evaluation.loops)
            wanted = range(1, depth + 1) if evaluation.loops == "forced" else evaluation.loops
            for start in range(0, len(group), evaluation.batch_size):
                chunk = group[start : start + evaluation.batch_size]
                with torch.inference_mode():
                    logits, halts = self._loop_readouts(chunk, loops)
                    # one copy to the host per batch, not one per (row, loop) cell
                    scores_by_cell = logits.float().cpu().numpy()
                    halts_by_row = None if halts is None else halts.t().tolist()
                for b, row in enumerate(chunk):
                    reads = {}
                    for loop in wanted:
                        target = row.path[loop] if loop <= row.depth and len(row.path) > loop else None
                        scores = scores_by_cell[loop - 1, b]
                        reads[loop] = (self.runtime.reader.decode_scores(scores, row, target=target), target)
                    exits = self._exit_details(reads, evaluation, None if halts_by_row is None else halts_by_row[b])
                    for loop, (read, target) in reads.items():
                        detail = dict(exits.get(loop, {}))
                        behavior = cell_behavior(row, loop, read.prediction)  # above the diagonal: persistence
                        if behavior:
                            detail["behavior"] = behavior
                        correct = read.correct if target is not None else None
                        readings.append(
                            Reading(
                                row.row_id, loop, read.prediction, correct, _finite(read.margin), detail=detail or None
                            )
                        )
                _tick(progress, len(chunk))
            self._time_sample(group, loops, evaluation.latency_sample_per_depth, readings)
        return readings

    def _loop_readouts(self, rows, loops: int):
        """Every loop's symbol readouts, and the halting head's lambda_t [loops, batch] where the arm has one."""
        if getattr(self.runtime.model, "halting_head", None) is None:
            return self.runtime.readouts(rows, loops), None
        from arms.train.halting import frozen_readouts

        input_ids, attention_mask = self.runtime.encode(rows)
        logits, states = frozen_readouts(self.runtime.model, input_ids, attention_mask, loops, self.runtime.symbol_ids)
        return logits, cast(Any, self.runtime.model).halting_head(states)

    @staticmethod
    def _exit_details(reads: dict, evaluation, halts: list[float] | None) -> dict[int, dict]:
        """Loop -> its exit signals and marks, where the evaluation declares exit rules (loops 1..K, checked)."""
        rules = getattr(evaluation, "exit_rules", [])
        if not rules:
            return {}
        from ledger.reader.exit_rules import exit_details

        loops = sorted(reads)
        scores, predictions = [reads[t][0].scores for t in loops], [reads[t][0].prediction for t in loops]
        details = exit_details(scores, predictions, rules, None if halts is None else [halts[t - 1] for t in loops])
        return dict(zip(loops, details))

    def _time_sample(self, group, loops, sample, readings):
        """Synchronized batch-1 model-call time (median of 3) for the first `sample` rows of a depth."""
        final = {(r.row_id, r.loop): r for r in readings}
        for row in group[:sample]:
            times = []
            for _ in range(3):
                synchronize(self.runtime.device)
                started = time.perf_counter()
                with torch.inference_mode():  # the time to answer at the row's depth: that loop's readout alone
                    self.runtime.readouts([row], loops, read_at=(loops,))
                synchronize(self.runtime.device)
                times.append((time.perf_counter() - started) * 1000.0)
            reading = final.get((row.row_id, row.depth)) or final.get((row.row_id, loops))
            if reading is not None:
                reading.latency_ms = statistics.median(times)
