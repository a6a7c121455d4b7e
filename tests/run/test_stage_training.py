"""A checkpoint's training record: what the steps of its span cost (design M's FLOPs rule, per step)."""

from __future__ import annotations

import pytest

from ledger.run.stage_training import training_record


def test_a_span_records_its_steps_and_their_flops():
    records = {
        step: {"loops": 1 + step % 3, "grad_loops": 1, "mean": 2.0, "tokens": 10 + step, "flops": 100.0 * step}
        for step in range(6)
    }
    first, second = training_record(records, range(3)), training_record(records, range(3, 6))
    assert first["recurrences"] == [1, 2, 3] and second["recurrences"] == [1, 2, 3]
    assert first["step_tokens"] == [10, 11, 12] and first["tokens"] == 33
    assert (first["flops"], second["flops"]) == (300.0, 1200.0)
    assert first["mean_recurrence"] == pytest.approx(2.0) and first["nominal_mean_recurrence"] == 2.0
    assert training_record(records, range(6, 9)) == {}  # a stage that kept no step record writes none
