"""Text documents for language-model training and validation loss (design M).

Two sources, both deterministic and named in the protocol:

- ``generated``: sentences from a small grammar over the words of the shipped tiny bases'
  vocabulary (names, numbers, tables, points), so a word-level tokenizer of 328 tokens
  reads every word. The tiny bases' "general text".
- ``word_problems``: worked word problems (``ledger.rows.tasks.word_problems``), each followed by the
  reader's answer line, packed into documents: the task's own text, for a held-out task loss.
- ``python_docs``: the Python reference manual that ships with CPython itself
  (``pydoc_data.topics``, the text ``help()`` shows), split into paragraphs and packed into
  documents of about ``words`` words. Real English prose, no hub. The rows record the
  Python version they were read from; another version's text gives another manifest hash,
  which a registered protocol then refuses (the text is pinned by its hash, not its name).

Held-out documents are chosen by the SHA-256 of their own text (``heldout_fraction``), never
by the seed, so the ``train`` and ``heldout`` parts of one source are disjoint whatever seeds
the two manifests use. Version 2 adds a ``dev`` part for tuning (exploratory twins): for
``python_docs`` the next band of the same hash ([f, 2f) for heldout [0, f)), which version 2's
``train`` leaves out; for the generated sources the part name is in every document's seed, so
``dev`` is a stream of its own at either version. Version 1's parts are unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import random

from ledger.rows.manifest import Row
from ledger.rows.tasks.people import PEOPLE
from ledger.rows.tasks.seeds import row_rng

GENERATOR = "text"
SUPPORTED_VERSIONS = (1, 2)
PARTS = ("train", "dev", "heldout")
SOURCES = ("generated", "word_problems", "python_docs")
LETTERS = tuple("ABCDEFGHIJKLMNOPQRSTUVWX")


def _sentence(rng: random.Random) -> str:
    """One sentence of the generated source (every word is in the tiny bases' vocabulary)."""
    name, other = rng.sample(PEOPLE, 2)
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    pairs = rng.sample(LETTERS, 4)
    choice = rng.randrange(6)
    if choice == 0:
        return f"{name} has {a} points and {other} has {b} points ."
    if choice == 1:
        return f"The table keeps {pairs[0]} -> {pairs[1]} , {pairs[2]} -> {pairs[3]} ."
    if choice == 2:
        return f"Each day {name} passes {a % 10} points to {other} ."
    if choice == 3:
        return f"After {a % 10} days {name} has {b} points ."
    if choice == 4:
        return f"The value of {pairs[0]} is {pairs[1]} according to the table ."
    return f"{a} + {b} is {a + b} and {name} keeps it ."


def generated_document(rng: random.Random, words: int) -> str:
    """One document of the generated source: sentences drawn from ``rng`` until it holds ``words`` words."""
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < words:
        sentences.append(_sentence(rng))
    return " ".join(sentences)


def _generated_documents(seed: int, split: str, version: int, n: int, words: int) -> list[str]:
    return [
        generated_document(row_rng(f"{GENERATOR}/generated", version, seed, split, 0, index), words)
        for index in range(n)
    ]


def _problem_documents(seed: int, split: str, version: int, n: int, words: int, answer_format: str) -> list[str]:
    from ledger.rows.tasks.word_problems import generate_word_problems

    problems = generate_word_problems(
        seed=seed, split=split, steps=(1, 4), rows_per_step=n * max(1, words // 24), answer_format=answer_format
    )
    order = row_rng(f"{GENERATOR}/word_problems", version, seed, split, 0, 0)
    order.shuffle(problems)
    worked = [f"{row.prompt}\nAnswer: {row.answer}" for row in problems]
    documents, current = [], []
    for text in worked:
        current.append(text)
        if sum(len(t.split()) for t in current) >= words:
            documents.append("\n".join(current))
            current = []
        if len(documents) == n:
            break
    return documents


@functools.cache  # a run builds its manifests twice (registration, then the run); the text never changes
def python_docs_paragraphs() -> tuple[str, ...]:
    """Every paragraph of CPython's own reference manual (``pydoc_data.topics``), in topic-name order."""
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in topics[name].split("\n\n"):
            text = " ".join(block.split())
            if len(text.split()) >= 8:  # headings and one-line code fragments carry little text
                paragraphs.append(text)
    return tuple(paragraphs)


def _packed(paragraphs: tuple[str, ...], words: int) -> list[str]:
    """Consecutive paragraphs packed into documents of at least ``words`` words (cut at ``2 x words``)."""
    documents, current = [], []
    for paragraph in paragraphs:
        current.extend(paragraph.split())
        if len(current) >= words:
            documents.append(" ".join(current[: 2 * words]))
            current = []
    return documents


def _text_band(text: str) -> float:
    """Where a document's text hash falls in [0, 1): the parts are bands of it, whatever the seed."""
    digest = hashlib.sha256(("ledger/text/heldout:" + text).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _part_of(text: str, fraction: float, version: int) -> str:
    band = _text_band(text)
    if band < fraction:
        return "heldout"
    if version >= 2 and band < 2 * fraction:
        return "dev"  # version 1 had no dev band: its train part keeps these documents
    return "train"


def generate_text(
    *,
    source: str,
    part: str,
    documents: int,
    words: int,
    seed: int,
    split: str,
    heldout_fraction: float = 0.1,
    answer_format: str = "digits",
    version: int = 1,
) -> list[Row]:
    """``documents`` text rows of about ``words`` words from ``source``'s ``part`` (train | heldout)."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"text version {version!r} is not supported (supported: {SUPPORTED_VERSIONS})")
    if source not in SOURCES:
        raise ValueError(f"text source must be one of {SOURCES}, got {source!r}")
    if part not in PARTS or (part == "dev" and version < 2):
        raise ValueError(
            f"text part must be train or heldout (or dev from version 2), got {part!r} at version {version}"
        )
    meta = {"generator": GENERATOR, "version": version, "source": source, "part": part, "seed": seed}
    if source == "generated":
        # a fresh stream per part: the split name and part are both in every document's seed
        pool = _generated_documents(seed, f"{split}-{part}", version, documents, words)
    elif source == "word_problems":
        pool = _problem_documents(seed, f"{split}-{part}", version, documents, words, answer_format)
    else:
        packed = _packed(python_docs_paragraphs(), words)
        pool = [doc for doc in packed if _part_of(doc, heldout_fraction, version) == part]
        row_rng(f"{GENERATOR}/order", version, seed, split, 0, 0).shuffle(pool)
        if len(pool) < documents:
            raise ValueError(
                f"python_docs has {len(pool)} {part} documents of {words} words here, fewer than the {documents} asked"
            )
        pool = pool[:documents]
        meta["python"] = platform.python_version()
    return [
        Row(
            row_id=f"{split}_{index:05d}",
            task="text",
            surface="text",
            depth=0,
            prompt=text,
            answer="",
            symbols=[],
            meta={**meta, "index": index},
        )
        for index, text in enumerate(pool)
    ]
