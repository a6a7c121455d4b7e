"""The synthetic pretraining corpus of a tiny base: deterministic examples per step (repeated sequences for
induction heads, single-hop lookups, start recall, copying, arithmetic, the Tier-1 format; never iteration)."""

from __future__ import annotations

import hashlib
import json
import random

from pydantic import BaseModel, ConfigDict

from arms.bases.recipe import (
    ANSWER_SUFFIX,
    KINDS,
    SKILLS,
    PretrainRecipe,
)
from ledger.rows.tasks.alphabets import N16, N24, NAMES
from ledger.rows.tasks.arithmetic import INSTRUCTION, LABELS, OPERATIONS, _distractors, generate_arithmetic
from ledger.rows.tasks.rule_chasing import make_table
from ledger.rows.tasks.surfaces import render_symbolic


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
        if self.kind in ("repeat", "text"):  # plain text (no "Answer:"): supervised after its first words
            return [(self.prompt, self.answer)]
        pieces = [(self.prompt + ANSWER_SUFFIX, self.answer)]
        for question, answer in self.followups:
            # recall lines ("M ->") are completed directly; questions get the reader's suffix
            pieces.append(
                ("\n" + question, answer) if question.endswith("->") else ("\n" + question + ANSWER_SUFFIX, answer)
            )
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


def reverse_symbols_at(recipe: PretrainRecipe, step: int) -> tuple[int, int] | None:
    """The reverse kinds' table sizes at ``step`` (None: the protocols' N16 rendering)."""
    return recipe.reverse_sizes_at(_stage(recipe, step))


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


# a single-hop row of another surface or operation: (generator keyword arguments, alphabet)
_ONE_HOP: dict[str, dict] = {
    "relay": {"surface": "relay", "symbols": NAMES, "distractors": False},
    "pointer": {"surface": "pointer", "symbols": NAMES, "distractors": False},
    "relay_lookup": {"surface": "relay", "symbols": NAMES, "distractors": True},
    "pointer_lookup": {"surface": "pointer", "symbols": NAMES, "distractors": True},
    "reverse_inverse": {"surface": "symbolic", "symbols": N16, "operation": "reverse_inverse_table"},
    "reverse_forward": {"surface": "symbolic", "symbols": N16, "operation": "reverse_forward_table"},
}


def _one_hop(kind: str, seed: int, split: str) -> tuple[Example, list[str]]:
    """One single-hop row of ``kind`` as the protocols render it (relay and pointer sentences over names with no
    distractor rules, or with every name given a rule for the ``_lookup`` kinds; the reverse operation with or
    without its inverse table), with its answer symbols."""
    from ledger.rows.tasks.rule_chasing import generate_rule_chasing

    (row,) = generate_rule_chasing(depth_range=(1, 1), rows_per_depth=1, seed=seed, split=split, **_ONE_HOP[kind])
    return Example(kind=kind, prompt=row.prompt, answer=" " + row.answer, depth=1), sorted(row.symbols)


# where a sentence surface's question starts (the start name follows), and a rule's line up to its receiver
_SENTENCE_QUESTION = {"relay": "\n\n{} has the key on day 0.", "pointer": "\n\nStart at {}'s note"}
_SENTENCE_RECALL = {"relay": "{} always passes the key to", "pointer": "{}'s note points to"}


def _sentence_lookup(rng: random.Random, recipe: PretrainRecipe, kind: str, size: int) -> Example:
    """A one-hop relay or pointer lookup for training (the ``_lookup`` kinds): ``size`` random names, each with a
    rule, rendered as the protocols render it, then further starts of the same table and recalled lines ("Ben
    always passes the key to" then " Max"), as the symbolic lookup's follow-ups and recalls."""
    from ledger.rows.tasks.rule_chasing import generate_rule_chasing

    surface = _ONE_HOP[kind]["surface"]
    names = rng.sample(NAMES, size)
    (row,) = generate_rule_chasing(
        depth_range=(1, 1),
        rows_per_depth=1,
        seed=rng.randrange(2**31),
        split="pretrain",
        **{**_ONE_HOP[kind], "symbols": names},
    )
    table, start = row.table or {}, row.start or ""  # a rule-chasing row has both
    marker = _SENTENCE_QUESTION[surface].format(start)
    question = row.prompt[row.prompt.index(marker) + 2 :].replace(start, "{}", 1)
    others = [name for name in table if name != start]
    rng.shuffle(others)
    pairs = [(question.format(name), " " + table[name]) for name in others[: rng.randint(*recipe.lookup_questions) - 1]]
    movers = [name for name in table if table[name] != name]  # a relay rule that keeps the key has no receiver
    rng.shuffle(movers)
    pairs += [
        (_SENTENCE_RECALL[surface].format(name), " " + table[name])
        for name in movers[: rng.randint(*recipe.lookup_recalls)]
    ]
    return Example(kind=kind, prompt=row.prompt, answer=" " + row.answer, depth=1, followups=tuple(pairs))


def _reverse(rng: random.Random, recipe: PretrainRecipe, kind: str, sizes: tuple[int, int]) -> Example:
    """A reverse lookup for training (``reverse_symbols`` set): a permutation of a random subset of N16 of a size
    drawn from ``sizes``, rendered as the protocols render it, then further starts of the same table."""
    from ledger.rows.tasks.reverse_lookup import draw_reverse, render_reverse

    alphabet = rng.sample(N16, rng.randint(*sizes))
    alphabet.sort()
    operation = _ONE_HOP[kind]["operation"]
    forward, inverse, start, path, inverse_order = draw_reverse(rng, alphabet, 1)
    prompt = render_reverse(operation, forward, start, 1, list(forward), inverse_order)
    question = prompt[prompt.index("Start value:") :].replace(f"Start value: {start}", "Start value: {}")
    others = [symbol for symbol in alphabet if symbol != start]
    rng.shuffle(others)
    asked = others[: rng.randint(*recipe.reverse_questions) - 1]
    followups = tuple((question.format(symbol), " " + inverse[symbol]) for symbol in asked)
    return Example(kind=kind, prompt=prompt, answer=" " + path[1], depth=1, followups=followups)


def _text(rng: random.Random, words: int = 48) -> Example:
    """General text: the generated source of design M's text manifests (sentences about names, points and
    tables), supervised after its first word."""
    from ledger.rows.tasks.text import generated_document

    first, rest = generated_document(rng, words).split(" ", 1)
    return Example(kind="text", prompt=first, answer=" " + rest)


def tier1_rows(recipe: PretrainRecipe) -> list:
    """The Tier-1 rows the recipe teaches verbatim (``tier1_pool``), in a fixed order."""
    return [
        row
        for spec in recipe.tier1_pool
        for row in generate_arithmetic(seed=spec.seed, split=spec.split, per_op=spec.per_op)
    ]


_EXCLUDED_CACHE: dict[tuple, frozenset[str]] = {}
_POOL_CACHE: dict[tuple, list] = {}


def synthetic_corpus(recipe: PretrainRecipe, step: int, batch_size: int | None = None) -> list[Example]:
    """The ``batch_size`` examples of training step ``step`` (a pure function of recipe and step)."""
    size = recipe.batch_size if batch_size is None else batch_size
    key = tuple((spec.seed, spec.split, spec.per_op) for spec in recipe.exclude_tier1)
    if key not in _EXCLUDED_CACHE:
        _EXCLUDED_CACHE[key] = excluded_tier1_questions(recipe)
    excluded = _EXCLUDED_CACHE[key]
    mixture = recipe.curriculum[_stage(recipe, step)].mixture or recipe.mixture
    reverse_sizes = reverse_symbols_at(recipe, step)
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
        elif kind == "choice":
            batch.append(_choice(rng, excluded))
        elif kind in ("relay_lookup", "pointer_lookup"):
            batch.append(_sentence_lookup(rng, recipe, kind, _lookup_size(recipe, step, rng)))
        elif kind in _ONE_HOP and reverse_sizes is not None and kind.startswith("reverse"):
            batch.append(_reverse(rng, recipe, kind, reverse_sizes))
        elif kind in _ONE_HOP:
            batch.append(_one_hop(kind, rng.randrange(2**31), "pretrain")[0])
        elif kind == "text":
            batch.append(_text(rng))
        else:  # tier1: one row of the pool, verbatim
            pool_key = tuple((spec.seed, spec.split, spec.per_op) for spec in recipe.tier1_pool)
            if pool_key not in _POOL_CACHE:
                _POOL_CACHE[pool_key] = tier1_rows(recipe)
            row = rng.choice(_POOL_CACHE[pool_key])
            batch.append(Example(kind="tier1", prompt=row.prompt, answer=" " + row.answer))
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


def heldout_skills(recipe: PretrainRecipe) -> dict[str, list[tuple[Example, list[str]]]]:
    """Held-out rows of every skill the recipe teaches (``SKILLS`` with a positive weight anywhere), each with
    its answer symbols: single-hop rows from a stream the corpus never draws; tier1: the pool's own rows (taught
    verbatim, so the figure is what the base knows of them, not arithmetic)."""
    taught = recipe.taught_kinds()
    found: dict[str, list[tuple[Example, list[str]]]] = {}
    for kind in SKILLS:
        if kind not in taught:
            continue
        if kind == "tier1":
            found[kind] = [
                (Example(kind="tier1", prompt=row.prompt, answer=" " + row.answer), list(LABELS))
                for row in tier1_rows(recipe)
            ]
        else:
            found[kind] = [_one_hop(kind, recipe.seed + index, f"heldout{kind}") for index in range(recipe.eval_rows)]
    return found


# -- training -----------------------------------------------------------------------
