"""Rows and manifests: the fixed, hashed units every arm is measured on.

A row's identity is its content: ``Row.sha256`` is the SHA-256 of its canonical JSON,
and ``Manifest.sha256`` is the SHA-256 over the canonical rows in order, one per line
(LF). Neither depends on the platform, on dict order or on how an exported file ends
its lines.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ledger.canonical import canonical_json, sha256_hex

Task = Literal["rule_chasing", "arithmetic", "multiple_choice_qa", "text", "word_problem", "token_shard"]
Surface = Literal["symbolic", "relay", "pointer", "multiple_choice", "text", "word_problem"]


class Row(BaseModel):
    """One evaluation or training item.

    ``path`` is the full chain of symbols from the start: ``path[0]`` is the start,
    ``path[t]`` the symbol after t applications (the t-th intermediate state), and
    ``path[-1] == answer``. ``symbols`` is the row's answer vocabulary (the table's
    symbols, or the choice labels of a multiple-choice row).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    row_id: str
    task: Task
    surface: Surface
    depth: int = Field(ge=0)
    prompt: str
    answer: str
    path: list[str] = Field(default_factory=list)
    symbols: list[str]
    table: dict[str, str] | None = None
    start: str | None = None
    choices: dict[str, str] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def canonical(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    @property
    def sha256(self) -> str:
        return sha256_hex(self.canonical())

    def table_key(self) -> tuple[str, str] | None:
        """(canonical table, start): two rows with the same key pose the same problem."""
        if self.table is None or self.start is None:
            return None
        return canonical_json(self.table), self.start


class Manifest(BaseModel):
    """A named, ordered list of rows with a content hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    rows: tuple[Row, ...]

    @property
    def sha256(self) -> str:
        return sha256_hex("".join(row.canonical() + "\n" for row in self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    def by_id(self) -> dict[str, Row]:
        return {row.row_id: row for row in self.rows}

    def to_jsonl(self) -> str:
        return "".join(row.canonical() + "\n" for row in self.rows)

    def write_jsonl(self, path: str | Path) -> Path:
        """Write the rows as canonical JSONL, atomically (temp file, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(self.to_jsonl())
            tmp.replace(path)
        except BaseException:  # a full disk: no half-written file is left behind
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def read_jsonl(cls, path: str | Path, name: str | None = None) -> Manifest:
        """Read rows written by ``write_jsonl`` (gzip allowed; CRLF or LF line ends)."""
        path = Path(path)
        rows = [Row.model_validate(record) for record in _read_json_lines(path)]
        return cls(name=name or path.name.split(".")[0], rows=tuple(rows))


def _read_json_lines(path: Path) -> Iterable[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({exc.msg})") from exc
