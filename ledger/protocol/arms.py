"""Arm specs: surgery, bridges, budgets, optimisers and schedules, recurrence, stages, evaluation, arm kinds."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from ledger.protocol.common import LateOptions as _LateOptions
from ledger.protocol.common import Problem, StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.depth_choice import ExitRule, HaltingHead
from ledger.protocol.gates import GateKind
from ledger.protocol.names import KeyName, KeyNameMap
from ledger.protocol.training import RECURRENCES as RECURRENCES  # re-exported: a stage's training settings
from ledger.protocol.training import LrSchedule as LrSchedule
from ledger.protocol.training import Optimizer as Optimizer
from ledger.protocol.training import Recurrence as Recurrence
from ledger.registry import Kind, KindUnion, Registry

# The linear projections of a Llama-family decoder layer that LoRA may target.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ----------------------------------------------------------------------------- the kinds


@dataclass(frozen=True)
class BridgeKind(Kind):
    """How the state re-enters the block. Design S: loop 1 is the base route; design M: every loop runs it."""

    design: str = "S"
    groups: tuple[str, ...] = ()  # the optimiser groups of its tensors (names `group_lrs` may use)


@dataclass(frozen=True)
class BudgetKind(Kind):
    """Which tensors train. ``designs``: the bridge designs it is defined for (any bridge kind of such a design)."""

    designs: tuple[str, ...] = ("S", "M")
    groups: tuple[str, ...] = ()
    trains_loop1: bool = True  # False: nothing it trains runs at loop 1, so depth-1 rows alone teach it nothing
    counter: str = ""  # "module:attribute" counting its trainable parameters from configs (`ledger params`)
    step_factor: float = 1.0  # a step's cost beyond the layers it runs (the `--parallel` cost model)


@dataclass(frozen=True)
class ObjectiveKind(Kind):
    """A stage's loss. ``reads``: the stage options it reads (and needs); ``target_format``: dense SFT targets."""

    models: tuple[str, ...] = ("looped",)  # what it trains: "looped" models (read at every loop), "one_pass" ones
    reads: tuple[str, ...] = ()
    target_format: str | None = None
    reads_text: bool = False  # trains on any rows as text (a stage may mix manifests); else on chains or SFT targets
    trains_halting_head: bool = False  # trains the arm's halting head alone, on the frozen block's states
    step_factor: float = 1.0  # a step's cost beyond the layers it runs (the `--parallel` cost model)


@dataclass(frozen=True)
class ArmKind(Kind):
    """A system under test: its spec (an ``ArmSpec``) and its runtime (``implementation``, in ``arms/``).
    ``stage_options`` / ``evaluation_options``: the optional settings it reads; ``counter``: ``"module:attribute"``
    of its ``ledger params`` row, counted from the base's config on the meta device."""

    groups: tuple[str, ...] = ()  # optimiser groups, where the spec does not compute them (``optimizer_groups``)
    stage_options: tuple[str, ...] = ()
    evaluation_options: tuple[str, ...] = ()
    counter: str = ""


BRIDGES: Registry[BridgeKind] = Registry("bridge")
BUDGETS: Registry[BudgetKind] = Registry("budget")
OBJECTIVES: Registry[ObjectiveKind] = Registry("objective")
ARM_KINDS: Registry[ArmKind] = Registry("arm kind")


# ----------------------------------------------------------------------------- arms


class LayerChoice(StrictModel):
    """The base's layers each part takes, by index (the design-M seed's layer-selection ablation)."""

    prelude: list[int] = Field(description="Layer indices run once before the block, in order.")
    block: list[int] = Field(min_length=1, description="Layer indices of the recurrent block, in order.")
    coda: list[int] = Field(description="Layer indices run once after the block, in order.")

    @model_validator(mode="after")
    def _ordered(self) -> LayerChoice:
        order = [*self.prelude, *self.block, *self.coda]
        if min(order, default=0) < 0 or order != sorted(set(order)):
            raise _located(
                "layers: increasing, distinct indices from 0, the prelude's before the block's before the coda's", []
            )
        return self


class Surgery(_LateOptions):
    """Where the recurrent block sits: exactly one of ``split``, ``tuple`` or ``layers``."""

    split: tuple[int, int] | None = Field(
        default=None, description="[a, b]: prelude layers 0..a-1, shared block a..b-1, coda b..end."
    )
    tuple_: tuple[int, int, int] | None = Field(
        default=None, alias="tuple", description="[p, r, c]: first p layers, last r + c layers, middle dropped."
    )
    layers: LayerChoice | None = Field(
        default=None,
        description="{prelude: [...], block: [...], coda: [...]}: the layers each part takes by index, the rest "
        "dropped (e.g. the seed's evenly spaced block [2, 5, 8, 11] of Llama-3.2-1B).",
    )

    _late_options = ("layers",)

    @model_validator(mode="after")
    def _exactly_one(self) -> Surgery:
        if sum(option is not None for option in (self.split, self.tuple_, self.layers)) != 1:
            raise _located(
                "surgery needs exactly one of 'split: [a, b]', 'tuple: [p, r, c]' or 'layers: {prelude, block, coda}'",
                [],
            )
        if self.split is not None:
            a, b = self.split
            if not 0 < a < b:
                raise _located(f"split [a, b] needs 0 < a < b, got [{a}, {b}]", ["split"])
        if self.tuple_ is not None and min(self.tuple_) < 1:
            raise _located(f"tuple [p, r, c] needs every count >= 1, got {list(self.tuple_)}", ["tuple"])
        return self

    def layers_needed(self) -> int:
        """The fewest decoder layers a base must have for this surgery."""
        if self.split is not None:
            return self.split[1] + 1
        if self.layers is not None:
            return max(self.layers.prelude + self.layers.block + self.layers.coda) + 1
        assert self.tuple_ is not None
        return sum(self.tuple_)

    def describe(self) -> str:
        if self.split is not None:
            return f"split {list(self.split)}"
        if self.layers is not None:
            return f"layers {self.layers.prelude} {self.layers.block} {self.layers.coda}"
        return f"tuple {list(self.tuple_ or ())}"

    def model_options(self) -> dict[str, Any]:
        """The keyword arguments of ``RecurrentLM.build`` this spec sets (the one mapping)."""
        options: dict[str, Any] = {"split": self.split, "tuple_": self.tuple_}
        if self.layers is not None:
            options["layers"] = (self.layers.prelude, self.layers.block, self.layers.coda)
        return options


class BridgeSpec(_LateOptions):
    """What every bridge kind's spec declares; a kind subclasses it with its ``kind`` literal and its own fields."""

    if TYPE_CHECKING:
        kind: str

    def model_options(self) -> dict[str, Any]:
        """The keyword arguments of ``RecurrentLM.build`` this bridge sets."""
        raise NotImplementedError

    def departures(self) -> tuple[str, ...]:
        """Where this bridge departs from its paper's design (empty: the paper's own)."""
        return ()

    def describe(self) -> str:
        return str(getattr(self, "kind", "bridge"))


class SplitBridge(BridgeSpec):
    kind: Literal["split"]
    state_norm: bool = Field(
        default=False,
        description="Normalise the state (its own LayerNorm) before re-entry, so it cannot grow from loop to loop. "
        "Not the paper's bridge.",
    )
    reentry: Literal["all", "answer"] = Field(
        default="all",
        description="Positions that carry the state into the next loop: all (the paper's), or only the answer "
        "position, the prompt re-entering with the prelude output as at loop 1 (not the paper's bridge).",
    )

    _late_options = ("state_norm", "reentry")

    def model_options(self) -> dict[str, Any]:
        return {"bridge": self.kind, "state_norm": self.state_norm, "reentry": self.reentry}

    def departures(self) -> tuple[str, ...]:
        """Where this bridge departs from the paper's design S (empty: the paper's bridge)."""
        return (("answer-only re-entry",) if self.reentry == "answer" else ()) + (
            ("state normalised",) if self.state_norm else ()
        )

    def describe(self) -> str:
        """What a reader of a summary needs to know: the paper's bridge or not, and where it departs."""
        if self.reentry == "all":
            text = "split bridge, every position re-enters (the paper's)"
        else:
            text = "split bridge, answer-only re-entry (not the paper's)"
        return text + (", state normalised (not the paper's)" if self.state_norm else "")


class ConcatBridge(BridgeSpec):
    kind: Literal["concat"]
    init: Literal["identity", "default"] = Field(
        default="identity",
        description="identity: W = [0 | I] (the prelude output passes, the state is ignored at first); default: "
        "PyTorch's Linear init (the published adapter).",
    )
    initial_state: Literal["random", "zeros", "prelude"] = Field(
        default="random", description="s0: random N(0, sigma^2) (the seed's), zeros, or the prelude output."
    )
    sigma: float = Field(default=1.0, gt=0)
    block_norms: bool = Field(
        default=False,
        description="Two extra RMSNorms of the base's own class around the block (after the adapter, after the "
        "block), as the seed's recurrent block has; the base's layers keep their own two norms each.",
    )

    _late_options = ("block_norms",)

    def departures(self) -> tuple[str, ...]:
        """Where this adapter departs from design M as published (empty: its design): s0 random is the seed's."""
        return () if self.initial_state == "random" else (f"{self.initial_state} initial state",)

    def describe(self) -> str:
        state = f"random s0 (sigma {self.sigma:g})" if self.initial_state == "random" else f"{self.initial_state} s0"
        return f"concat adapter ({self.init} init, {state}{', block norms' if self.block_norms else ''})"

    def model_options(self) -> dict[str, Any]:
        return {
            "bridge": self.kind,
            "init": self.init,
            "s0": self.initial_state,
            "s0_sigma": self.sigma,
            "block_norms": self.block_norms,
        }


BRIDGES.add(
    BridgeKind(
        "split",
        SplitBridge,
        "arms.hf.bridge_split:SplitBridge",
        "P_p p + P_h LN(h): the paper's design S",
        groups=("bridge_p", "bridge_h", "bridge_rest"),
    )
)
BRIDGES.add(
    BridgeKind(
        "concat",
        ConcatBridge,
        "arms.hf.bridge_concat:ConcatAdapter",
        "W [s; e]: McLeish et al.'s design M",
        design="M",
        groups=("bridge",),
    )
)
Bridge = Annotated[BridgeSpec, KindUnion(BRIDGES)]  # open: a bridge a plugin registers joins (``BRIDGES.add``)


def design_departures(arm: Mapping[str, Any]) -> tuple[str, ...]:
    """Where an arm, as a protocol's canonical document holds it, departs from its paper's design: its bridge's
    departures (``departures()``); an arm with no bridge (a dense control, a base) is the paper's own."""
    bridge = arm.get("bridge")
    if not isinstance(bridge, Mapping) or bridge.get("kind") not in BRIDGES:
        return ()
    model: Any = BRIDGES[str(bridge["kind"])].spec
    departures = getattr(model.model_validate(dict(bridge)), "departures", None)
    return tuple(departures()) if departures is not None else ()


def claim_departures(subjects: Iterable[str], arms: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """Where the arms a claim is about depart from the paper's design, each departure once (``arms``: id -> the
    arm as a canonical document holds it; an arm written with seeds is read through its replicates, which the
    document holds as ``ID.sSEED`` with ``replicate.of``; a base or an unknown id departs in nothing)."""

    def read(arm: str) -> list[str]:
        replicates = [name for name, spec in arms.items() if (spec.get("replicate") or {}).get("of") == arm]
        return replicates or [arm]

    return tuple(
        dict.fromkeys(d for arm in subjects for name in read(arm) for d in design_departures(arms.get(name, {})))
    )


class BudgetSpec(StrictModel):
    """What every budget kind's spec declares; a kind subclasses it with its ``kind`` literal and its own fields."""

    if TYPE_CHECKING:
        kind: str


class FullBlockBudget(BudgetSpec):
    kind: Literal["full_block"]


class AdapterBudget(BudgetSpec):
    kind: Literal["adapter"]
    rank: int = Field(ge=1)
    alpha: float = Field(gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    targets: list[Literal[LORA_TARGETS]] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1)  # type: ignore[valid-type]


BUDGETS.add(
    BudgetKind(
        "full_block",
        FullBlockBudget,
        "arms.model.budgets:full_block_budget",
        "the block + bridge train",
        groups=("block",),
        counter="arms.model.accounting:count_full_block",
    )
)
BUDGETS.add(
    BudgetKind(
        "adapter",
        AdapterBudget,
        "arms.model.budgets:adapter_budget",
        "one LoRA set on the block, off at loop 1 (design S only)",
        designs=("S",),
        groups=("lora",),
        trains_loop1=False,
        counter="arms.model.accounting:count_adapter",
        # measured on the tiny protocol's shapes (issue 19): the low-rank path runs beside every wrapped matrix
        step_factor=1.15,
    )
)


class FullModelBudget(BudgetSpec):
    kind: Literal["full_model"]


BUDGETS.add(
    BudgetKind(
        "full_model",
        FullModelBudget,
        "arms.model.budgets:full_model_budget",
        "every tensor of the retrofit trains: prelude, block, coda, embeddings, adapter (design M's recipe)",
        groups=("embeddings", "model"),
        counter="arms.model.accounting:count_full_model",
    )
)
Budget = Annotated[BudgetSpec, KindUnion(BUDGETS)]  # open: a budget a plugin registers joins (``BUDGETS.add``)


for _objective in (
    ObjectiveKind(
        "intermediate",
        type(None),
        "arms.train.recurrent:intermediate_objective",
        "CE at every loop t <= depth against the t-th hop",
    ),
    ObjectiveKind("outcome", type(None), "arms.train.recurrent:outcome_objective", "CE at loop = depth on the answer"),
    ObjectiveKind(
        "anneal",
        type(None),
        "arms.train.recurrent:anneal_objective",
        "intermediate -> outcome over anneal_fraction of the steps",
        reads=("anneal_fraction",),
    ),
    ObjectiveKind(
        "halting_ponder",
        type(None),
        "arms.train.halting:ponder_objective",
        "PonderNet: expected answer CE under the halting distribution + beta KL to a geometric prior (head only)",
        trains_halting_head=True,
    ),
    ObjectiveKind(
        "halting_supervised",
        type(None),
        "arms.train.halting:supervised_objective",
        "-log of the halting probability at the row's own depth (head only)",
        trains_halting_head=True,
    ),
    ObjectiveKind(
        "next_token",
        type(None),
        "arms.train.language:next_token_loss",
        "next-token cross-entropy on text (design M; a dense arm: the non-recurrent control)",
        models=("looped", "one_pass"),
        reads_text=True,
    ),
    ObjectiveKind(
        "sft_direct",
        type(None),
        "arms.dense.sft_data:build_sft_examples",
        "SFT on the answer alone",
        models=("one_pass",),
        target_format="direct",
    ),
    ObjectiveKind(
        "sft_scratchpad",
        type(None),
        "arms.dense.sft_data:build_sft_examples",
        "SFT on every hop, then the answer",
        models=("one_pass",),
        target_format="scratchpad",
        step_factor=1.2,  # measured (issue 19): the target writes the hops, ~17 tokens after an 82-token prompt
    ),
):
    OBJECTIVES.add(_objective)


class Until(StrictModel):
    """Train until a gate passes: the gate is read every ``every`` steps, and the stage ends at the first pass, or
    at its ``steps`` (then the cap, and the horizon of its learning-rate schedule)."""

    gate: KeyName = Field(description="One of the stage's own gates, read on development rows.")
    every: int = Field(ge=1, description="Steps between two readings of the gate.")


class Stage(_LateOptions):
    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    objective: Literal[OBJECTIVES.names()]  # type: ignore[valid-type]
    manifest: KeyName | None = Field(default=None, description="Training manifest id (or a mixture).")
    mixture: KeyNameMap[float] = Field(
        default_factory=dict,
        description="A data mixture instead of one manifest: manifest id -> weight (each example's manifest is "
        "drawn by weight). Next-token stages, or chains for a chain objective (rehearsal of an earlier operation). Healing is two stages: general text, then the task mixture.",
    )
    max_tokens: int = Field(default=128, ge=8, le=8192, description="Next-token stages: tokens kept per document.")
    checkpoint_every: int | None = Field(
        default=None,
        ge=1,
        description="Also record a checkpoint every this many steps, each read on the arm's evaluation manifests "
        "(the curve that equal-FLOPs claims interpolate over).",
    )
    steps: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Gradient accumulation: each rank runs its share of the step's batch this many rows at a time, "
        "the step's loss the mean of theirs (the seed's micro_batch_size): the same step in less memory.",
    )
    optimizer: Optimizer
    recurrence: Recurrence | None = None
    anneal_fraction: float | None = Field(
        default=None, gt=0, le=1, description="anneal: the chain weight ramps 1 -> 0 over this fraction of steps."
    )
    gates: list[KeyName] = Field(default_factory=list, description="Gates evaluated after this stage.")
    until: Until | None = Field(
        default=None,
        description="Train until one of the stage's gates passes (read every `every` steps), `steps` the cap: "
        "an arm trained to the competence its claims require of it.",
    )

    _late_options = ("mixture", "max_tokens", "checkpoint_every", "micro_batch_size", "until")

    def manifests(self) -> list[str]:
        """The manifests the stage draws from."""
        return list(self.mixture) if self.mixture else [str(self.manifest)]

    @model_validator(mode="after")
    def _one_source(self):
        if (self.manifest is None) == (not self.mixture):
            raise _located("a stage needs exactly one of 'manifest: ID' or 'mixture: {ID: weight}'", [])
        if any(weight <= 0 for weight in self.mixture.values()):
            raise _located("mixture weights must be positive", ["mixture"])
        if self.micro_batch_size is not None and self.micro_batch_size > self.batch_size:
            raise _located(
                f"micro_batch_size {self.micro_batch_size} is above the step's batch_size {self.batch_size}",
                ["micro_batch_size"],
            )
        if self.until is not None:
            if self.until.gate not in self.gates:
                raise _located(
                    f"until reads gate {self.until.gate!r}, which is not one of this stage's gates "
                    f"({', '.join(self.gates) or 'none'}): list it under gates, so its last verdict is recorded",
                    ["until", "gate"],
                )
            if self.until.every >= self.steps:
                raise _located(
                    f"until reads its gate every {self.until.every} steps, not before the stage's cap of {self.steps}",
                    ["until", "every"],
                )
        return self

    @model_validator(mode="after")
    def _warmup_within_stage(self):
        schedule = self.optimizer.schedule
        if schedule is not None and schedule.warmup_steps >= self.steps:
            raise _located(
                f"warmup_steps ({schedule.warmup_steps}) must be fewer than the stage's steps ({self.steps})",
                ["optimizer", "schedule", "warmup_steps"],
            )
        if schedule is not None and schedule.decay_fraction is not None:
            decay = math.ceil(schedule.decay_fraction * self.steps)
            if schedule.warmup_steps + decay > self.steps:
                raise _located(
                    f"the warm-up ({schedule.warmup_steps} steps) and the decay ({decay} of {self.steps} steps) "
                    "overlap: shorten one",
                    ["optimizer", "schedule", "decay_fraction"],
                )
        return self


class Evaluation(_LateOptions):
    manifests: list[KeyName] = Field(min_length=1)
    loops: Literal["forced"] | list[Annotated[int, Field(ge=1)]] = "forced"
    batch_size: int = Field(default=16, ge=1)
    max_new_tokens: int = Field(default=48, ge=1, description="Dense arms: generation budget per row.")
    latency_sample_per_depth: int = Field(default=4, ge=0)
    max_tokens: int = Field(default=256, ge=8, le=8192, description="Text rows: tokens read per document.")
    exit_rules: list[ExitRule] = Field(
        default_factory=list,
        description="Choosing depth: rows read at loops 1..K (`loops`) record each loop's exit signals, and each "
        "rule marks the reading a row stops at (adaptive_depth claims compare it with forced depth).",
    )

    _late_options = ("max_tokens", "exit_rules")


class Replicate(StrictModel):
    """One training seed of an arm replicated over seeds (``seeds: [...]`` on the arm)."""

    of: KeyName
    seed: int = Field(ge=0)


class ArmSpec(StrictModel):
    """An arm: the fields every kind has (its base, its lineage, its stages, its evaluation) and the questions
    the rest of the ledger asks of it. A kind is a subclass with a ``kind: Literal[...]`` tag, registered in
    ``ARM_KINDS`` with its runtime in ``arms/`` (``ledger/protocol/recurrent_arm.py`` and ``dense_arm.py`` are the
    built-in two). ``ledger check``, ``ledger params``, the runner, the parallel cost model, gates and the
    CLI read an arm only through these methods, so a new kind is its spec and its runtime."""

    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    base: KeyName
    init_from: KeyName | None = Field(default=None, description="Continue from another arm's promoted checkpoint.")
    init_checkpoint: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Continue from a checkpoint recorded in the ledger (by SHA-256), e.g. from an earlier protocol; "
        "refused if its lineage failed a hard gate or is exploratory.",
    )
    stages: list[Stage] = Field(default_factory=list)
    evaluation: Evaluation
    seeds: list[int] | None = Field(
        default=None,
        description="Replicate this arm over these training seeds (two or more): the protocol holds one arm per "
        "seed, ID.sSEED, each its own lineage; claims name the arm as written and are judged over its seeds.",
    )
    replicate: Replicate | None = Field(
        default=None,
        description="Set by the protocol for each replicate of an arm written with `seeds`: the arm it replicates "
        "and its training seed (its id is ARM.sSEED, its lineage its own).",
    )
    if TYPE_CHECKING:
        kind: str  # each kind's own tag, ``Literal["..."]``, declared by its subclass (the union's discriminator)

    # -- what it is

    def design(self) -> str:
        """One line for summaries: what this arm is."""
        raise NotImplementedError

    def layers_needed(self) -> int:
        """The fewest decoder layers its base must have (0: any base)."""
        return 0

    def cuts_base(self) -> bool:
        """Whether the arm cuts its base's layers (a surgery): its base must be of a family the surgery supports."""
        return False

    def part_problems(self, layers: int | None) -> list[Problem]:
        """Its parts of other registries (bridge, budget, surgery): runnable, meant for each other, fitting a
        base of ``layers`` decoder layers (None: unknown). Paths are relative to the arm."""
        return []

    def same_tensors_as(self, source: ArmSpec) -> bool:
        """Whether this arm can continue from ``source``'s trainable tensors (``init_from``)."""
        return source.kind == self.kind and source.base == self.base

    def optimizer_groups(self) -> tuple[str, ...]:
        """The optimiser groups of its trainable tensors (the names ``group_lrs`` may use)."""
        return ARM_KINDS[self.kind].groups

    def halting(self) -> HaltingHead | None:
        """Its halting head (choosing depth), if it has one."""
        return None

    # -- how it trains

    def trains(self, objective: ObjectiveKind) -> bool:
        """Whether a stage of this arm may train ``objective``."""
        raise NotImplementedError

    def stage_problems(self, protocol: Any, stage: Stage, at: tuple[Any, ...]) -> list[Problem]:
        """What this kind refuses in one of its stages (``at``: the stage's path), beyond what every stage checks."""
        return []

    def step_cost(self, protocol: Any, stage: Stage, layers: int) -> float:
        """A training step's cost in layer passes over a row, for balancing ``--parallel`` groups (``layers``: the
        base's decoder layers): a one-pass step runs every layer once."""
        return float(layers)

    # -- how it is read

    def evaluation_problems(self, protocol: Any, at: tuple[Any, ...]) -> list[Problem]:
        """What this kind refuses in its evaluation (``at``: the arm's path)."""
        return []

    def loops_read(self, manifest: Any, reading: str) -> tuple[set[int], bool]:
        """The loops at which this arm's rows of ``manifest`` (read as ``reading``, its generator's) are read,
        and whether every row gets its final reading there. A one-pass arm reads a chain once (loop 0) and
        anything else at loop 1."""
        if reading == "by_loop":
            return {0}, True
        return {1}, reading == "choice"

    def test_recurrences(self) -> list[int]:
        """The loops a sweep reads it at (text loss, answers at each test recurrence); its summary reads the last."""
        return [1]

    def judged_by(self, gate: GateKind) -> bool:
        """Whether a gate of this kind can judge this arm."""
        return not gate.reads_loops

    @model_validator(mode="after")
    def _objectives(self) -> ArmSpec:
        kind = self.kind
        allowed = tuple(objective.name for objective in OBJECTIVES if self.trains(objective))
        for index, stage in enumerate(self.stages):
            objective = OBJECTIVES[stage.objective]
            if not self.trains(objective):
                raise _located(
                    f"objective {stage.objective!r} is not for {kind} arms (use one of {', '.join(allowed)})",
                    ["stages", index, "objective"],
                )
            for option in objective.reads:
                if getattr(stage, option) is None:
                    raise _located(f"an {stage.objective} stage needs {option}", ["stages", index])
        return self


# The type of a protocol's arm: whichever spec ARM_KINDS holds for its ``kind`` (a plugin's kinds included).
Arm = Annotated[ArmSpec, KindUnion(ARM_KINDS)]
