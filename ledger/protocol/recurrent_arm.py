"""The recurrent arm kind: a retrofitted block of the base's own layers, looped and read at every loop.

Its parts are a surgery, a bridge (``BRIDGES``), a budget (``BUDGETS``) and an optional halting head; every
question the ledger asks of an arm (``ArmSpec``) that depends on them is answered here.
Its runtime is ``arms.runtime:RecurrentRuntime``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ledger.protocol.arms import (
    ARM_KINDS,
    BRIDGES,
    BUDGETS,
    OBJECTIVES,
    AdapterBudget,
    ArmKind,
    ArmSpec,
    Bridge,
    Budget,
    ObjectiveKind,
    Stage,
    Surgery,
)
from ledger.protocol.common import LateOptions, Problem
from ledger.protocol.depth_choice import HaltingHead
from ledger.protocol.gates import GateKind
from ledger.protocol.manifests import GENERATORS
from ledger.protocol.training import PoissonLognormalRecurrence


class RecurrentArm(ArmSpec, LateOptions):
    kind: Literal["recurrent"]
    surgery: Surgery
    bridge: Bridge
    budget: Budget
    layers_init: Literal["pretrained", "random"] = Field(
        default="pretrained",
        description="random: every layer of the base re-initialised by its own init before surgery (the seed's "
        "random-init control); pretrained: the base's weights.",
    )
    halting_head: HaltingHead | None = Field(
        default=None,
        description="A learned halting head (choosing depth), trained by halting_ponder / halting_supervised stages "
        "and read by the `halting` exit rule.",
    )

    _late_options = ("layers_init", "halting_head")

    # -- what it is

    def design(self) -> str:
        where = self.surgery.describe()
        budget = f"adapter r={self.budget.rank}" if isinstance(self.budget, AdapterBudget) else self.budget.kind
        return f"{where}, {self.bridge.describe()}, {budget}"

    def model_options(self) -> dict[str, Any]:
        """The keyword arguments of ``RecurrentLM.build`` (the one protocol-to-model mapping)."""
        return {**self.surgery.model_options(), **self.bridge.model_options()}

    def layers_needed(self) -> int:
        return self.surgery.layers_needed()

    def cuts_base(self) -> bool:
        return True

    def part_problems(self, layers: int | None) -> list[Problem]:
        bridge, budget = BRIDGES[self.bridge.kind], BUDGETS[self.budget.kind]
        problems: list[Problem] = [
            (where, refusal)
            for where, kind in ((("bridge", "kind"), bridge), (("budget", "kind"), budget))
            if (refusal := kind.refusal()) is not None
        ]
        if bridge.design not in budget.designs:
            problems.append(
                (
                    ("budget", "kind"),
                    f"the {budget.name} budget is defined for design-{'/'.join(budget.designs)} bridges only, "
                    f"not {bridge.name!r} (design {bridge.design})",
                )
            )
        if layers is not None and self.surgery.layers_needed() > layers:
            problems.append(
                (
                    ("surgery",),
                    f"surgery needs at least {self.surgery.layers_needed()} decoder layers "
                    f"but base {self.base!r} has {layers}",
                )
            )
        return problems

    def same_tensors_as(self, source: ArmSpec) -> bool:
        if not isinstance(source, RecurrentArm) or source.base != self.base:
            return False
        if (source.surgery, source.bridge, source.budget) != (self.surgery, self.bridge, self.budget):
            return False
        # a child may add a halting head (it starts at its own init), not drop or reshape one
        return source.halting_head is None or source.halting_head == self.halting_head

    def optimizer_groups(self) -> tuple[str, ...]:
        head = ("halting_head",) if self.halting_head is not None else ()
        return BUDGETS[self.budget.kind].groups + BRIDGES[self.bridge.kind].groups + head

    def halting(self) -> HaltingHead | None:
        return self.halting_head

    # -- how it trains

    def trains(self, objective: ObjectiveKind) -> bool:
        return "looped" in objective.models

    def stage_problems(self, protocol: Any, stage: Stage, at: tuple[Any, ...]) -> list[Problem]:
        problems: list[Problem] = []
        objective = OBJECTIVES[stage.objective]
        if not BUDGETS[self.budget.kind].trains_loop1 and stage.manifest is not None:
            manifest: Any = protocol.manifest(stage.manifest)
            if GENERATORS[manifest.generator].reading != "by_loop" or manifest.depths[1] < 2:
                problems.append(
                    (
                        (*at, "manifest"),
                        f"the {self.budget.kind} budget trains nothing at loop 1: its stage "
                        f"needs rows of depth 2 or more (manifest {stage.manifest!r} has none)",
                    )
                )
        if objective.reads_text and not isinstance(stage.recurrence, PoissonLognormalRecurrence):
            problems.append(
                ((*at, "recurrence"), "a recurrent next-token stage needs a recurrence schedule (poisson_lognormal)")
            )
        return problems

    def step_cost(self, protocol: Any, stage: Stage, layers: int) -> float:
        """The paper's bridge (every position re-enters, so no loop reuses the prompt) runs prelude and coda once
        and the block at every loop of the mean forced depth over the whole sequence; a cached answer-only loop
        runs the whole sequence about once. The budget's ``step_factor`` on top (a LoRA's low-rank path)."""
        factor = BUDGETS[self.budget.kind].step_factor
        split = self.surgery.split
        depths = getattr(protocol.manifest(stage.manifest), "depths", None) if stage.manifest else None
        if split is None or self.bridge.model_options().get("reentry") != "all" or not depths:
            return layers * factor
        block = split[1] - split[0]
        return (layers - block + block * (depths[0] + depths[1]) / 2) * factor

    # -- how it is read

    def evaluation_problems(self, protocol: Any, at: tuple[Any, ...]) -> list[Problem]:
        if self.evaluation.loops != "forced":
            return []
        return [
            (
                (*at, "evaluation", "manifests", m),
                f"manifest {manifest_id!r} is read at test recurrences: give evaluation.loops, e.g. [1, 2, 4, 8, 16, 32]",
            )
            for m, manifest_id in enumerate(self.evaluation.manifests)
            if GENERATORS[protocol.manifest(manifest_id).generator].reading in ("answer", "loss")
        ]

    def loops_read(self, manifest: Any, reading: str) -> tuple[set[int], bool]:
        """A choice file's loops (loop 1 its final reading); a sweep at its test recurrences (claims name the loop
        they read); chains at every loop to the deepest row (forced), or at the evaluation's loops."""
        if reading == "choice":
            loops = set(manifest.choice_reading()["loops"])
            return loops, 1 in loops
        if reading in ("answer", "loss"):
            return set(self.test_recurrences()), False
        low, high = manifest.depths
        if self.evaluation.loops == "forced":
            return set(range(1, high + 1)), True
        return set(self.evaluation.loops), set(range(low, high + 1)) <= set(self.evaluation.loops)

    def test_recurrences(self) -> list[int]:
        return [1] if self.evaluation.loops == "forced" else sorted(set(self.evaluation.loops))

    def judged_by(self, gate: GateKind) -> bool:
        return True


ARM_KINDS.add(
    ArmKind(
        "recurrent",
        RecurrentArm,
        "arms.runtime:RecurrentRuntime",
        "a retrofitted recurrent block, read at every loop",
        stage_options=("recurrence",),
        evaluation_options=("loops", "exit_rules"),
        counter="arms.params:recurrent_params",
    )
)
