"""The dense arm kind: the base itself fine-tuned (SFT, or next-token text), read once per row.

A one-pass model: every answer to ``ArmSpec``'s questions about loops is its default (a chain read once, at
loop 0; anything else at loop 1). Its runtime is ``arms.runtime:DenseRuntime``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from ledger.protocol.arms import ARM_KINDS, ArmKind, ArmSpec, ObjectiveKind
from ledger.protocol.common import located


class DenseArm(ArmSpec):
    kind: Literal["dense"]

    def design(self) -> str:
        return "dense " + ("/".join(sorted({stage.objective for stage in self.stages})) or "base")

    def trains(self, objective: ObjectiveKind) -> bool:
        return "one_pass" in objective.models

    @model_validator(mode="after")
    def _read_once(self) -> Any:
        if self.evaluation.loops != "forced":
            raise located("dense arms are evaluated once per row: loops must be 'forced'", ["evaluation", "loops"])
        return self


ARM_KINDS.add(
    ArmKind(
        "dense",
        DenseArm,
        "arms.runtime:DenseRuntime",
        "a dense model fine-tuned by SFT, read once per row",
        groups=("matrices", "vectors", "embeddings"),  # embeddings: its own group when a stage uses Muon or names it
        evaluation_options=("max_new_tokens",),
        counter="arms.params:dense_params",
    )
)
