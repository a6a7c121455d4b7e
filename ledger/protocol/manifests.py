"""Manifest specs: the rows a protocol asks for, one spec model per task generator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from ledger.protocol.common import DepthRange, LateOptions, StrictModel, local_path
from ledger.protocol.common import located as _located
from ledger.protocol.names import KeyName
from ledger.registry import Kind, KindUnion, Registry


@dataclass(frozen=True)
class GeneratorKind(Kind):
    """A task generator. ``reading``: "by_loop" rows are read at every loop (a chain of hops, with depths);
    "choice" rows are multiple choice, read once at loop 1 over their labels; "answer" rows are read against
    their answer at every evaluation loop (a test-recurrence sweep); "loss" rows are text, measured as
    next-token loss (nats) at every evaluation loop; "tokens" rows are shards of packed token sequences, trained
    on only."""

    reading: str = "by_loop"
    reads_files: bool = False  # the generator reads a local file (pinned by its SHA-256): built with the folder
    # "module:attribute" of (spec, rows, protocol folder) -> what a stage trains on, where not the rows themselves
    training_pool: str | None = None


GENERATORS: Registry[GeneratorKind] = Registry("task generator")

# Symbol alphabets a protocol may name; sizes are checked against depths here so a
# protocol fails at `ledger check`, not an hour into a run. The symbols themselves
# live in ledger.rows.tasks.alphabets (the generator owns them).
ALPHABET_SIZES = {"N16": 16, "N24": 24, "names": 24}


class ManifestCommon(StrictModel):
    """What every row generator's manifest declares; a generator subclasses it with its ``generator`` literal and
    its own fields (declared there, so that the schema keeps each generator's own field order)."""

    if TYPE_CHECKING:
        generator: str

        def generator_params(self) -> dict[str, Any]: ...

    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    role: Literal["train", "dev", "eval", "guardrail"] = Field(
        description="train rows may never share a (table, start) pair with eval or dev rows."
    )
    seed: int = Field(ge=0)
    split: KeyName = Field(pattern=r"^[a-z0-9]+$", description="Split name; part of every row id and row seed.")
    version: int = Field(default=1, ge=1, description="Generator version; part of every row seed.")

    def benchmark(self) -> str | None:
        """The benchmark its rows are (a paper's figure names one); None where the rows are no benchmark."""
        return None

    def choice_reading(self) -> dict[str, Any]:
        """How multiple-choice rows are read: by letter, once, at loop 1 (a choice file says otherwise)."""
        return {"scoring": "label", "permutations": 1, "loops": [1]}

    def fewest_rows(self) -> dict[str, Any]:
        """The fields that shrink this manifest to the fewest rows that still hold every depth, operation and part
        it asks for (a dry run reads those: every code path, a handful of rows)."""
        return {}

    def file_to_come(self, folder: Path | None) -> Path | None:
        """The local file this manifest reads, where the user has yet to put it and registration will pin it
        (``ledger check`` names it; ``ledger register`` needs it); None for every other manifest."""
        return None


class RuleChasingManifest(ManifestCommon, LateOptions):
    generator: Literal["rule_chasing"]
    surface: Literal["symbolic", "relay", "pointer"] = "symbolic"
    alphabet: Literal["N16", "N24", "names"] = "N16"
    depths: DepthRange
    rows_per_depth: int = Field(ge=1)
    distractors: bool = Field(default=True, description="Map every off-orbit symbol to a random symbol.")
    operation: Literal["forward", "reverse_inverse_table", "reverse_forward_table"] = Field(
        default="forward",
        description="forward: apply f; reverse_*: which symbol maps to the current one (f a permutation), with the "
        "explicit inverse table shown or the forward table alone to be searched backwards (symbolic surface only).",
    )

    _late_options = ("operation",)

    @model_validator(mode="after")
    def _depths_fit_alphabet(self) -> RuleChasingManifest:
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
        if self.operation != "forward" and self.surface != "symbolic":
            raise _located("the reverse operation is rendered on the symbolic surface only", ["operation"])
        if self.operation != "forward" and not self.distractors:
            raise _located(
                "a reverse operation's table is a whole permutation: distractors do not apply", ["distractors"]
            )
        return self

    @property
    def size(self) -> int:
        return (self.depths[1] - self.depths[0] + 1) * self.rows_per_depth

    def describe(self) -> str:
        what = "" if self.operation == "forward" else f" {self.operation}"
        return f"rule_chasing/{self.surface}{what} {self.alphabet} depth {self.depths[0]}-{self.depths[1]}"

    def fewest_rows(self) -> dict[str, Any]:
        return {"rows_per_depth": 1}

    def benchmark(self) -> str | None:
        return "rule_chasing"

    def generator_params(self) -> dict[str, Any]:
        """The generator's keyword arguments (alphabet names resolve to symbols in the rows stage)."""
        return {
            "surface": self.surface,
            "symbols": self.alphabet,
            "depth_range": tuple(self.depths),
            "rows_per_depth": self.rows_per_depth,
            "seed": self.seed,
            "split": self.split,
            "version": self.version,
            "distractors": self.distractors,
            **({"operation": self.operation} if self.operation != "forward" else {}),
        }


class ArithmeticManifest(ManifestCommon):
    generator: Literal["arithmetic"]
    per_op: int = Field(
        default=16,
        ge=1,
        le=121,  # the distinct questions of x and / (factors 2-12): more would repeat a question, or never end
        description="Rows per operation (+ - x /); at most 121, the distinct products and quotients.",
    )

    @property
    def size(self) -> int:
        return 4 * self.per_op

    def describe(self) -> str:
        return f"arithmetic {self.per_op} per operation"

    def fewest_rows(self) -> dict[str, Any]:
        return {"per_op": 1}

    def benchmark(self) -> str | None:
        return "arithmetic"

    def generator_params(self) -> dict[str, Any]:
        return {"seed": self.seed, "split": self.split, "per_op": self.per_op, "version": self.version}


GENERATORS.add(
    GeneratorKind(
        "rule_chasing",
        RuleChasingManifest,
        "ledger.rows.tasks.rule_chasing:generate_rule_chasing",
        "k-hop lookups in a permutation table (symbolic, relay, pointer surfaces)",
    )
)
GENERATORS.add(
    GeneratorKind(
        "arithmetic",
        ArithmeticManifest,
        "ledger.rows.tasks.arithmetic:generate_arithmetic",
        "the Tier-1 four-way multiple-choice guardrail",
        reading="choice",
    )
)


class ChoiceFileManifest(ManifestCommon, LateOptions):
    """Multiple-choice rows from a local JSONL file in the ARC schema (``question``, ``choices`` {text, label},
    ``answerKey``; AI2's nesting under ``question.stem`` too), pinned by the file's SHA-256, or (a public
    benchmark, ``ids``) by its questions' ids and, at registration, its rows."""

    generator: Literal["choice_file"]
    path: str = Field(description="The JSONL file, relative to the protocol file (or absolute).")
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the file's bytes: another file is refused. Optional with `ids`.",
    )
    ids: Literal["arc_easy", "arc_challenge"] | None = Field(
        default=None,
        description="A public benchmark whose questions the file must hold, each once, by the dataset's ids "
        "(shipped with ledger: the split-bridge paper's release, every split); the rows are then pinned at "
        "registration, and a file whose rows differ later is refused.",
    )
    limit: int | None = Field(default=None, ge=1, description="Only the first this many records.")
    scoring: Literal["label", "loglik"] = Field(
        default="label",
        description="label: the answer letter's score after the question and its lettered options (the shared "
        "reader); loglik: each option's text scored as a continuation of the question (lm-eval's ARC reading).",
    )
    permutations: Literal[1, 4] = Field(
        default=1,
        description="4: the paper's cyclic-label reading: the options rotated over the letters (every cyclic "
        "rotation: 4 for its 4-option rows, n for a row of n), each option's score averaged over the rotations.",
    )
    loops: list[int] = Field(default=[1], min_length=1, description="Read at these loops (recurrent arms).")

    _late_options = ("ids",)

    @model_validator(mode="after")
    def _reading(self) -> ChoiceFileManifest:
        if self.sha256 is None and self.ids is None:
            raise _located("a choice file is pinned: give its sha256, or the benchmark whose ids it holds (ids)", [])
        if self.permutations == 4 and self.scoring != "label":
            raise _located("permutations: 4 rotates the options over their letters: it needs scoring: label", [])
        if sorted(set(self.loops)) != self.loops or self.loops[0] < 1:
            raise _located("loops: increasing loop counts of 1 or more", ["loops"])
        return self

    def choice_reading(self) -> dict[str, Any]:
        return {"scoring": self.scoring, "permutations": self.permutations, "loops": list(self.loops)}

    @property
    def size(self) -> int:
        return self.limit or 0

    def describe(self) -> str:
        reading = f"{self.scoring}" + (", 4 cyclic permutations" if self.permutations == 4 else "")
        return f"choice file {self.path} ({reading})"

    def fewest_rows(self) -> dict[str, Any]:
        return {"limit": min(self.limit or 4, 4)}

    def file_to_come(self, folder: Path | None) -> Path | None:
        if self.sha256 is not None or self.ids is None:
            return None
        file = local_path(self.path, folder)
        return None if file.is_file() else file.resolve()

    def benchmark(self) -> str | None:
        return self.ids

    def generator_params(self) -> dict[str, Any]:
        params = {"path": self.path, "sha256": self.sha256, "limit": self.limit, "split": self.split}
        return params | ({"ids": self.ids} if self.ids else {})


GENERATORS.add(
    GeneratorKind(
        "choice_file",
        ChoiceFileManifest,
        "ledger.rows.tasks.choice_file:generate_choice_file",
        "multiple-choice rows from a local ARC-schema JSONL file (label or log-likelihood reading)",
        reading="choice",
        reads_files=True,
    )
)


class TextManifest(ManifestCommon):
    """Documents for next-token training and validation loss (design M); no answer to read."""

    generator: Literal["text"]
    source: Literal["generated", "word_problems", "python_docs"] = Field(
        description="generated: sentences in the tiny bases' words; word_problems: worked word problems; "
        "python_docs: CPython's own reference manual (pydoc_data.topics), pinned by the manifest's hash."
    )
    part: Literal["train", "dev", "heldout"] = Field(
        description="Held-out documents are chosen by their text's hash; dev (version 2) is the next band of it, "
        "for tuning on rows neither the train nor the heldout part holds."
    )
    documents: int = Field(ge=1)
    words: int = Field(default=64, ge=8, le=4096, description="About this many words per document.")
    heldout_fraction: float = Field(default=0.1, gt=0, lt=1)
    answer_format: Literal["digits", "words"] = Field(
        default="digits", description="source word_problems: answers as digits or as number words."
    )

    @model_validator(mode="after")
    def _dev_needs_version_2(self) -> TextManifest:
        if self.part == "dev" and self.version < 2:
            raise ValueError("part dev needs version: 2 (version 1 of the text generator has no dev band)")
        if self.part == "dev" and self.heldout_fraction >= 0.5:
            raise ValueError("part dev takes the band [f, 2f) of the text hash: heldout_fraction must be below 0.5")
        return self

    @property
    def size(self) -> int:
        return self.documents

    def describe(self) -> str:
        return f"text/{self.source} {self.part} {self.documents} x ~{self.words} words"

    def fewest_rows(self) -> dict[str, Any]:
        return {"documents": 2}  # a paired loss test needs two documents

    def generator_params(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "part": self.part,
            "documents": self.documents,
            "words": self.words,
            "seed": self.seed,
            "split": self.split,
            "heldout_fraction": self.heldout_fraction,
            "answer_format": self.answer_format,
            "version": self.version,
        }


class WordProblemManifest(ManifestCommon):
    """Arithmetic word problems (the GSM8K-like task of design M), answered by one number."""

    generator: Literal["word_problems"]
    steps: DepthRange = Field(description="[low, high]: transfers per problem (the row's depth).")
    rows_per_step: int = Field(ge=1)
    answer_max: int = Field(default=9, ge=1, le=99, description="Answers lie in 0..answer_max (one token each).")
    answer_format: Literal["digits", "words"] = Field(
        default="digits",
        description="digits, or English number words (for tokenizers that split ' 5' into a space and a digit).",
    )

    @model_validator(mode="after")
    def _steps_ordered(self) -> WordProblemManifest:
        low, high = self.steps
        if not 1 <= low <= high:
            raise _located(f"steps needs 1 <= low <= high, got [{low}, {high}]", ["steps"])
        if self.answer_format == "words" and self.answer_max > 20:
            raise _located("answers as words go up to twenty", ["answer_max"])
        return self

    @property
    def size(self) -> int:
        return (self.steps[1] - self.steps[0] + 1) * self.rows_per_step

    def describe(self) -> str:
        return f"word problems, {self.steps[0]}-{self.steps[1]} transfers, answers 0-{self.answer_max}"

    def fewest_rows(self) -> dict[str, Any]:
        return {"rows_per_step": 1}

    def benchmark(self) -> str | None:
        return "word_problems"

    def generator_params(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "split": self.split,
            "steps": tuple(self.steps),
            "rows_per_step": self.rows_per_step,
            "answer_max": self.answer_max,
            "answer_format": self.answer_format,
            "version": self.version,
        }


GENERATORS.add(
    GeneratorKind(
        "text",
        TextManifest,
        "ledger.rows.tasks.text:generate_text",
        "documents for next-token training and validation loss (nats per token at each test recurrence)",
        reading="loss",
    )
)
GENERATORS.add(
    GeneratorKind(
        "word_problems",
        WordProblemManifest,
        "ledger.rows.tasks.word_problems:generate_word_problems",
        "arithmetic word problems: the answer read at every test recurrence",
        reading="answer",
    )
)


class TokenCorpusManifest(ManifestCommon):
    """A pre-tokenized, packed corpus of parquet shards (the seed's format: one sequence of ``sequence_length``
    token ids per record); its rows are the shards, pinned at registration by their SHA-256, and training reads
    their sequences (``ledger.rows.tasks.token_corpus``)."""

    generator: Literal["token_corpus"]
    path: str = Field(description="The folder of *.parquet shards (or one shard), relative to the protocol file.")
    sequence_length: int = Field(
        ge=2, le=8193, description="Tokens per packed sequence (the seed's: max_length + 1 = 1025)."
    )
    column: str = Field(default="input_ids", description="The column that holds each sequence's token ids.")
    shards: int | None = Field(default=None, ge=1, description="Only the first this many shards, in name order.")

    @model_validator(mode="after")
    def _trained_only(self) -> TokenCorpusManifest:
        if self.role != "train":
            raise _located("a token corpus is training data: role train", ["role"])
        return self

    @property
    def size(self) -> int:
        return self.shards or 0

    def describe(self) -> str:
        return f"token corpus {self.path} ({self.sequence_length}-token sequences)"

    def fewest_rows(self) -> dict[str, Any]:
        return {"shards": 1}

    def file_to_come(self, folder: Path | None) -> Path | None:
        where = local_path(self.path, folder)
        return None if where.exists() else where.resolve()

    def generator_params(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "split": self.split,
            "sequence_length": self.sequence_length,
            "column": self.column,
            "shards": self.shards,
        }


GENERATORS.add(
    GeneratorKind(
        "token_corpus",
        TokenCorpusManifest,
        "ledger.rows.tasks.token_corpus:generate_token_corpus",
        "a pre-tokenized, packed corpus of parquet shards (rows: the shards; training reads their sequences)",
        reading="tokens",
        reads_files=True,
        training_pool="ledger.rows.tasks.token_corpus:training_sequences",
    )
)
# Open: a generator registered by a plugin or a test (``GENERATORS.add``) is validated, serialised and published
# in the JSON schema like the built-in ones (``KindUnion``; the protocol is rebuilt when one is added).
ManifestSpec = Annotated[ManifestCommon, KindUnion(GENERATORS, "generator")]
