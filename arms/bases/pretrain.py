"""Pretraining a tiny Qwen2 base from scratch on a local synthetic corpus (issue #6).

``ledger pretrain-base CONFIG`` (wired in ``ledger/cli/main.py``) calls
:func:`pretrain_base`. The recipe (``bases/tiny-base.recipe.yaml``) fixes the model
shape, the seed, the optimiser and schedule, the corpus mixture and the alphabet-size
curriculum; :func:`synthetic_corpus` turns (recipe, step) into that step's batch of
examples, deterministically (every example's RNG is derived by SHA-256 from
``(seed, step, index)``), so a run is reproducible batch for batch.

The corpus (every example is a ``(prompt, answer)`` pair; the text is
``prompt + "\\nAnswer:" + answer``):

- ``lookup``: a SINGLE-HOP question in the exact symbolic surface of the protocol
  ("You are given a finite function f as a shuffled lookup table. ... Apply f exactly
  1 times. What is the final value?") over a random subset of N24 whose size follows
  the curriculum (4 -> 8 -> 16 -> 24 symbols). Answer " X" = f(start). A question with
  d > 1 is NEVER paired with its d-step answer: the base is never taught to iterate.
- ``copy``: "Start value: K 17 B 3\\nAnswer: K 17 B 3" (letters and the numerals 0-30).
- ``arithmetic``: "What is 12 + 7?\\nAnswer: 19" over the numerals 0-99.
- ``choice``: the Tier-1 multiple-choice format ("What is a op b? A. .. D. ..
  Answer with the letter of the correct option.") with the answer letter; questions
  of the protocols' Tier-1 rows (``exclude_tier1`` in the recipe) never appear.

Loss: causal LM cross-entropy on the ANSWER tokens only (the prompt is masked). The
table lines are uniformly random, so a loss on them is noise that slows the lookup
skill; the answer-only loss puts every gradient on reading the table.

Outputs (written to a temporary sibling folder, renamed into place at the end):
``config.json`` + ``model.safetensors`` + ``generation_config.json``, the word-level
tokenizer files, ``recipe.yaml`` (the recipe file, byte for byte), ``SHA256``
(``sha256sum`` format for ``model.safetensors``), ``train.log`` and ``summary.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ledger.canonical import sha256_file
from ledger.rows.tasks.alphabets import N24
from ledger.rows.tasks.arithmetic import INSTRUCTION, LABELS, OPERATIONS, _distractors, generate_arithmetic
from ledger.rows.tasks.rule_chasing import make_table
from ledger.rows.tasks.surfaces import render_symbolic

__all__ = [
    "ModelShape",
    "CurriculumStage",
    "PretrainRecipe",
    "Example",
    "load_recipe",
    "synthetic_corpus",
    "symbols_at",
    "heldout_lookups",
    "excluded_tier1_questions",
    "pretrain_base",
    "initialise_from",
    "verify_base_hash",
]

ANSWER_SUFFIX = "\nAnswer:"
KINDS: tuple[Kind, ...] = ("lookup", "start", "repeat", "copy", "arithmetic", "choice")


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


Kind = Literal["lookup", "start", "repeat", "copy", "arithmetic", "choice"]


class CurriculumStage(_Strict):
    """From ``start_step`` on, lookup tables have up to ``max_symbols`` symbols (and this mixture, if given)."""

    start_step: int = Field(ge=0)
    max_symbols: int = Field(ge=2, le=len(N24))
    mixture: dict[Kind, float] | None = None


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
    name: str
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
    # repeat: a random sequence of this many tokens (letters and numerals 0-99), then the same sequence again
    repeat_length: tuple[int, int] = (8, 24)
    copy_numerals: int = Field(default=30, ge=0)  # copy tokens include the numerals 0..copy_numerals
    # the tokenizer knows the numerals 0..vocab_numerals-1: a small output layer forms
    # induction heads far sooner (measured: 1,128 tokens vs 126 slowed it several-fold)
    vocab_numerals: int = Field(default=1000, ge=100)
    arithmetic_max: int = Field(default=99, ge=1)
    exclude_tier1: list[Tier1Exclusion] = []
    eval_every: int = Field(default=250, gt=0)
    eval_rows: int = Field(default=64, gt=0)
    eval_sizes: list[int] = [4, 8, 16, 24]
    log_every: int = Field(default=25, gt=0)
    threads: int = Field(default=1, gt=0)

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
        if not 0 <= self.lookup_recalls[0] <= self.lookup_recalls[1]:
            raise ValueError("lookup_recalls must be (min, max) with 0 <= min <= max")
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
            raise ValueError(f"init_from.identity_layers must be layer indices of the new model (0..{self.model.layers - 1})")
        return self


def load_recipe(path: str | os.PathLike) -> PretrainRecipe:
    """A recipe file, validated strictly; errors name the file, line and field (``ProtocolError``)."""
    from ledger.spec.loader import load_model_file

    return load_model_file(Path(path), PretrainRecipe, "pretraining recipe")


# -- the corpus ---------------------------------------------------------------------


class Example(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    prompt: str  # without the "\nAnswer:" suffix
    answer: str  # with its leading space, e.g. " K"
    depth: int | None = None  # lookups: the depth the question states (always 1)
    # follow-up (question, answer) pairs on the same table, each "\n" + question + "\nAnswer:" + answer
    followups: tuple[tuple[str, str], ...] = ()

    def segments(self) -> list[tuple[str, str]]:
        """(context, supervised answer) pieces whose concatenation is :attr:`text`."""
        if self.kind == "repeat":  # plain text (no "Answer:"), the whole second showing supervised
            return [(self.prompt, self.answer)]
        pieces = [(self.prompt + ANSWER_SUFFIX, self.answer)]
        for question, answer in self.followups:
            # recall lines ("M ->") are completed directly; questions get the reader's suffix
            pieces.append(("\n" + question, answer) if question.endswith("->") else ("\n" + question + ANSWER_SUFFIX, answer))
        return pieces

    @property
    def text(self) -> str:
        return "".join(context + answer for context, answer in self.segments())


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.sha256(json.dumps(["ledger/pretrain", seed, *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _stage(recipe: PretrainRecipe, step: int) -> int:
    index = 0
    for i, stage in enumerate(recipe.curriculum):
        if step >= stage.start_step:
            index = i
    return index


def symbols_at(recipe: PretrainRecipe, step: int) -> int:
    """The curriculum's maximum table size at ``step``."""
    return recipe.curriculum[_stage(recipe, step)].max_symbols


def _lookup_size(recipe: PretrainRecipe, step: int, rng: random.Random) -> int:
    index = _stage(recipe, step)
    top = recipe.curriculum[index].max_symbols
    earlier = sorted({stage.max_symbols for stage in recipe.curriculum[:index]} - {top})
    if not earlier or rng.random() < recipe.top_share:
        return top
    return rng.choice(earlier)


def _question(start: str) -> str:
    return f"Start value: {start}\nApply f exactly 1 times.\nWhat is the final value?"


def _lookup(rng: random.Random, size: int, questions: int = 1, recalls: int = 0) -> Example:
    symbols = rng.sample(N24, size)
    table, start, path = make_table(rng, symbols, 1)
    # depth 1, always: the base reads one rule from a shuffled table and never iterates.
    # The first question is the protocol's exact prompt; follow-ups ask other keys of the
    # same table (distinct starts, one hop each), for more supervised lookups per table.
    others = [key for key in table if key != start]
    rng.shuffle(others)
    pairs = [(_question(key), " " + table[key]) for key in others[: max(questions - 1, 0)]]
    # recalls: a table line repeated without its value ("M ->" then " J"), the plain
    # induction pattern behind every lookup; they follow the questions, so the first
    # question stays the protocol's exact prompt, and they never state a depth.
    keys = list(table)
    rng.shuffle(keys)
    for key in keys[:recalls]:
        pairs.append((f"{key} ->", " " + table[key]))
    followups = tuple(pairs)
    return Example(
        kind="lookup", prompt=render_symbolic(table, start, 1), answer=" " + path[1], depth=1, followups=followups
    )


def _start(rng: random.Random, size: int) -> Example:
    """The lookup prompt at depth 0 ("Apply f exactly 0 times."): the answer is the start value.

    Teaches the answer position to fetch the start symbol, the query half of a lookup
    (the prototype's "loop 0" supervision); zero hops, so nothing about iterating.
    """
    symbols = rng.sample(N24, size)
    table, start, _ = make_table(rng, symbols, 1)
    prompt = render_symbolic(table, start, 1).replace("Apply f exactly 1 times.", "Apply f exactly 0 times.")
    return Example(kind="start", prompt=prompt, answer=" " + start, depth=0)


def _repeat(rng: random.Random, recipe: PretrainRecipe) -> Example:
    """A random token sequence shown twice; the second showing is supervised from its second token.

    The textbook way to grow induction heads (find the earlier occurrence of the current
    token, copy what followed it), the mechanism a table lookup is built from; a small
    model forms them on this data within a couple of thousand steps, while it can sit on
    a plateau for far longer when the lookups alone must teach them.
    """
    pool = list(N24) + [str(n) for n in range(100)]
    tokens = [rng.choice(pool) for _ in range(rng.randint(*recipe.repeat_length))]
    return Example(kind="repeat", prompt=" ".join(tokens + tokens[:1]), answer=" " + " ".join(tokens[1:]))


def _copy(rng: random.Random, recipe: PretrainRecipe) -> Example:
    pool = list(N24) + [str(n) for n in range(recipe.copy_numerals + 1)]
    tokens = [rng.choice(pool) for _ in range(rng.randint(*recipe.copy_length))]
    line = " ".join(tokens)
    return Example(kind="copy", prompt=f"Start value: {line}", answer=" " + line)


def _arithmetic(rng: random.Random, recipe: PretrainRecipe) -> Example:
    top = recipe.arithmetic_max
    op = rng.choice("+-*/")
    if op == "+":
        a = rng.randint(0, top)
        b = rng.randint(0, top - a)
        value = a + b
    elif op == "-":
        a = rng.randint(0, top)
        b = rng.randint(0, a)
        value = a - b
    elif op == "*":
        a = rng.randint(0, 12)
        b = rng.randint(0, min(12, top // max(a, 1)))
        value = a * b
    else:
        b = rng.randint(1, 12)
        value = rng.randint(0, min(12, top // b))
        a = b * value
    return Example(kind="arithmetic", prompt=f"What is {a} {op} {b}?", answer=f" {value}")


def excluded_tier1_questions(recipe: PretrainRecipe) -> frozenset[str]:
    """The question lines ("What is 7 * 8?") of the Tier-1 rows the recipe excludes."""
    questions = set()
    for spec in recipe.exclude_tier1:
        for row in generate_arithmetic(seed=spec.seed, split=spec.split, per_op=spec.per_op):
            questions.add(row.prompt.split("\n", 1)[0])
    return frozenset(questions)


def _choice(rng: random.Random, excluded: frozenset[str]) -> Example:
    names = list(OPERATIONS)
    while True:
        op, shown, draw = OPERATIONS[rng.choice(names)]
        a, b, value = draw(rng)
        question = f"What is {a} {shown} {b}?"
        if question not in excluded:
            break
    wrong = _distractors(rng, op, a, b, value)
    label = rng.choice(LABELS)
    options = iter(wrong)
    choices = {lab: str(value if lab == label else next(options)) for lab in LABELS}
    prompt = question + "\n" + "".join(f"{lab}. {choices[lab]}\n" for lab in LABELS) + INSTRUCTION
    return Example(kind="choice", prompt=prompt, answer=" " + label)


_EXCLUDED_CACHE: dict[tuple, frozenset[str]] = {}


def synthetic_corpus(recipe: PretrainRecipe, step: int, batch_size: int | None = None) -> list[Example]:
    """The ``batch_size`` examples of training step ``step`` (a pure function of recipe and step)."""
    size = recipe.batch_size if batch_size is None else batch_size
    key = tuple((spec.seed, spec.split, spec.per_op) for spec in recipe.exclude_tier1)
    if key not in _EXCLUDED_CACHE:
        _EXCLUDED_CACHE[key] = excluded_tier1_questions(recipe)
    excluded = _EXCLUDED_CACHE[key]
    mixture = recipe.curriculum[_stage(recipe, step)].mixture or recipe.mixture
    kinds = [kind for kind in KINDS if mixture.get(kind, 0) > 0]
    weights = [mixture[kind] for kind in kinds]
    batch = []
    for index in range(size):
        rng = _rng(recipe.seed, "train", step, index)
        kind = rng.choices(kinds, weights)[0]
        if kind == "lookup":
            size_now = _lookup_size(recipe, step, rng)
            batch.append(
                _lookup(rng, size_now, rng.randint(*recipe.lookup_questions), rng.randint(*recipe.lookup_recalls))
            )
        elif kind == "start":
            batch.append(_start(rng, _lookup_size(recipe, step, rng)))
        elif kind == "repeat":
            batch.append(_repeat(rng, recipe))
        elif kind == "copy":
            batch.append(_copy(rng, recipe))
        elif kind == "arithmetic":
            batch.append(_arithmetic(rng, recipe))
        else:
            batch.append(_choice(rng, excluded))
    return batch


def heldout_lookups(recipe: PretrainRecipe, size: int) -> list[tuple[Example, list[str]]]:
    """A fixed held-out set of single-hop lookups over ``size`` symbols: (example, table symbols).

    Size 16 and 24 use the full N16 (A-P) and N24 (A-X) alphabets, as the protocol does;
    smaller sizes use random subsets of N24. Drawn from a stream the training corpus never uses.
    """
    rows = []
    for index in range(recipe.eval_rows):
        rng = _rng(recipe.seed, "heldout", size, index)
        symbols = list(N24[:size]) if size in (16, 24) else rng.sample(N24, size)
        table, start, path = make_table(rng, symbols, 1)
        example = Example(kind="lookup", prompt=render_symbolic(table, start, 1), answer=" " + path[1], depth=1)
        rows.append((example, sorted(symbols)))
    return rows


# -- training -----------------------------------------------------------------------


def _encode(tokenizer, examples: Sequence[Example], max_len: int):
    """Right-padded input ids, attention mask and answer-only labels."""
    import torch

    sequences, label_rows = [], []
    for example in examples:
        ids, labels = [], []
        for context, answer in example.segments():
            context_ids = tokenizer.encode(context, add_special_tokens=False)
            answer_ids = tokenizer.encode(answer, add_special_tokens=False)
            ids += context_ids + answer_ids
            labels += [-100] * len(context_ids) + answer_ids
        ids, labels = ids[:max_len], labels[:max_len]
        sequences.append(ids)
        label_rows.append(labels)
    width = max(len(ids) for ids in sequences)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    label_ids = torch.full((len(sequences), width), -100, dtype=torch.long)
    for i, (ids, labs) in enumerate(zip(sequences, label_rows)):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        label_ids[i, : len(labs)] = torch.tensor(labs)
    return input_ids, attention, label_ids


def _lr_at(recipe: PretrainRecipe, step: int) -> float:
    """Learning rate at ``step`` (0-based); the schedule always spans ``recipe.steps``."""
    from ledger.spec.arms import LrSchedule

    schedule = LrSchedule(kind=recipe.schedule, warmup_steps=recipe.warmup, min_lr_ratio=recipe.min_lr_ratio)
    return recipe.lr * schedule.scale(step, recipe.steps)


def build_model(recipe: PretrainRecipe, tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from arms.bases.builtin import vocabulary

    shape = recipe.model
    config = Qwen2Config(
        vocab_size=len(vocabulary(recipe.vocab_numerals)),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rope_theta=shape.rope_theta,  # type: ignore[call-arg]  # legacy kwarg, still folded into rope_parameters
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(recipe.seed)
    return Qwen2ForCausalLM(config)


def initialise_from(model, recipe: PretrainRecipe, recipe_dir: str | os.PathLike) -> dict:
    """Load ``recipe.init_from`` into ``model`` (hash checked first); returns what was loaded.

    Every tensor of the new model is taken from the source: layer ``i`` from source layer
    ``layers[i]``, everything outside the layers by name. A shape that differs, or a source
    layer that does not exist, is an error naming the tensor.
    """
    from safetensors.torch import load_file

    spec = recipe.init_from
    assert spec is not None  # called only for a recipe with init_from (pretrain_base)
    folder = Path(spec.path)
    if not folder.is_absolute():
        folder = Path(recipe_dir) / folder
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"init_from: {folder}/model.safetensors does not exist (a relative init_from.path resolves "
            "against the recipe's folder: run the recipe in bases/, not the copy inside a base folder)"
        )
    digest = sha256_file(folder / "model.safetensors")
    if digest != spec.sha256:
        raise ValueError(f"init_from: {folder}/model.safetensors has SHA-256 {digest}, the recipe expects {spec.sha256}")
    source = load_file(str(folder / "model.safetensors"))
    source_layers = 1 + max(
        (int(name.split(".")[2]) for name in source if name.startswith("model.layers.")), default=-1
    )
    mapping = spec.layers if spec.layers is not None else list(range(recipe.model.layers))
    if max(mapping) >= source_layers:
        raise ValueError(f"init_from: the source has {source_layers} layers; the recipe maps from layer {max(mapping)}")
    state = {}
    for name, tensor in model.state_dict().items():
        source_name = name
        if name.startswith("model.layers."):
            parts = name.split(".")
            parts[2] = str(mapping[int(parts[2])])
            source_name = ".".join(parts)
        if source_name not in source:
            if name == "lm_head.weight" and model.config.tie_word_embeddings:
                continue  # tied to the embeddings, which are copied
            raise ValueError(f"init_from: the source has no tensor {source_name} (for {name})")
        if tuple(source[source_name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"init_from: {source_name} has shape {tuple(source[source_name].shape)}, "
                f"the recipe's model needs {tuple(tensor.shape)} for {name}"
            )
        state[name] = source[source_name].clone()
        if name.startswith("model.layers.") and int(name.split(".")[2]) in spec.identity_layers:
            if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                state[name].zero_()
    model.load_state_dict(state, strict=False)
    return {
        "init_from": str(spec.path),
        "init_from_sha256": digest,
        "init_from_layers": mapping,
        "init_from_identity_layers": list(spec.identity_layers),
    }


def lookup_accuracy(model, tokenizer, rows, batch: int = 64) -> float:
    """Share of rows whose next-token argmax, restricted to the table's symbols, is the answer."""
    import torch

    correct = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for first in range(0, len(rows), batch):
            chunk = rows[first : first + batch]
            encoded = [tokenizer.encode(ex.prompt + ANSWER_SUFFIX, add_special_tokens=False) for ex, _ in chunk]
            width = max(len(ids) for ids in encoded)
            pad = tokenizer.pad_token_id
            # left padding so that the last position is every row's answer position
            ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
            mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1, :]
            for row_logits, (example, symbols) in zip(logits, chunk):
                candidates = [tokenizer.convert_tokens_to_ids(s) for s in symbols]
                best = symbols[int(torch.argmax(row_logits[candidates]))]
                correct += int(" " + best == example.answer)
    if was_training:
        model.train()
    return correct / len(rows)


def verify_base_hash(folder: str | os.PathLike, expected: str | None = None) -> str:
    """SHA-256 of ``folder/model.safetensors``, checked against ``folder/SHA256`` (and ``expected``).

    Raises ``ValueError`` on any mismatch; returns the digest.
    """
    folder = Path(folder)
    digest = sha256_file(folder / "model.safetensors")
    recorded = (folder / "SHA256").read_text(encoding="utf-8").split()[0]
    if digest != recorded:
        raise ValueError(f"{folder}/model.safetensors has SHA-256 {digest}, but {folder}/SHA256 says {recorded}")
    if expected is not None and digest != expected:
        raise ValueError(f"{folder}/model.safetensors has SHA-256 {digest}, expected {expected}")
    return digest


def pretrain_base(
    recipe_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    max_steps: int | None = None,
    progress: bool = True,
) -> dict:
    """Train the recipe's model and write it to ``out_dir`` (atomically); returns the summary.

    ``max_steps`` stops early on the same code path (the learning-rate schedule still
    spans the recipe's ``steps``, so a short run is an exact prefix of the full one).
    Refuses an existing ``out_dir``. The run's live log is ``<tmp>/train.log`` where
    ``<tmp>`` is ``out_dir``'s sibling ``.<name>.partial``.
    """
    import torch
    import transformers

    from arms.bases.builtin import word_tokenizer

    recipe_path = Path(recipe_path)
    recipe = load_recipe(recipe_path)
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; remove it or choose another folder")
    tmp = out_dir.parent / f".{out_dir.name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)

    steps = recipe.steps if max_steps is None else min(max_steps, recipe.steps)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    started = time.time()
    log = open(tmp / "train.log", "w", encoding="utf-8")

    def emit(record: dict) -> None:
        line = json.dumps(record, sort_keys=True)
        log.write(line + "\n")
        log.flush()
        if progress:
            print(line, file=sys.stderr, flush=True)

    try:
        tokenizer = word_tokenizer(recipe.vocab_numerals)
        model = build_model(recipe, tokenizer)
        initialised = initialise_from(model, recipe, recipe_path.parent) if recipe.init_from is not None else {}
        model.train()
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=recipe.lr,
            betas=recipe.betas,
        )
        heldout = {size: heldout_lookups(recipe, size) for size in recipe.eval_sizes}
        emit(
            {
                "event": "start",
                "recipe": recipe.name,
                "recipe_sha256": sha256_file(recipe_path),
                "steps": steps,
                "parameters": n_params,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "threads": torch.get_num_threads(),
                **initialised,
            }
        )
        running: dict[str, list[float]] = {}
        accuracy: dict[str, float] = {}
        loss_value = float("nan")
        for step in range(steps):
            examples = synthetic_corpus(recipe, step)
            input_ids, attention, labels = _encode(tokenizer, examples, recipe.max_seq_len)
            lr = _lr_at(recipe, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            logits = model(input_ids=input_ids, attention_mask=attention).logits
            shift_logits = logits[:, :-1, :].float()
            shift_labels = labels[:, 1:]
            per_token = torch.nn.functional.cross_entropy(
                shift_logits.reshape(-1, shift_logits.shape[-1]),
                shift_labels.reshape(-1),
                ignore_index=-100,
                reduction="none",
            ).view(shift_labels.shape)
            mask = shift_labels != -100
            loss = per_token.sum() / mask.sum()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            loss_value = loss.item()
            with torch.no_grad():
                per_example = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            for example, value in zip(examples, per_example.tolist()):
                running.setdefault(example.kind, []).append(value)
            done = step + 1
            if done % recipe.log_every == 0 or done == steps:
                emit(
                    {
                        "event": "train",
                        "step": done,
                        "loss": round(loss_value, 5),
                        "lr": lr,
                        "max_symbols": symbols_at(recipe, step),
                        "loss_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(running.items())},
                        "elapsed_s": round(time.time() - started, 1),
                    }
                )
                running = {}
            if done % recipe.eval_every == 0 or done == steps:
                accuracy = {str(size): lookup_accuracy(model, tokenizer, rows) for size, rows in heldout.items()}
                emit({"event": "eval", "step": done, "lookup_accuracy": accuracy})

        model.eval()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        shutil.copyfile(recipe_path, tmp / "recipe.yaml")
        digest = sha256_file(tmp / "model.safetensors")
        (tmp / "SHA256").write_text(f"{digest}  model.safetensors\n", encoding="utf-8")
        wall = time.time() - started
        summary = {
            "recipe": recipe.name,
            "recipe_sha256": sha256_file(recipe_path),
            "steps": steps,
            "recipe_steps": recipe.steps,
            "final_loss": loss_value,
            "heldout_single_hop_accuracy": accuracy,
            "heldout_rows_per_size": recipe.eval_rows,
            "parameters": n_params,
            "model_sha256": digest,
            "wall_time_s": round(wall, 1),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "threads": torch.get_num_threads(),
            **initialised,
        }
        emit({"event": "end", **summary})
        log.close()
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir)
        return summary
    finally:
        if not log.closed:
            log.close()
        torch.set_num_threads(threads_before)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="pretrain the tiny base of a recipe")
    parser.add_argument("recipe")
    parser.add_argument("out_dir")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    summary = pretrain_base(args.recipe, args.out_dir, max_steps=args.max_steps, progress=not args.quiet)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
