"""The protocol schema: what an experiment promises before it runs.

A protocol is a YAML file validated by these Pydantic v2 models. Validation is strict:
an unknown key is an error that names the key and the closest valid one, every
reference (to a base, manifest, arm or gate) must resolve, and cross-field rules
(depth ranges, alphabet sizes, surgery indices, stage objectives) are checked before
anything runs. ``Protocol.model_json_schema()`` is the published schema
(``ledger schema``, ``protocols/schema.json``). Loading a file with located errors
(file, YAML line, field path) is ``ledger.spec.loader.load_protocol``.
"""

from __future__ import annotations

from pathlib import Path

import difflib
import math
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from ledger.canonical import canonical_json, sha256_hex

SCHEMA_VERSION = 1

# Symbol alphabets a protocol may name; sizes are checked against depths here so a
# protocol fails at `ledger check`, not an hour into a run. The symbols themselves
# live in ledger.rows.tasks.alphabets (the generator owns them).
ALPHABET_SIZES = {"N16": 16, "N24": 24, "names": 24}

# The linear projections of a Llama-family decoder layer that LoRA may target.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class StrictModel(BaseModel):
    """Base of every protocol model: unknown keys are errors that suggest the closest key."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        valid = set()
        for name, field in cls.model_fields.items():
            valid.add(field.alias or name)
        unknown = [key for key in data if key not in valid]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), sorted(valid), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (valid keys: {', '.join(sorted(valid))})"
            message = f"unknown key {key!r}{hint}"
            raise PydanticCustomError("unknown_key", "{message}", {"message": message, "at": [str(key)]})
        return data


def _located(message: str, at: list[str | int]) -> PydanticCustomError:
    """An error that carries the path (relative to the model raising it) of the bad field."""
    return PydanticCustomError("protocol_rule", "{message}", {"message": message, "at": at})


DepthRange = Annotated[
    tuple[int, int],
    Field(description="Inclusive depth range [low, high]; low >= 1 and low <= high."),
]


# ----------------------------------------------------------------------------- bases


class BaseModelSpec(StrictModel):
    """A pretrained base: a Hugging Face id or a local path, loaded offline."""

    source: str = Field(description="HF hub id (must be in the local HF cache) or a local directory/file path.")
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    gguf_file: str | None = Field(default=None, description="File name of a GGUF checkpoint inside `source`.")
    sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", description="Expected SHA-256 of the weights file, checked on load."
    )
    chat_template: bool = Field(default=False, description="Wrap prompts in the tokenizer's chat template.")
    num_layers: int | None = Field(default=None, ge=1, description="Decoder layer count, for checking surgery indices.")


# ----------------------------------------------------------------------------- manifests



def base_location(spec: BaseModelSpec, protocol_dir: Path) -> str:
    """The base's source with relative paths resolved against the protocol file's folder."""
    source = spec.source
    if source.startswith(("./", "../")):
        return str((protocol_dir / source).resolve())
    return source


class _ManifestCommon(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    role: Literal["train", "dev", "eval", "guardrail"] = Field(
        description="train rows may never share a (table, start) pair with eval or dev rows."
    )
    seed: int = Field(ge=0)
    split: str = Field(pattern=r"^[a-z0-9]+$", description="Split name; part of every row id and row seed.")
    version: int = Field(default=1, ge=1, description="Generator version; part of every row seed.")


class RuleChasingManifest(_ManifestCommon):
    generator: Literal["rule_chasing"]
    surface: Literal["symbolic", "relay", "pointer"] = "symbolic"
    alphabet: Literal["N16", "N24", "names"] = "N16"
    depths: DepthRange
    rows_per_depth: int = Field(ge=1)
    distractors: bool = Field(default=True, description="Map every off-orbit symbol to a random symbol.")

    @model_validator(mode="after")
    def _depths_fit_alphabet(self) -> "RuleChasingManifest":
        low, high = self.depths
        if low < 1:
            raise _located(f"depths must start at 1 or more, got {low}", ["depths", 0])
        if low > high:
            raise _located(f"depth range is inverted: [{low}, {high}] (low must be <= high)", ["depths"])
        size = ALPHABET_SIZES[self.alphabet]
        if high + 1 > size:
            raise _located(
                f"alphabet {self.alphabet} has {size} symbols but depth {high} needs {high + 1} distinct symbols",
                ["alphabet"],
            )
        return self

    @property
    def size(self) -> int:
        return (self.depths[1] - self.depths[0] + 1) * self.rows_per_depth


class ArithmeticManifest(_ManifestCommon):
    generator: Literal["arithmetic"]
    per_op: int = Field(default=16, ge=1, description="Rows per operation (+ - x /).")

    @property
    def size(self) -> int:
        return 4 * self.per_op


ManifestSpec = Annotated[Union[RuleChasingManifest, ArithmeticManifest], Field(discriminator="generator")]


# ----------------------------------------------------------------------------- arms


class Surgery(StrictModel):
    """Where the recurrent block sits: exactly one of ``split`` or ``tuple``."""

    split: tuple[int, int] | None = Field(
        default=None, description="[a, b]: prelude layers 0..a-1, shared block a..b-1, coda b..end."
    )
    tuple_: tuple[int, int, int] | None = Field(
        default=None, alias="tuple", description="[p, r, c]: first p layers, last r + c layers, middle dropped."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> "Surgery":
        if (self.split is None) == (self.tuple_ is None):
            raise _located("surgery needs exactly one of 'split: [a, b]' or 'tuple: [p, r, c]'", [])
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
        return sum(self.tuple_)


class _LateOptions(StrictModel):
    """A model with fields added after protocols were registered (``_late_options``).

    Such a field is left out of the serialised form while it holds its default, so a
    protocol that does not use it serialises (and hashes) as it did before it existed.
    """

    _late_options: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unused_late_options(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for name in self._late_options:
                if getattr(self, name) == type(self).model_fields[name].default:
                    data.pop(name, None)
        return data


class SplitBridge(_LateOptions):
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


class ConcatBridge(StrictModel):
    kind: Literal["concat"]
    init: Literal["identity", "default"] = "identity"
    initial_state: Literal["random", "zeros", "prelude"] = "random"
    sigma: float = Field(default=1.0, gt=0)


Bridge = Annotated[Union[SplitBridge, ConcatBridge], Field(discriminator="kind")]


class FullBlockBudget(StrictModel):
    kind: Literal["full_block"]


class AdapterBudget(StrictModel):
    kind: Literal["adapter"]
    rank: int = Field(ge=1)
    alpha: float = Field(gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    targets: list[Literal[LORA_TARGETS]] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1)  # type: ignore[valid-type]


Budget = Annotated[Union[FullBlockBudget, AdapterBudget], Field(discriminator="kind")]


class LrSchedule(StrictModel):
    """How a stage's learning rate moves: a multiplier on every group's lr (ratios kept)."""

    kind: Literal["constant", "cosine", "linear"]
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up from lr/warmup_steps to lr.")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="cosine/linear: the last step's lr is lr x this.")

    def scale(self, step: int, steps: int) -> float:
        """The multiplier at 0-based ``step`` of ``steps``."""
        if self.warmup_steps and step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(steps - self.warmup_steps, 1)
        progress = min(max(step - self.warmup_steps, 0) / span, 1.0)
        floor = self.min_lr_ratio
        if self.kind == "linear":
            return floor + (1 - floor) * (1 - progress)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


class Optimizer(_LateOptions):
    kind: Literal["adamw", "muon"] = "adamw"
    lr: float = Field(gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    group_lrs: dict[str, float] = Field(
        default_factory=dict,
        description="Per-tensor-group learning-rate multipliers (e.g. bridge_p: 0.1). Groups are whole tensors.",
    )
    schedule: LrSchedule | None = Field(default=None, description="Learning-rate schedule; none: constant lr.")

    _late_options = ("schedule",)


class ForcedRecurrence(StrictModel):
    kind: Literal["forced"]


class PoissonLognormalRecurrence(StrictModel):
    kind: Literal["poisson_lognormal"]
    mean: float = Field(gt=0)
    sigma: float = Field(default=0.5, gt=0)
    backprop_depth: int = Field(default=8, ge=1)
    curriculum: Literal["none", "linear", "one_minus_sqrt"] = "none"
    curriculum_fraction: float = Field(default=0.0, ge=0, le=1)


Recurrence = Annotated[Union[ForcedRecurrence, PoissonLognormalRecurrence], Field(discriminator="kind")]

RECURRENT_OBJECTIVES = ("intermediate", "outcome", "anneal")
DENSE_OBJECTIVES = ("sft_direct", "sft_scratchpad")


class Stage(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    objective: Literal["intermediate", "outcome", "anneal", "sft_direct", "sft_scratchpad"]
    manifest: str = Field(description="Training manifest id.")
    steps: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    optimizer: Optimizer
    recurrence: Recurrence | None = None
    anneal_fraction: float | None = Field(
        default=None, gt=0, le=1, description="anneal: the chain weight ramps 1 -> 0 over this fraction of steps."
    )
    gates: list[str] = Field(default_factory=list, description="Gates evaluated after this stage.")

    @model_validator(mode="after")
    def _warmup_within_stage(self):
        schedule = self.optimizer.schedule
        if schedule is not None and schedule.warmup_steps >= self.steps:
            raise _located(
                f"warmup_steps ({schedule.warmup_steps}) must be fewer than the stage's steps ({self.steps})",
                ["optimizer", "schedule", "warmup_steps"],
            )
        return self


class Evaluation(StrictModel):
    manifests: list[str] = Field(min_length=1)
    loops: Literal["forced"] | list[Annotated[int, Field(ge=1)]] = "forced"
    batch_size: int = Field(default=16, ge=1)
    max_new_tokens: int = Field(default=48, ge=1, description="Dense arms: generation budget per row.")
    latency_sample_per_depth: int = Field(default=4, ge=0)


class _ArmCommon(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    base: str
    init_from: str | None = Field(default=None, description="Continue from another arm's promoted checkpoint.")
    init_checkpoint: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Continue from a checkpoint recorded in the ledger (by SHA-256), e.g. from an earlier protocol; "
        "refused if its lineage failed a hard gate or is exploratory.",
    )
    stages: list[Stage] = Field(default_factory=list)
    evaluation: Evaluation


class RecurrentArm(_ArmCommon):
    kind: Literal["recurrent"]
    surgery: Surgery
    bridge: Bridge
    budget: Budget

    @model_validator(mode="after")
    def _objectives(self) -> "RecurrentArm":
        _check_stage_objectives(self.stages, RECURRENT_OBJECTIVES, "recurrent")
        if isinstance(self.bridge, ConcatBridge) and self.surgery.split is not None:
            pass  # allowed: concat bridges are design M's, but nothing forbids them on a split
        return self


class DenseArm(_ArmCommon):
    kind: Literal["dense"]

    @model_validator(mode="after")
    def _objectives(self) -> "DenseArm":
        _check_stage_objectives(self.stages, DENSE_OBJECTIVES, "dense")
        if self.evaluation.loops != "forced":
            raise _located("dense arms are evaluated once per row: loops must be 'forced'", ["evaluation", "loops"])
        return self


def _check_stage_objectives(stages: list[Stage], allowed: tuple[str, ...], kind: str) -> None:
    for index, stage in enumerate(stages):
        if stage.objective not in allowed:
            raise _located(
                f"objective {stage.objective!r} is not for {kind} arms (use one of {', '.join(allowed)})",
                ["stages", index, "objective"],
            )
        if stage.objective == "anneal" and stage.anneal_fraction is None:
            raise _located("an anneal stage needs anneal_fraction", ["stages", index])


Arm = Annotated[Union[RecurrentArm, DenseArm], Field(discriminator="kind")]


# ----------------------------------------------------------------------------- gates


class _GateCommon(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    action: Literal["stop", "flag"] = Field(
        description="stop: a failure is a hard stop that marks the lineage failed; flag: recorded only."
    )
    description: str = ""


class InstallationGate(_GateCommon):
    """Active-label accuracy on shallow depths after installing the transition."""

    kind: Literal["installation"]
    manifest: str
    depths: DepthRange
    threshold: float = Field(ge=0, le=1, description="0 records the measurement without ever failing.")


class GuardrailGate(_GateCommon):
    """General ability at loop 1 must not drop more than ``max_drop`` against the base."""

    kind: Literal["guardrail"]
    manifest: str
    max_drop: float = Field(ge=0, le=1)
    reference: Literal["base"] = "base"


class RetentionFloorGate(_GateCommon):
    """Accuracy on a manifest must stay at or above a floor."""

    kind: Literal["retention_floor"]
    manifest: str
    depths: DepthRange | None = None
    floor: float = Field(ge=0, le=1)


class DepthGate(_GateCommon):
    """Per-depth comparison of two arms, passing on k consecutive depths."""

    kind: Literal["depth_gate"]
    manifest: str
    arm: str
    versus: str
    test: Literal["fisher_counts", "paired_exact"] = "paired_exact"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    consecutive: int = Field(default=1, ge=1)


Gate = Annotated[
    Union[InstallationGate, GuardrailGate, RetentionFloorGate, DepthGate], Field(discriminator="kind")
]


class Hypothesis(StrictModel):
    id: str
    statement: str


# ----------------------------------------------------------------------------- protocol


class Protocol(StrictModel):
    """A preregistrable experiment: bases, manifests, arms, gates and claims."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    version: int = Field(ge=1)
    description: str
    purpose: Literal["confirmatory", "exploratory"] = Field(
        default="confirmatory",
        description="exploratory: a tuning run on development rows. Its checkpoints are recorded as exploratory "
        "(nothing confirmatory may descend from them), and it may hold no role-eval manifest and no claims, "
        "so the ledger shows that tuning never touched a frozen evaluation manifest.",
    )
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    seed: int = Field(ge=0)
    bases: dict[str, BaseModelSpec] = Field(min_length=1)
    manifests: list[ManifestSpec] = Field(min_length=1)
    arms: list[Arm] = Field(min_length=1)
    gates: list[Gate] = Field(default_factory=list)
    claims: list[str] = Field(default_factory=list, description="Claim files, relative to the protocol file.")

    @model_validator(mode="after")
    def _references_resolve(self) -> "Protocol":
        problems: list[tuple[str, list[str | int]]] = []
        manifests = _unique_ids(self.manifests, "manifests", problems)
        arms = _unique_ids(self.arms, "arms", problems)
        gates = _unique_ids(self.gates, "gates", problems)

        def need(kind: str, value: str, known: dict, at: list[str | int]) -> None:
            if value not in known:
                close = difflib.get_close_matches(value, sorted(known), n=1, cutoff=0.5)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(known)) or 'none'})"
                problems.append((f"unknown {kind} {value!r}{hint}", at))

        for a, arm in enumerate(self.arms):
            need("base", arm.base, self.bases, ["arms", a, "base"])
            if arm.init_from is not None:
                need("arm", arm.init_from, arms, ["arms", a, "init_from"])
                if arm.init_from == arm.id:
                    problems.append(("an arm cannot continue from itself", ["arms", a, "init_from"]))
            base = self.bases.get(arm.base)
            if isinstance(arm, RecurrentArm) and base is not None and base.num_layers is not None:
                if arm.surgery.layers_needed() > base.num_layers:
                    problems.append(
                        (
                            f"surgery needs at least {arm.surgery.layers_needed()} layers but base "
                            f"{arm.base!r} has {base.num_layers}",
                            ["arms", a, "surgery"],
                        )
                    )
            _unique_ids(arm.stages, f"arms.{a}.stages", problems, ["arms", a, "stages"])
            for s, stage in enumerate(arm.stages):
                need("manifest", stage.manifest, manifests, ["arms", a, "stages", s, "manifest"])
                if stage.manifest in manifests and manifests[stage.manifest].role != "train":
                    problems.append(
                        (
                            f"stage trains on manifest {stage.manifest!r} whose role is "
                            f"{manifests[stage.manifest].role!r} (training needs role 'train')",
                            ["arms", a, "stages", s, "manifest"],
                        )
                    )
                for g, gate_id in enumerate(stage.gates):
                    need("gate", gate_id, gates, ["arms", a, "stages", s, "gates", g])
            for m, manifest_id in enumerate(arm.evaluation.manifests):
                need("manifest", manifest_id, manifests, ["arms", a, "evaluation", "manifests", m])
                if manifest_id in manifests and manifests[manifest_id].role == "train":
                    problems.append(
                        (f"arm evaluates on training manifest {manifest_id!r}", ["arms", a, "evaluation", "manifests", m])
                    )
        if self.purpose == "exploratory":
            for m, spec in enumerate(self.manifests):
                if spec.role == "eval":
                    problems.append(
                        (
                            f"an exploratory protocol tunes on development rows: manifest {spec.id!r} has role "
                            "'eval' (use role 'dev'; the frozen evaluation manifest belongs to the confirmatory protocol)",
                            ["manifests", m, "role"],
                        )
                    )
            if self.claims:
                problems.append(("an exploratory protocol preregisters no claims", ["claims"]))
        for g, gate in enumerate(self.gates):
            need("manifest", gate.manifest, manifests, ["gates", g, "manifest"])
            if isinstance(gate, DepthGate):
                need("arm", gate.arm, arms, ["gates", g, "arm"])
                need("arm", gate.versus, arms, ["gates", g, "versus"])
            if isinstance(gate, (InstallationGate, RetentionFloorGate)) and gate.depths is not None:
                low, high = gate.depths
                if low > high:
                    problems.append((f"depth range is inverted: [{low}, {high}]", ["gates", g, "depths"]))
                spec = manifests.get(gate.manifest)
                if isinstance(spec, RuleChasingManifest) and (low < spec.depths[0] or high > spec.depths[1]):
                    problems.append(
                        (
                            f"gate depths [{low}, {high}] fall outside manifest {gate.manifest!r} "
                            f"depths [{spec.depths[0]}, {spec.depths[1]}]",
                            ["gates", g, "depths"],
                        )
                    )
        if problems:
            raise PydanticCustomError(
                "protocol_references",
                "{summary}",
                {"summary": "; ".join(message for message, _ in problems), "problems": problems},
            )
        return self

    # -- conveniences used by the CLI and runner

    def manifest(self, manifest_id: str) -> RuleChasingManifest | ArithmeticManifest:
        for spec in self.manifests:
            if spec.id == manifest_id:
                return spec
        raise KeyError(manifest_id)

    def arm(self, arm_id: str) -> RecurrentArm | DenseArm:
        for arm in self.arms:
            if arm.id == arm_id:
                return arm
        raise KeyError(arm_id)

    def canonical(self) -> str:
        """Canonical JSON of the validated protocol (defaults filled in): what preregistration hashes."""
        return canonical_json(self.model_dump(mode="json", by_alias=True))

    @property
    def sha256(self) -> str:
        return sha256_hex(self.canonical())


def _unique_ids(items: list, where: str, problems: list, at_prefix: list | None = None) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    prefix = at_prefix if at_prefix is not None else [where]
    for index, item in enumerate(items):
        if item.id in seen:
            problems.append((f"duplicate id {item.id!r} in {where}", [*prefix, index, "id"]))
        else:
            seen[item.id] = item
    return seen


def protocol_json_schema() -> dict[str, Any]:
    """The published JSON Schema of protocols (what ``ledger schema`` prints)."""
    schema = Protocol.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://ledger.invalid/schema/protocol-v1.json"
    return schema
