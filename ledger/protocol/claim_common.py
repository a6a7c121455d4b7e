"""What every claim shares: the statistic registry (``STATISTICS``), the row filter and the common fields.

Split from ``claims.py`` so that a statistic declared in a module of its own (``depth_choice.py``) builds on
the same base without an import cycle; ``claims.py`` re-exports all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from ledger.protocol.common import DepthRange, StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.names import KeyName, KeyNameMap, key_name
from ledger.registry import Kind, Registry


@dataclass(frozen=True)
class StatisticKind(Kind):
    """A claim statistic. ``reads``: the evidence it is computed from: "rows" (per-row outcomes of its arms at
    the final reading, or at the claim's ``loop``), "per_depth" (per-depth counts or rows; needs depths),
    "gate" (a recorded gate result), "losses" (per-document nats at each arm's ``loops``) or "curve" (every
    recorded checkpoint of both arms, with its training FLOPs)."""

    reads: str = "rows"
    tested: bool = False  # it yields a p-value, so it may be a member of a multiplicity family
    # Power at registration: "module:attribute" of its rule, ``rule(claim, PowerInputs) -> str | None`` (why the
    # claim's rows cannot support it, or None), or, where no outcome of the rows can make the claim
    # undecidable, ``no_power_check`` saying why. Every statistic declares exactly one of the two.
    power: str = ""
    no_power_check: str = ""
    compares: bool = False  # it compares its arms (or one arm read two ways): each must show it learnt its task
    # How a supported outcome is decided, for claim rules 2 (``ledger.judge.claim_rules``): "test" (a p-value),
    # "bound" (a one-sided 95% bound against a threshold), "run_level" (one training run's quantity: judged over
    # training seeds), "recorded" (a gate's verdict) or "descriptive" (none of these: exploratory only).
    decided_by: str = ""

    def decision(self) -> str:
        return self.decided_by or ("test" if self.tested else "descriptive")

    def __post_init__(self) -> None:
        if bool(self.power) == bool(self.no_power_check):
            raise TypeError(
                f"statistic {self.name!r} declares {'both' if self.power else 'neither'} of power and no_power_check: "
                'give its power rule ("module:attribute") or say why it needs none'
            )


STATISTICS: Registry[StatisticKind] = Registry("claim statistic")


class RowFilter(StrictModel):
    depths: DepthRange | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RowFilter:
        if self.depths is not None and self.depths[0] > self.depths[1]:
            raise _located(f"depth range is inverted: {list(self.depths)}", ["depths"])
        return self


class GatePrecondition(StrictModel):
    """A recorded gate verdict a claim needs: ``gate`` passed for ``arm``."""

    gate: KeyName
    arm: KeyName

    def describe(self) -> str:
        return f"gate {self.gate} for {self.arm}"


def _one_kind_of_precondition(value: Any) -> Any:
    """A string is a claim id, a mapping a gate: each validated as its own kind alone, so that a bad one is one
    error (a plain union reports each member's, "Input should be a valid string" beside the real one)."""
    if isinstance(value, str):
        return key_name(value)
    if isinstance(value, dict):
        return GatePrecondition.model_validate(value)
    return value


# A precondition: another claim of the same file (by id) that must be supported, or a gate that must have passed.
Precondition = Annotated[str | GatePrecondition, BeforeValidator(_one_kind_of_precondition)]


def without_unset(data: dict[str, Any], added_later: dict[str, Any]) -> dict[str, Any]:
    """A serialised spec without the fields added after specs were first registered that hold their "not set"
    default: a spec that does not use them keeps the canonical form and hash it was registered with."""
    for name, default in added_later.items():
        if name in data and data[name] == default:
            del data[name]
    return data


class PaperFinding(StrictModel):
    """The paper's finding a claim replicates: the outcome the claim has when the finding replicates (a paper's
    negative finding is a claim expected refuted, e.g. "the halting head picks the right depth for half the rows")
    and the paper's figure in words."""

    # Fields added after findings were first registered: written out only when set (as ``ClaimSpec``'s).
    ADDED_LATER: ClassVar[dict[str, Any]] = {"statistic": None, "benchmark": None}

    @model_serializer(mode="wrap")
    def _omit_unset_later_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), self.ADDED_LATER)

    outcome: Literal["supported", "refuted"]
    figure: str = Field(min_length=1, description='The paper\'s figure, e.g. "relay 86.0% (1,536 rows)".')
    where: str | None = Field(default=None, description="Where the paper reports it (section, table, figure).")
    statistic: str | None = Field(
        default=None,
        min_length=1,
        description="The statistic the paper's figure is (a claim statistic's name: paired_exact, accuracy, "
        "frontier_ratio, ...): registration refuses a claim of another statistic carrying it.",
    )
    benchmark: str | None = Field(
        default=None,
        min_length=1,
        description="The benchmark the paper's figure is on (rule_chasing, arithmetic, arc_easy, arc_challenge, "
        "gsm8k, ...): registration refuses it on a claim whose manifest is another benchmark.",
    )


class ClaimSpec(StrictModel):
    # Fields added after claims were first registered, with the default that means "not set": written out
    # only when set, so that every claim registered before keeps its canonical form and hash.
    ADDED_LATER: ClassVar[dict[str, Any]] = {
        "audited_outcome": "supported",
        "requires": [],
        "paper": None,
        "exploratory": False,
        "by_construction": None,
    }

    @model_serializer(mode="wrap")
    def _omit_unset_later_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), self.ADDED_LATER)

    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    statement: str
    manifest: KeyName
    rows: RowFilter = Field(default_factory=RowFilter)
    family: KeyName | None = Field(
        default=None, description="Multiplicity family; corrected by the file's `correction`."
    )
    if TYPE_CHECKING:
        statistic: str  # each statistic's own tag, ``Literal["..."]``, declared by its subclass (the discriminator)
    audited_outcome: Literal["supported", "refuted"] = Field(
        default="supported",
        description="External audits only: the outcome the audited paper concluded (e.g. refuted for a comparison "
        "it found no difference in); verify expects it on a claim with no recorded outcome.",
    )
    reported: KeyNameMap[float] = Field(
        default_factory=dict,
        description=(
            "Figures a paper reported for this claim; the re-derived figure must agree to the "
            "significant digits written (e.g. p_value: 5.72e-257, helped: 1048)."
        ),
    )
    requires: list[Precondition] = Field(
        default_factory=list,
        description="Preconditions: claims of this file (by id) that must be supported, or gates ({gate, arm}) "
        "that must have passed, for this claim to be judged. While one is not met the claim is unverifiable, never "
        "supported: e.g. 'C is near-perfect inside its support' before 'C falls beyond it'.",
    )
    paper: PaperFinding | None = Field(
        default=None,
        description="The paper's finding this claim replicates (its outcome and figure): the summary, the report "
        "and verify count the claims that replicate it.",
    )

    exploratory: bool = Field(
        default=False,
        description="Exploratory: judged and reported, never counted as support, in no multiplicity correction "
        "(claim rules 2: every claim with neither a test nor a bound, and every run-level quantity on one training "
        "run, is exploratory).",
    )
    by_construction: str | None = Field(
        default=None,
        min_length=1,
        description='Why this claim holds by construction (e.g. "E\'s loop 1 is the base, bit for bit"): reported, '
        "never tallied.",
    )

    def holds_without_acquisition(self) -> bool:
        """Whether this claim would be supported by an arm that learnt nothing (a "stays below" or "falls beyond"
        claim, a tie between two arms). Such a claim must name an acquisition precondition (``requires``), checked
        at registration (``ledger.judge.acquisition``)."""
        return False

    def claim_preconditions(self) -> list[str]:
        return [required for required in self.requires if isinstance(required, str)]

    def gate_preconditions(self) -> list[GatePrecondition]:
        return [required for required in self.requires if isinstance(required, GatePrecondition)]
