"""A third arm kind, defined outside the product: a looped model without a bridge.

The base's layers are cut as a recurrent arm's are, but the block's output re-enters the block as it is: no
bridge, no adapter. Its spec answers ``ArmSpec``'s questions; its implementation is the product's own
recurrent runtime, which builds any arm spec through its ``model_options``. Imported as a plugin
(``LEDGER_PLUGINS=looped_kind``), it is registered, checked, counted, dry-run and run like the built-in kinds,
and no product file names it.
"""

from __future__ import annotations

from typing import Any, Literal

from ledger.protocol.arms import ARM_KINDS, ArmKind, ArmSpec, FullBlockBudget, ObjectiveKind, Surgery
from ledger.protocol.common import Problem
from ledger.protocol.gates import GateKind


class LoopedArm(ArmSpec):
    kind: Literal["looped"]
    surgery: Surgery
    budget: FullBlockBudget
    layers_init: Literal["pretrained"] = "pretrained"  # what the recurrent runtime reads of every looped arm

    def design(self) -> str:
        return f"split {list(self.surgery.split or ())}, no bridge (the state re-enters as it is), full block"

    def model_options(self) -> dict[str, Any]:
        return {**self.surgery.model_options(), "bridge": None}

    def layers_needed(self) -> int:
        return self.surgery.layers_needed()

    def part_problems(self, layers: int | None) -> list[Problem]:
        if self.surgery.split is None:
            return [(("surgery",), "a looped arm loops a split: [a, b] of its base's layers")]
        if layers is not None and self.surgery.layers_needed() > layers:
            return [(("surgery",), f"the split needs {self.surgery.layers_needed()} layers, the base has {layers}")]
        return []

    def optimizer_groups(self) -> tuple[str, ...]:
        return ("block",)

    def trains(self, objective: ObjectiveKind) -> bool:
        return "looped" in objective.models and not objective.reads_text and not objective.trains_halting_head

    def loops_read(self, manifest: Any, reading: str) -> tuple[set[int], bool]:
        if reading == "by_loop":  # every loop up to the deepest row: each row's final reading is at its depth
            return set(range(1, manifest.depths[1] + 1)), True
        return {1}, reading == "choice"

    def judged_by(self, gate: GateKind) -> bool:
        return True


ARM_KINDS.add(
    ArmKind(
        "looped",
        LoopedArm,
        "arms.runtime:RecurrentRuntime",
        "the base's middle layers looped, their output re-entering as it is (no bridge)",
        counter="arms.params:recurrent_params",
    )
)
