"""The protocol schema: what an experiment promises before it runs.

A protocol is a YAML file validated by these Pydantic v2 models. Validation is strict:
an unknown key is an error that names the key and the closest valid one, every
reference (to a base, manifest, arm or gate) must resolve, and cross-field rules
(depth ranges, alphabet sizes, surgery indices, stage objectives) are checked before
anything runs. ``Protocol.model_json_schema()`` is the published schema
(``ledger schema``, ``protocols/schema.json``). Loading a file with located errors
(file, YAML line, field path) is ``ledger.protocol.loader.load_protocol``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import Field, PrivateAttr, SerializerFunctionWrapHandler, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from ledger.canonical import canonical_json, sha256_hex

# The built-in arm kinds register themselves, in the schema's order.
from ledger.protocol import recurrent_arm  # noqa: F401

# isort: split
from ledger.protocol import dense_arm  # noqa: F401

# isort: split
from ledger.protocol.arms import ARM_KINDS, BRIDGES, BUDGETS, Arm, ArmSpec, Stage
from ledger.protocol.bases import BaseModelSpec
from ledger.protocol.common import SCHEMA_VERSION, StrictModel, located
from ledger.protocol.gates import GATE_KINDS, Gate
from ledger.protocol.manifests import GENERATORS, ManifestSpec
from ledger.protocol.names import KeyName, KeyNameMap
from ledger.protocol.training import RECURRENCES


class Hypothesis(StrictModel):
    id: KeyName
    statement: str


# ----------------------------------------------------------------------------- protocol


#: Fields that say how to execute a protocol, not what it measures: not hashed (see ``Protocol.device``).
EXECUTION_FIELDS = {"device"}


class Protocol(StrictModel):
    """A preregistrable experiment: bases, manifests, arms, gates and claims."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
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
    bases: KeyNameMap[BaseModelSpec] = Field(min_length=1)
    manifests: list[ManifestSpec] = Field(min_length=1)
    arms: list[Arm] = Field(min_length=1)
    gates: list[Gate] = Field(default_factory=list)
    claims: list[str] = Field(default_factory=list, description="Claim files, relative to the protocol file.")
    _folder: Path | None = PrivateAttr(default=None)  # the protocol file's folder (set by load_protocol)
    device: str = Field(
        default="auto",
        pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$",
        description="Where the arms run: auto (the first CUDA GPU if there is one, else the CPU), cpu, cuda or "
        "cuda:N; `ledger run --device` overrides it. Where an experiment runs is not what it measures: the device "
        "is left out of the canonical form, so the preregistration hash is the same on every machine.",
    )

    @model_validator(mode="before")
    @classmethod
    def _replicate_seeded_arms(cls, data: Any) -> Any:
        """An arm written with ``seeds: [s1, s2, ...]`` is that many arms, ``ID.sS`` each with its ``replicate``
        (the arm and seed): each trains with its own draws (its id is part of every training seed) and is its own
        lineage. An arm continuing from a replicated arm is replicated over the same seeds, each from its own."""
        if not isinstance(data, dict) or not isinstance(data.get("arms"), list):
            return data
        arms = data["arms"]
        seeded = {arm.get("id"): arm.get("seeds") for arm in arms if isinstance(arm, dict) and "seeds" in arm}
        if not seeded:
            return data
        expanded: list[Any] = []
        for index, arm in enumerate(arms):
            source = arm.get("init_from") if isinstance(arm, dict) else None
            if not isinstance(arm, dict) or "seeds" not in arm:
                if source in seeded:
                    raise located(
                        f"continues from arm {source!r}, which is replicated over seeds {seeded[source]}: give this "
                        "arm the same `seeds`, so that each replicate continues from its own",
                        ["arms", index, "init_from"],
                    )
                expanded.append(arm)
                continue
            seeds = arm["seeds"]
            if (
                not isinstance(seeds, list)
                or len(seeds) < 2
                or not all(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in seeds)
                or len(set(seeds)) != len(seeds)
            ):
                raise located("seeds: two or more distinct training seeds (integers >= 0)", ["arms", index, "seeds"])
            if source in seeded and seeded[source] != seeds:
                raise located(
                    f"seeds {seeds} differ from those of arm {source!r} it continues from ({seeded[source]})",
                    ["arms", index, "seeds"],
                )
            for seed in seeds:
                replicate = {key: value for key, value in arm.items() if key != "seeds"}
                replicate["id"] = f"{arm.get('id')}.s{seed}"
                replicate["replicate"] = {"of": arm.get("id"), "seed": seed}
                if source in seeded:
                    replicate["init_from"] = f"{source}.s{seed}"
                expanded.append(replicate)
        return {**data, "arms": expanded}

    @model_serializer(mode="wrap")
    def _omit_unreplicated(self, handler: SerializerFunctionWrapHandler) -> Any:
        """An arm that is no replicate serialises (and hashes) as it did before seeds existed."""
        data = handler(self)
        if isinstance(data, dict):
            for arm in data.get("arms") or []:
                for name in ("replicate", "seeds"):
                    if isinstance(arm, dict) and arm.get(name, 0) is None:
                        del arm[name]
        return data

    def replicates_of(self, name: str) -> list[ArmSpec]:
        """The replicates of an arm written with ``seeds`` (by the name it was written with), in seed order as
        written; [] for any other name."""
        return [arm for arm in self.arms if arm.replicate is not None and arm.replicate.of == name]

    @model_validator(mode="after")
    def _references_resolve(self) -> Protocol:
        problems: list[tuple[str, list[str | int]]] = []
        manifests = _unique_ids(self.manifests, "manifests", problems)
        arms = _unique_ids(self.arms, "arms", problems)
        gates = _unique_ids(self.gates, "gates", problems)

        replicated = {arm.replicate.of for arm in self.arms if arm.replicate is not None}

        def need(kind: str, value: str, known: dict, at: list[str | int]) -> None:
            if kind == "arm" and value in replicated:
                problems.append((f"arm {value!r} is replicated over seeds: name one replicate ({value}.sSEED)", at))
            elif value not in known:
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
            if base is not None and base.num_layers is not None and arm.layers_needed() > base.num_layers:
                problems.append(
                    (
                        f"surgery needs at least {arm.layers_needed()} layers but base "
                        f"{arm.base!r} has {base.num_layers}",
                        ["arms", a, "surgery"],
                    )
                )
            _unique_ids(arm.stages, f"arms.{a}.stages", problems, ["arms", a, "stages"])
            for s, stage in enumerate(arm.stages):
                key = "mixture" if stage.mixture else "manifest"
                for manifest_id in stage.manifests():
                    where: list[str | int] = ["arms", a, "stages", s, key, *([manifest_id] if stage.mixture else [])]
                    need("manifest", manifest_id, manifests, where)
                    if manifest_id in manifests and manifests[manifest_id].role != "train":
                        problems.append(
                            (
                                f"stage trains on manifest {manifest_id!r} whose role is "
                                f"{manifests[manifest_id].role!r} (training needs role 'train')",
                                where,
                            )
                        )
                for g, gate_id in enumerate(stage.gates):
                    need("gate", gate_id, gates, ["arms", a, "stages", s, "gates", g])
                until = stage.until.gate if stage.until is not None else None
                if until in gates and gates[until].manifest in manifests:
                    if manifests[gates[until].manifest].role == "eval":
                        problems.append(
                            (
                                f"the stage trains until gate {until!r} passes, which reads evaluation rows "
                                f"({gates[until].manifest!r}): a stopping rule reads development rows",
                                ["arms", a, "stages", s, "until", "gate"],
                            )
                        )
            for m, manifest_id in enumerate(arm.evaluation.manifests):
                need("manifest", manifest_id, manifests, ["arms", a, "evaluation", "manifests", m])
                if manifest_id in manifests and manifests[manifest_id].role == "train":
                    problems.append(
                        (
                            f"arm evaluates on training manifest {manifest_id!r}",
                            ["arms", a, "evaluation", "manifests", m],
                        )
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
        gate_list: list[Any] = list(self.gates)  # each kind carries its own references
        for g, gate in enumerate(gate_list):
            need("manifest", gate.manifest, manifests, ["gates", g, "manifest"])
            if GATE_KINDS[gate.kind].after == "arms":  # a comparison of two arms
                need("arm", gate.arm, arms, ["gates", g, "arm"])
                need("arm", gate.versus, arms, ["gates", g, "versus"])
            gate_depths = getattr(gate, "depths", None)
            if gate_depths is not None:
                low, high = gate_depths
                if low > high:
                    problems.append((f"depth range is inverted: [{low}, {high}]", ["gates", g, "depths"]))
                gate_manifest: Any = manifests.get(gate.manifest)  # None: reported missing above
                if (
                    gate_manifest is not None
                    and GENERATORS[gate_manifest.generator].reading == "by_loop"
                    and (low < gate_manifest.depths[0] or high > gate_manifest.depths[1])
                ):
                    problems.append(
                        (
                            f"gate depths [{low}, {high}] fall outside manifest {gate.manifest!r} "
                            f"depths [{gate_manifest.depths[0]}, {gate_manifest.depths[1]}]",
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

    def manifest(self, manifest_id: str) -> ManifestSpec:
        for spec in self.manifests:
            if spec.id == manifest_id:
                return spec
        raise KeyError(manifest_id)

    def arm(self, arm_id: str) -> ArmSpec:
        """The arm of this id; for the name of an arm written with ``seeds``, its first replicate (the replicates
        share every setting but their seed: what a check asks of the arm, any of them answers)."""
        for arm in self.arms:
            if arm.id == arm_id:
                return arm
        replicates = self.replicates_of(arm_id)
        if replicates:
            return replicates[0]
        raise KeyError(arm_id)

    @property
    def folder(self) -> Path | None:
        """The folder of the file this protocol was loaded from (what its relative paths start from)."""
        return self._folder

    def located_at(self, folder: Path) -> Protocol:
        self._folder = folder
        return self

    def canonical(self) -> str:
        """Canonical JSON of the validated protocol (defaults filled in): what preregistration hashes."""
        return canonical_json(self.model_dump(mode="json", by_alias=True, exclude=EXECUTION_FIELDS))

    @property
    def sha256(self) -> str:
        return sha256_hex(self.canonical())


# A kind registered later (a plugin, a test) joins the union of a protocol's arms, gates or manifests.
def _rebuild() -> None:
    Protocol.model_rebuild(force=True)


def _rebuild_arms() -> None:
    """A bridge or budget joins the arms that hold one: each arm kind's spec, then the protocol, rebuilt."""
    for spec in ARM_KINDS.specs():  # each a pydantic model
        cast(Any, spec).model_rebuild(force=True)
    _rebuild()


def _rebuild_stages() -> None:
    """A recurrence schedule joins the stages that hold one, then the arms and the protocol."""
    Stage.model_rebuild(force=True)
    _rebuild_arms()


ARM_KINDS.on_change(_rebuild)
GATE_KINDS.on_change(_rebuild)
GENERATORS.on_change(_rebuild)
BRIDGES.on_change(_rebuild_arms)
BUDGETS.on_change(_rebuild_arms)
RECURRENCES.on_change(_rebuild_stages)


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
