"""A pretraining recipe (`bases/*/recipe.yaml`): the model shape, the curriculum, the corpus mixture,
the Tier-1 exclusion and `init_from` (continue or grow an earlier base)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ledger.protocol.names import KeyName
from ledger.rows.tasks.alphabets import N24

ANSWER_SUFFIX = "\nAnswer:"


# -- the recipe ---------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(_Strict):
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    intermediate: int = Field(gt=0)
    max_position_embeddings: int = Field(default=1024, gt=0)
    rope_theta: float = 10000.0

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be a multiple of heads, and heads a multiple of kv_heads")
        return self


Kind = Literal[
    "lookup",
    "start",
    "repeat",
    "copy",
    "arithmetic",
    "choice",
    "relay",
    "pointer",
    "reverse_inverse",
    "reverse_forward",
    "text",
    "tier1",
    "relay_lookup",
    "pointer_lookup",
]
KINDS: tuple[Kind, ...] = get_args(Kind)  # the corpus kinds, in the Literal's order
# the skills a base may be taught beyond the symbolic lookup, each measured on held-out single-hop rows (tier1: on
# the pool's own rows): what a protocol built on the base extends or guards
# (relay and pointer rows without distractors list two rules, so their answer is the only other name: no lookup;
# relay_lookup and pointer_lookup give every name a rule, and only a lookup answers them)
SKILLS: tuple[Kind, ...] = (
    "relay",
    "pointer",
    "reverse_inverse",
    "reverse_forward",
    "tier1",
    "relay_lookup",
    "pointer_lookup",
)


class CurriculumStage(_Strict):
    """From ``start_step`` on, lookup tables have up to ``max_symbols`` symbols (and this mixture, if given; and
    the reverse kinds' table sizes ``reverse_symbols``, if given, in place of the recipe's)."""

    start_step: int = Field(ge=0)
    max_symbols: int = Field(ge=2, le=len(N24))
    mixture: dict[Kind, float] | None = None
    reverse_symbols: tuple[int, int] | None = None


class Tier1Exclusion(_Strict):
    seed: int
    split: str = "tier1"
    per_op: int = Field(default=16, ge=1)


class InitFrom(_Strict):
    """Continue from an earlier base instead of a random start (continued pretraining, growth).

    ``path`` is a base folder (relative paths resolve against the recipe's folder); its
    ``model.safetensors`` must hash to ``sha256``. ``layers`` maps each layer of the new
    model to the source layer that initialises it (``[0, 1, 1, 2, 2, 3]`` grows a 4-layer
    base to 6 layers); without it the new model has the source's layers one to one.
    Embeddings and the final norm are copied; the shapes must otherwise match.
    ``identity_layers`` (new-model indices) start with their attention output and MLP
    down projections at zero, so each adds nothing to the residual stream: a grown
    model computes exactly the source at step 0 (block expansion, as in LLaMA Pro).
    """

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    layers: list[int] | None = None
    identity_layers: list[int] = []


class PretrainRecipe(_Strict):
    name: KeyName  # it names the base's folder and record: one visible name, one thing
    seed: int
    model: ModelShape
    init_from: InitFrom | None = None
    steps: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    lr: float = Field(gt=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    warmup: int = Field(default=0, ge=0)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = Field(default=0.01, ge=0)
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = Field(default=1.0, gt=0)
    max_seq_len: int = Field(default=192, gt=0)
    mixture: dict[Kind, float]
    curriculum: list[CurriculumStage]
    # share of lookup examples at the stage's maximum size (the rest: smaller sizes seen earlier)
    top_share: float = Field(default=0.6, ge=0, le=1)
    copy_length: tuple[int, int] = (2, 8)
    # questions per lookup table (uniform in the range): the first is the protocol's prompt
    lookup_questions: tuple[int, int] = (1, 1)
    # repeated table lines without their value ("M ->" -> " J") after the questions (uniform in the range)
    lookup_recalls: tuple[int, int] = (0, 0)
    # the reverse kinds' training tables: None renders them as the protocols do (N16, one question); a range draws
    # each table's size uniformly in it (a random subset of N16, so small tables teach the search first) and asks
    # ``reverse_questions`` starts of the same table (more supervised answers per table, as ``lookup_questions``)
    reverse_symbols: tuple[int, int] | None = None
    reverse_questions: tuple[int, int] = (1, 1)
    # repeat: a random sequence of this many tokens (letters and numerals 0-99), then the same sequence again
    repeat_length: tuple[int, int] = (8, 24)
    copy_numerals: int = Field(default=30, ge=0)  # copy tokens include the numerals 0..copy_numerals
    # the tokenizer knows the numerals 0..vocab_numerals-1: a small output layer forms
    # induction heads far sooner (measured: 1,128 tokens vs 126 slowed it several-fold)
    vocab_numerals: int = Field(default=1000, ge=100)
    arithmetic_max: int = Field(default=99, ge=1)
    exclude_tier1: list[Tier1Exclusion] = []
    # tier1: Tier-1 rows taught verbatim, as a base knows facts (their questions must not be excluded above): the
    # guardrail built on the same rows then measures whether a retrofit keeps what its base knew
    tier1_pool: list[Tier1Exclusion] = []
    eval_every: int = Field(default=250, gt=0)
    eval_rows: int = Field(default=64, gt=0)
    eval_sizes: list[int] = [4, 8, 16, 24]
    log_every: int = Field(default=25, gt=0)
    threads: int = Field(default=1, gt=0)

    def reverse_sizes_at(self, stage: int) -> tuple[int, int] | None:
        """The reverse kinds' table sizes at curriculum stage ``stage`` (None: as the protocols render them)."""
        return self.curriculum[stage].reverse_symbols or self.reverse_symbols

    def taught_kinds(self) -> set[str]:
        """The corpus kinds with a positive weight in the mixture or in any curriculum stage's."""
        mixtures = [self.mixture] + [stage.mixture or {} for stage in self.curriculum]
        return {kind for mixture in mixtures for kind, weight in mixture.items() if weight > 0}

    @model_validator(mode="after")
    def _check(self):
        for mixture in [self.mixture] + [stage.mixture for stage in self.curriculum if stage.mixture is not None]:
            if not mixture or any(w < 0 for w in mixture.values()) or sum(mixture.values()) <= 0:
                raise ValueError("mixture weights must be non-negative with a positive sum")
        if not self.curriculum or self.curriculum[0].start_step != 0:
            raise ValueError("the curriculum must start at step 0")
        starts = [stage.start_step for stage in self.curriculum]
        if starts != sorted(set(starts)):
            raise ValueError("curriculum start steps must increase")
        if any(not 2 <= size <= len(N24) for size in self.eval_sizes):
            raise ValueError(f"eval sizes must lie in 2..{len(N24)}")
        if not 1 <= self.lookup_questions[0] <= self.lookup_questions[1]:
            raise ValueError("lookup_questions must be (min, max) with 1 <= min <= max")
        for sizes in [self.reverse_symbols] + [stage.reverse_symbols for stage in self.curriculum]:
            if sizes is not None and not 2 <= sizes[0] <= sizes[1] <= 16:
                raise ValueError("reverse_symbols must be (min, max) with 2 <= min <= max <= 16")
        if not 1 <= self.reverse_questions[0] <= self.reverse_questions[1]:
            raise ValueError("reverse_questions must be (min, max) with 1 <= min <= max")
        if not 0 <= self.lookup_recalls[0] <= self.lookup_recalls[1]:
            raise ValueError("lookup_recalls must be (min, max) with 0 <= min <= max")
        if "tier1" in self.taught_kinds() and not self.tier1_pool:
            raise ValueError("the tier1 kind teaches the rows of tier1_pool: name them")
        if not 1 <= self.copy_length[0] <= self.copy_length[1]:
            raise ValueError("copy_length must be (min, max) with 1 <= min <= max")
        if self.init_from is not None and self.init_from.layers is not None:
            if len(self.init_from.layers) != self.model.layers:
                raise ValueError(
                    f"init_from.layers names {len(self.init_from.layers)} source layers for a model of {self.model.layers}"
                )
            if any(index < 0 for index in self.init_from.layers):
                raise ValueError("init_from.layers must be source layer indices (>= 0)")
        if self.init_from is not None and any(
            not 0 <= index < self.model.layers for index in self.init_from.identity_layers
        ):
            raise ValueError(
                f"init_from.identity_layers must be layer indices of the new model (0..{self.model.layers - 1})"
            )
        return self


def load_recipe(path: str | os.PathLike) -> PretrainRecipe:
    """A recipe file, validated strictly; errors name the file, line and field (``ProtocolError``)."""
    from ledger.protocol.loader import load_model_file

    return load_model_file(Path(path), PretrainRecipe, "pretraining recipe")


# -- the corpus ---------------------------------------------------------------------
