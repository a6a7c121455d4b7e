"""Train/eval contamination: no evaluation problem may appear in training data.

A row's problem is what it asks, not how it is rendered:

* a rule-chasing row: ``Row.table_key()`` (the canonical table and the start), whatever its id, surface or
  depth: the answer at every depth follows from (table, start);
* a question with an operation and operands (arithmetic): those, whatever its options, their order or letters;
* a multiple-choice question: its stem and its options as a set, whatever their order or letters;
* any other row: its prompt text.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ledger.canonical import canonical_json
from ledger.rows.manifest import Manifest, Row

__all__ = ["ContaminationError", "check_contamination", "contamination_key", "find_contamination"]

MAX_LISTED = 10


class ContaminationError(ValueError):
    """Training rows pose the same problem as evaluation rows.

    ``pairs`` holds every offending ``(train_role, train_row_id, eval_role, eval_row_id)``
    (a role is written ``role[manifest name]`` when it holds a manifest of another name).
    """

    def __init__(self, pairs: Sequence[tuple[str, str, str, str]]):
        self.pairs = list(pairs)
        self.count = len(self.pairs)
        listed = "\n".join(
            f"  {train_role}:{train_id} == {eval_role}:{eval_id}"
            for train_role, train_id, eval_role, eval_id in self.pairs[:MAX_LISTED]
        )
        more = f"\n  ... and {self.count - MAX_LISTED} more" if self.count > MAX_LISTED else ""
        super().__init__(
            f"{self.count} training/evaluation row pair(s) share a problem (same table and start):\n{listed}{more}"
        )


def contamination_key(row: Row) -> tuple:
    """The problem a row poses: ``("table", table, start)``, ``("operation", task, op, operands)``,
    ``("choice", task, stem, sorted options)`` or ``("prompt", task, prompt)``."""
    key = row.table_key()
    if key is not None:
        return ("table", *key)
    if "op" in row.meta and "operands" in row.meta:
        return ("operation", row.task, str(row.meta["op"]), canonical_json(row.meta["operands"]))
    if row.choices:
        stem = row.meta.get("question")
        if not isinstance(stem, str):
            stem = _without_options(row.prompt, row.choices)
        return ("choice", row.task, stem, canonical_json(sorted(row.choices.values())))
    return ("prompt", row.task, row.prompt)


def _without_options(prompt: str, choices: Mapping[str, str]) -> str:
    """The prompt with its option lines ("B. 58") taken out: the question, whatever the options' order."""
    options = {f"{label}. {text}" for label, text in choices.items()} | {
        f"{label}) {text}" for label, text in choices.items()
    }
    return "\n".join(line for line in prompt.split("\n") if line.strip() not in options)


Rows = Manifest | Iterable[Row] | Iterable[Manifest]


def _labelled_rows(value: Rows, role: str) -> Iterable[tuple[str, Row]]:
    """(label, row) for a Manifest, an iterable of Rows, or an iterable of Manifests.

    The label is the role, or ``role[manifest name]`` when a role holds a manifest of
    another name (a role may hold several manifests)."""
    items = [value] if isinstance(value, Manifest) else value
    for item in items:
        if isinstance(item, Manifest):
            label = role if item.name == role else f"{role}[{item.name}]"
            for row in item.rows:
                yield label, row
        elif isinstance(item, Row):
            yield role, item
        else:
            raise TypeError(f"role {role!r}: expected Rows or Manifests, got {type(item).__name__}")


def _rows(value: Rows) -> Iterable[Row]:
    for _, row in _labelled_rows(value, ""):
        yield row


def find_contamination(train_rows: Rows, eval_rows: Rows) -> list[tuple[str, str]]:
    """Every ``(train_row_id, eval_row_id)`` whose rows share a problem, in eval-row order."""
    by_key: dict[tuple, list[str]] = defaultdict(list)
    for row in _rows(train_rows):
        by_key[contamination_key(row)].append(row.row_id)
    pairs: list[tuple[str, str]] = []
    for row in _rows(eval_rows):
        for train_id in by_key.get(contamination_key(row), ()):
            pairs.append((train_id, row.row_id))
    return pairs


def _is_train_role(role: str) -> bool:
    return role.lower().startswith("train")


def check_contamination(
    manifests_by_role: Mapping[str, Rows],
    train_roles: Iterable[str] | None = None,
) -> None:
    """Raise :class:`ContaminationError` if any training manifest shares a problem with
    any evaluation manifest.

    Each role maps to a Manifest, a list of Rows, or a list of Manifests.

    Training roles are ``train_roles`` if given, else every role whose name starts with
    "train" (``train``, ``train_stage1``, ...); every other role counts as evaluation
    (``eval``, ``test``, ``tail``, ``gate``, ...).
    """
    roles = {role: list(_labelled_rows(value, role)) for role, value in manifests_by_role.items()}
    if train_roles is None:
        train = [role for role in roles if _is_train_role(role)]
    else:
        train = list(train_roles)
        missing = [role for role in train if role not in roles]
        if missing:
            raise KeyError(f"train roles not among the manifests: {missing}")
    evaluation = [role for role in roles if role not in train]
    pairs: list[tuple[str, str, str, str]] = []
    for train_role in train:
        by_key: dict[tuple, list[tuple[str, str]]] = defaultdict(list)
        for label, row in roles[train_role]:
            by_key[contamination_key(row)].append((label, row.row_id))
        for eval_role in evaluation:
            for eval_label, row in roles[eval_role]:
                for train_label, train_id in by_key.get(contamination_key(row), ()):
                    pairs.append((train_label, train_id, eval_label, row.row_id))
    if pairs:
        raise ContaminationError(pairs)
