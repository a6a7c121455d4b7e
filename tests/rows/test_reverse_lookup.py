"""The reverse operation ("which symbol maps to X", d times): one answer per row, the prompt re-rendered from the
row, and the two variants (the explicit inverse table shown, or the forward table alone)."""

from __future__ import annotations

import pytest

from ledger.rows.tasks.rule_chasing import check_rule_chasing_row, generate_rule_chasing


@pytest.mark.parametrize("operation", ["reverse_inverse_table", "reverse_forward_table"])
def test_reverse_rows_have_one_answer_and_re_render(operation: str) -> None:
    rows = generate_rule_chasing(
        surface="symbolic",
        symbols="N16",
        depth_range=(1, 8),
        rows_per_depth=6,
        seed=3,
        split="rev",
        operation=operation,
    )
    assert len(rows) == 48
    for row in rows:
        check_rule_chasing_row(row)
        inverse = row.table
        forward = {value: key for key, value in inverse.items()}
        assert sorted(forward) == sorted(row.symbols) and sorted(forward.values()) == sorted(row.symbols)  # f permutes
        # every hop is the one symbol f maps onto the current one
        for t in range(row.depth):
            assert [key for key, value in forward.items() if value == row.path[t]] == [row.path[t + 1]]
        assert row.answer == row.path[-1] and len(set(row.path)) == row.depth + 1
        shows_inverse = "Inverse table:\n" in row.prompt
        assert shows_inverse == (operation == "reverse_inverse_table")
        assert f"Start value: {row.start}\n" in row.prompt and "the value that f maps to" in row.prompt
        lines = row.prompt.split("Function table:\n")[1].split("\n\n")[0].split("Inverse table:\n")[0]
        assert {line for line in lines.splitlines()} == {f"{k} -> {v}" for k, v in forward.items()}


def test_a_tampered_reverse_prompt_is_refused_and_forward_rows_are_unchanged() -> None:
    (row,) = generate_rule_chasing(
        surface="symbolic",
        symbols="N16",
        depth_range=(3, 3),
        rows_per_depth=1,
        seed=3,
        split="rev",
        operation="reverse_forward_table",
    )
    bad = row.model_copy(update={"prompt": row.prompt.replace("exactly 3 times", "exactly 2 times")})
    with pytest.raises(ValueError, match="does not re-render"):
        check_rule_chasing_row(bad)
    forward = generate_rule_chasing(surface="symbolic", depth_range=(3, 3), rows_per_depth=1, seed=3, split="rev")
    assert forward == generate_rule_chasing(
        surface="symbolic", depth_range=(3, 3), rows_per_depth=1, seed=3, split="rev", operation="forward"
    )
    assert "operation" not in forward[0].meta
    with pytest.raises(ValueError, match="symbolic surface only"):
        generate_rule_chasing(
            surface="relay",
            depth_range=(1, 1),
            rows_per_depth=1,
            seed=3,
            split="rev",
            operation="reverse_inverse_table",
        )
