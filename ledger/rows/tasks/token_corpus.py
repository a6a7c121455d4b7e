"""A pre-tokenized, packed training corpus on local disk (design M at the papers' scale).

The seed trains on tens of billions of tokens, tokenized and packed by its own script into fixed-length
sequences in parquet shards (a Hugging Face dataset saved to disk: ``*.parquet`` files whose ``input_ids``
column holds one sequence per record, ``max_length + 1`` tokens long). Such a corpus cannot be a manifest of
sequences (every manifest row is stored in the ledger), so its rows are its **shards**: each row names one
file by its name in the folder, its SHA-256, its number of sequences and the largest token id it holds.
Registration pins those rows, so a run or ``ledger verify`` that rehashes a changed or missing shard finds
another manifest. Training reads the sequences themselves from the shards (``TokenSequences``), one pass in
a seeded order, a row group at a time.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.canonical import sha256_file
from ledger.protocol.common import local_path
from ledger.rows.manifest import Row

GENERATOR = "token_corpus"


class TokenCorpusError(ValueError):
    """A token corpus that is missing, changed, or not packed as the manifest says (names the file)."""


class TokenCorpusNotHere(TokenCorpusError):
    """A corpus folder the user has not put in place yet (registration pins it)."""


def _natural(name: str) -> list[Any]:
    """train-2.parquet before train-10.parquet (the order the seed's loader lists its shards in)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def shard_files(where: Path, shards: int | None = None) -> list[Path]:
    """The corpus's shards: the file itself, or a folder's ``*.parquet`` in natural name order (the first
    ``shards`` of them)."""
    if not where.exists():
        raise TokenCorpusNotHere(
            f"{where}: the token corpus is not here: put its parquet shards there (one sequence per record)"
        )
    files = [where] if where.is_file() else sorted(where.glob("*.parquet"), key=lambda file: _natural(file.name))
    if not files:
        raise TokenCorpusError(f"{where}: no *.parquet shards in the folder")
    return files[:shards] if shards else files


@functools.cache  # a run builds its manifests twice (registration, then the run): each shard is read once
def _described(file: str, size: int, modified_ns: int, column: str, sequence_length: int) -> dict[str, Any]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        shard = pq.ParquetFile(file)
    except Exception as exc:  # pyarrow's own errors: not a parquet file, truncated
        raise TokenCorpusError(f"{file}: not a parquet file ({exc})") from None
    if column not in shard.schema_arrow.names:
        raise TokenCorpusError(f"{file}: no column {column!r} (it has {', '.join(shard.schema_arrow.names)})")
    largest = -1
    for batch in shard.iter_batches(columns=[column], batch_size=4096):
        values = batch.column(0)
        lengths = pc.list_value_length(values)
        shortest, longest = pc.min(lengths).as_py(), pc.max(lengths).as_py()
        if (shortest, longest) != (sequence_length, sequence_length):
            raise TokenCorpusError(
                f"{file}: sequences of {shortest}-{longest} tokens, the manifest says {sequence_length} (packed)"
            )
        top = pc.max(pc.list_flatten(values)).as_py()
        largest = max(largest, -1 if top is None else int(top))
    if shard.metadata.num_rows == 0:
        raise TokenCorpusError(f"{file}: no sequences")
    return {"sequences": shard.metadata.num_rows, "max_token": largest, "sha256": sha256_file(file)}


def describe_shard(file: Path, column: str, sequence_length: int) -> dict[str, Any]:
    """A shard's SHA-256, its number of sequences and its largest token id (after checking every sequence's
    length); remembered for the process by the file's size and modification time."""
    stat = file.stat()
    return _described(str(file), stat.st_size, stat.st_mtime_ns, column, sequence_length)


def generate_token_corpus(
    *,
    path: str,
    split: str,
    sequence_length: int,
    column: str = "input_ids",
    shards: int | None = None,
    folder: str | Path | None = None,
) -> list[Row]:
    """One row per shard, in natural name order: the shard's name, SHA-256, sequences and largest token id."""
    rows = []
    for file in shard_files(local_path(path, folder), shards):
        described = describe_shard(file, column, sequence_length)
        rows.append(
            Row(
                row_id=f"{split}/{file.name}",
                task="token_shard",
                surface="text",
                depth=0,
                prompt=file.name,
                answer="",
                symbols=[],
                meta={"generator": GENERATOR, "column": column, "sequence_length": sequence_length, **described},
            )
        )
    return rows


@dataclass(frozen=True)
class TokenSequence:
    """One packed training sequence: already token ids, trained as they are."""

    row_id: str
    input_ids: tuple[int, ...]
    task: str = "token_sequence"


class TokenSequences(Sequence[TokenSequence]):
    """The sequences of a token corpus's shards (the manifest's rows), read a row group at a time.

    ``batch_at(position, count, seed)`` is one pass over every sequence in a seeded order (an affine
    permutation of the indices, so that no order of billions of indices is ever held): a step's batch at
    ``position = step x batch`` never repeats a sequence within a pass, whatever step a resumed run starts at.
    """

    def __init__(self, where: Path, rows: Sequence[Row], cached_groups: int = 8):
        self.where = where
        self.column = str(rows[0].meta["column"])
        self.files = [where / row.prompt if where.is_dir() else where for row in rows]
        self.counts = [int(row.meta["sequences"]) for row in rows]
        self.starts = [sum(self.counts[:index]) for index in range(len(self.counts))]
        self.max_token = max(int(row.meta["max_token"]) for row in rows)
        self._groups: OrderedDict[tuple[int, int], list] = OrderedDict()
        self._cached_groups = cached_groups
        self._layouts: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return sum(self.counts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        import bisect

        shard = bisect.bisect_right(self.starts, index) - 1
        local = index - self.starts[shard]
        group_starts = self._group_starts(shard)
        group = bisect.bisect_right(group_starts, local) - 1
        values = self._group(shard, group)
        return TokenSequence(f"{self.files[shard].name}#{local}", tuple(values[local - group_starts[group]]))

    def _group_starts(self, shard: int) -> list[int]:
        if shard not in self._layouts:
            import pyarrow.parquet as pq

            metadata = pq.ParquetFile(self.files[shard]).metadata
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            self._layouts[shard] = [sum(sizes[:g]) for g in range(len(sizes))]
        return self._layouts[shard]

    def _group(self, shard: int, group: int) -> list:
        key = (shard, group)
        if key not in self._groups:
            import pyarrow.parquet as pq

            table = pq.ParquetFile(self.files[shard]).read_row_group(group, columns=[self.column])
            self._groups[key] = table.column(0).to_pylist()
            if len(self._groups) > self._cached_groups:
                self._groups.popitem(last=False)
        self._groups.move_to_end(key)
        return self._groups[key]

    def batch_at(self, position: int, count: int, seed: int) -> list[TokenSequence]:
        """The ``count`` sequences at ``position`` of the seeded pass (wrapping into the next pass)."""
        total = len(self)
        multiplier, offset = _affine(total, seed)
        return [self[(multiplier * ((position + k) % total) + offset) % total] for k in range(count)]


def training_sequences(spec: Any, rows: Sequence[Row], folder: Path | None) -> TokenSequences:
    """What a stage trains on from a token corpus manifest: the sequences of the shards its rows name."""
    return TokenSequences(local_path(spec.path, folder), rows)


def _affine(total: int, seed: int) -> tuple[int, int]:
    """A multiplier coprime to ``total`` and an offset, drawn from ``seed``: i -> (a i + c) mod total is then
    a permutation of range(total)."""
    import math
    import random

    draw = random.Random(seed)
    if total == 1:
        return 1, 0
    while True:
        multiplier = draw.randrange(1, total)
        if math.gcd(multiplier, total) == 1:
            return multiplier, draw.randrange(total)
