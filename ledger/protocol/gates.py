"""Gate specs: the checks that decide a checkpoint's status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from ledger.protocol.common import DepthRange, LateOptions, StrictModel
from ledger.protocol.names import KeyName
from ledger.registry import Kind, KindUnion, Registry


@dataclass(frozen=True)
class GateKind(Kind):
    """A gate. ``after``: "stage" (decides the stage's checkpoint) or "arms" (compares arms once both finished);
    ``generators``: the manifests it can judge (empty: any); ``reads_loops``: it reads each row at its own depth's
    loop, so it judges only arms read at every loop (``ArmSpec.judged_by``)."""

    after: str = "stage"
    generators: tuple[str, ...] = ()
    reads_loops: bool = False
    reads_base: bool = False  # judged against the base's own reading of the rows (evidence arm "base:NAME")


GATE_KINDS: Registry[GateKind] = Registry("gate kind")

# ----------------------------------------------------------------------------- gates


class GateSpec(StrictModel):
    """What every gate kind declares; a kind subclasses it with its ``kind`` literal, the ``manifest`` it reads
    and its own fields (declared there, so that the schema keeps each kind's own field order)."""

    if TYPE_CHECKING:
        kind: str
        manifest: str

        def rule(self) -> str: ...

    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    action: Literal["stop", "flag"] = Field(
        description="stop: a failure is a hard stop that marks the lineage failed; flag: recorded only."
    )
    description: str = ""


class InstallationGate(GateSpec, LateOptions):
    """Active-label accuracy on shallow depths after installing the transition: pooled over the depths, and per
    depth (the paper counts each depth: 64, 63, 63, 59 of 64), each recorded; ``per_depth_threshold`` also holds
    every depth to a floor."""

    kind: Literal["installation"]
    manifest: KeyName
    depths: DepthRange
    threshold: float = Field(ge=0, le=1, description="0 records the measurement without ever failing.")
    per_depth_threshold: float | None = Field(
        default=None, ge=0, le=1, description="Every depth's active-label accuracy at least this, beside the pooled."
    )
    per_depth_measure: Literal["cells", "rows"] = Field(
        default="cells",
        description="What per_depth_threshold holds each depth to: the share of its active cells right (cells), or "
        "of its rows with every active cell right (rows: the paper's per-depth counts, e.g. 59 of 64 at depth 4).",
    )

    _late_options = ("per_depth_threshold", "per_depth_measure")

    def rule(self) -> str:
        unit = " of its rows" if self.per_depth_measure == "rows" else ""
        every = f", each depth >= {self.per_depth_threshold}{unit}" if self.per_depth_threshold is not None else ""
        return f"active-label acc depth {self.depths[0]}-{self.depths[1]} >= {self.threshold}{every}"


class GuardrailGate(GateSpec):
    """General ability at loop 1 must not drop more than ``max_drop`` against the base."""

    kind: Literal["guardrail"]
    manifest: KeyName
    max_drop: float = Field(ge=0, le=1)
    reference: Literal["base"] = "base"

    def rule(self) -> str:
        return f"drop vs {self.reference} <= {self.max_drop}"


class RetentionFloorGate(GateSpec, LateOptions):
    """Accuracy on a manifest must stay at or above a floor: over every row, or at every depth (the paper's
    forward-retention minimum: the lowest per-depth accuracy)."""

    kind: Literal["retention_floor"]
    manifest: KeyName
    depths: DepthRange | None = None
    floor: float = Field(ge=0, le=1)
    measure: Literal["accuracy", "min_per_depth"] = Field(
        default="accuracy", description="accuracy: over every row; min_per_depth: the lowest per-depth accuracy."
    )

    _late_options = ("measure",)

    def rule(self) -> str:
        what = "accuracy" if self.measure == "accuracy" else "min per-depth accuracy"
        return f"{what} >= {self.floor}"


class DepthGate(GateSpec):
    """Per-depth comparison of two arms, passing on k consecutive depths."""

    kind: Literal["depth_gate"]
    manifest: KeyName
    arm: KeyName
    versus: KeyName
    test: Literal["fisher_counts", "paired_exact"] = "paired_exact"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    consecutive: int = Field(default=1, ge=1)

    def rule(self) -> str:
        return f"{self.arm} > {self.versus} ({self.test}, alpha {self.alpha}, {self.consecutive} consecutive depths)"


class WithinRowsGate(GateSpec):
    """The paper's adapter gate: ``arm`` within ``rows`` correct rows of ``versus`` at every depth of the manifest
    (``versus``'s count minus ``arm``'s at most ``rows``; ``arm`` may lead by any number)."""

    kind: Literal["within_rows"]
    manifest: KeyName
    arm: KeyName
    versus: KeyName
    rows: int = Field(default=8, ge=0, description="Correct rows ``arm`` may trail ``versus`` by at any depth.")

    def rule(self) -> str:
        return f"{self.arm} within {self.rows} rows of {self.versus} at every depth"


GATE_KINDS.add(
    GateKind(
        "installation",
        InstallationGate,
        "ledger.judge.gates:judge_installation",
        "active-label accuracy on shallow depths",
        generators=("rule_chasing",),
        reads_loops=True,
    )
)
GATE_KINDS.add(
    GateKind(
        "guardrail",
        GuardrailGate,
        "ledger.judge.gates:judge_guardrail",
        "loop-1 accuracy on multiple-choice rows against the base",
        generators=("arithmetic", "choice_file"),
        reads_base=True,
    )
)
GATE_KINDS.add(
    GateKind(
        "retention_floor",
        RetentionFloorGate,
        "ledger.judge.gates:judge_retention_floor",
        "final-reading accuracy at or above a floor",
    )
)
GATE_KINDS.add(
    GateKind(
        "depth_gate",
        DepthGate,
        "ledger.judge.gates:judge_depth_gate",
        "per-depth A > B on k consecutive depths",
        after="arms",
        generators=("rule_chasing",),
    )
)
GATE_KINDS.add(
    GateKind(
        "within_rows",
        WithinRowsGate,
        "ledger.judge.gates:judge_within_rows",
        "per depth, an arm's correct rows within k of another arm's",
        after="arms",
        generators=("rule_chasing",),
    )
)
# The union of every registered gate kind, built from the registry (a plugin's kind included).
Gate = Annotated[GateSpec, KindUnion(GATE_KINDS)]
