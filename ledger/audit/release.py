"""Released row-level results of other groups, read through a small mapping file.

A *release mapping* (YAML) says where a release's files are and which of their fields
are the row id, the prompt, the answer, the prediction, the loop, the generated text.
Reading it gives manifests (the released rows, hashed like our own) and evidence
records (one per row and loop) whose correctness is recomputed here from the
prediction and the row -- a release's own ``correct``/``hit`` columns are never
trusted. Generated text is read by the shared reader. Files are gzip-transparent,
JSONL or CSV, and every file's SHA-256 is kept so that verify can re-hash it.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ledger.canonical import sha256_file
from ledger.inputs import MAX_DATA_BYTES, InputFileError, parse_json, read_bytes
from ledger.protocol.common import StrictModel, _located
from ledger.protocol.loader import load_model_file
from ledger.protocol.names import KeyName
from ledger.reader.shared import read_generated_text_detail, row_symbols
from ledger.rows.manifest import Manifest, Row


class ReleaseError(ValueError):
    """A release file that cannot be read as its mapping says (names file and line)."""


# ----------------------------------------------------------------------------- mapping schema


class RowFields(StrictModel):
    """Which source field fills each Row field (``None``: not in the release)."""

    row_id: str = "id"
    prompt: str | None = None
    answer: str
    depth: str | None = None
    table: str | None = None
    start: str | None = None
    path: str | None = None
    choices: str | None = None


class ReleaseManifest(StrictModel):
    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    file: str
    task: Literal["rule_chasing", "arithmetic", "multiple_choice_qa", "word_problem"] = "rule_chasing"
    surface: Literal["symbolic", "relay", "pointer", "multiple_choice", "word_problem"] = "symbolic"
    fields: RowFields
    symbols_from: Literal["table", "scores", "choices"] = Field(
        default="table", description="Where a row's answer vocabulary comes from."
    )
    scores_field: str = "scores"
    where: dict[str, Any] = Field(
        default_factory=dict,
        description="Keep only source records whose field equals the value; a value '$f' means 'equals field f'.",
    )
    default_depth: int = Field(default=0, ge=0)


Behavior = Literal["advance", "stay", "other"]


class ReleaseBehavior(StrictModel):
    """A cell above the diagonal (loop > depth) labelled by the release: its field and what each value means
    (advance: the rule applied once more past the answer; stay: still the answer; other)."""

    field: str
    values: dict[str, Behavior] = Field(min_length=1)


class ReleasePredictions(StrictModel):
    arm: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    manifest: KeyName
    file: str
    row_id: str = "id"
    prediction: str | None = Field(default=None, description="Field holding the predicted symbol.")
    text: str | None = Field(default=None, description="Field holding generated text, read by the shared reader.")
    loop: str | int | None = Field(
        default=None, description="Field holding the loop, or a constant; None for dense (read once) arms."
    )
    target: str | None = Field(
        default=None, description="Field holding the per-cell target (e.g. intermediate states); default: the row's."
    )
    scores: str | None = Field(default=None, description="Per-symbol scores, used for the margin.")
    behavior: ReleaseBehavior | None = Field(
        default=None, description="The release's label of each cell above the diagonal (persistence: advance / stay)."
    )
    label: str = Field(default="", description="What produced these predictions (e.g. a checkpoint step).")

    @model_validator(mode="after")
    def _one_source(self) -> ReleasePredictions:
        if (self.prediction is None) == (self.text is None):
            raise _located("give exactly one of 'prediction' (a symbol field) or 'text' (generated text)", [])
        return self


class ReleaseCounts(StrictModel):
    """Per-depth counts from a summary file (no row-level evidence: marked as such)."""

    id: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    arm: KeyName
    file: str
    select: list[str | int] = Field(description="JSON path to the {depth: {correct, total}} mapping.")
    correct: str = "correct"
    total: str = "total"


class ReleaseMapping(StrictModel):
    release: KeyName = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    source: str = Field(description="Where the files came from (repository and commit).")
    root: str = Field(description="Folder holding the files, relative to this mapping file.")
    manifests: list[ReleaseManifest] = Field(default_factory=list)
    predictions: list[ReleasePredictions] = Field(default_factory=list)
    counts: list[ReleaseCounts] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> ReleaseMapping:
        ids = {spec.id for spec in self.manifests}
        if len(ids) != len(self.manifests):
            raise _located("duplicate manifest id", ["manifests"])
        for index, spec in enumerate(self.predictions):
            if spec.manifest not in ids:
                raise _located(f"unknown manifest {spec.manifest!r}", ["predictions", index, "manifest"])
        return self


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ReleasedPrediction:
    """One prediction of one arm on one row at one loop (loop None: read once)."""

    row_id: str
    arm: str
    loop: int | None
    prediction: str | None
    target: str | None
    correct: bool | None
    margin: float | None = None
    tokens_generated: int | None = None
    latency_ms: float | None = None
    rule: str | None = None
    behavior: str | None = None  # above the diagonal: advance, stay or other (``ReleaseBehavior``)


@dataclass
class LoadedRelease:
    mapping: ReleaseMapping
    root: Path
    manifests: dict[str, Manifest]
    evidence: dict[tuple[str, str, str], list[ReleasedPrediction]]  # (arm, manifest, file) -> records
    counts: dict[str, dict[int, tuple[int, int]]]
    file_hashes: dict[str, str] = field(default_factory=dict)  # relative file -> sha256 of its bytes


# ----------------------------------------------------------------------------- loading


def load_mapping(path: str | Path) -> ReleaseMapping:
    return load_model_file(path, ReleaseMapping, "release mapping")


def resolve_root(mapping: ReleaseMapping, mapping_path: str | Path, root_override: str | Path | None = None) -> Path:
    root = Path(root_override) if root_override else (Path(mapping_path).parent / mapping.root)
    root = root.resolve()
    if not root.is_dir():
        raise ReleaseError(
            f"release {mapping.release!r}: folder {root} not found (set `root` in {mapping_path} or pass --root)"
        )
    return root


def read_records(path: Path) -> list[dict]:
    """JSONL or CSV records, gzip-transparent; errors name the file and line. A file (or its decompressed
    content) past ``MAX_DATA_BYTES`` is refused: a gzip bomb stops at the budget."""
    try:
        raw = read_bytes(path, "release data", MAX_DATA_BYTES)
    except InputFileError as exc:
        raise ReleaseError(str(exc)) from None
    if path.suffix == ".gz":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unzipped:
                raw = unzipped.read(MAX_DATA_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:  # EOFError: a truncated file
            raise ReleaseError(f"{path}: not a complete gzip file ({exc})") from None
        if len(raw) > MAX_DATA_BYTES:
            raise ReleaseError(f"{path}: decompresses past the {MAX_DATA_BYTES:,}-byte budget of a data file: refused")
    name = path.name.removesuffix(".gz")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ReleaseError(
            f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None
    if name.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(text)))
    if name.endswith(".json"):
        return [_object(text, f"{path}")]
    return [_object(line, f"{path}:{number}") for number, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _object(text: str, where: str) -> dict:
    try:
        value = parse_json(text, where)
    except InputFileError as exc:
        raise ReleaseError(str(exc)) from None
    if not isinstance(value, dict):
        raise ReleaseError(f"{where}: a JSON object expected, got {type(value).__name__}")
    return value


_KIND_NAMES: dict[type, str] = {int: "an integer", dict: "an object", list: "a list"}


def _typed(record: dict, name: str | None, where: str, kind: type) -> Any:
    """A field that must be missing-as-None or of ``kind`` (int accepts its decimal text, as CSV gives it)."""
    value = _field(record, name, where)
    if value is None:
        return None
    if kind is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, kind):
        wanted = _KIND_NAMES.get(kind, kind.__name__)
        # the type, not the value: a data file that is not what the mapping says is named, never shown
        raise ReleaseError(f"{where}: field {name!r} must be {wanted}, got {type(value).__name__}")
    return value


def _field(record: dict, name: str | None, where: str) -> Any:
    if name is None:
        return None
    if name not in record:
        raise ReleaseError(f"{where}: field {name!r} missing (the record has {len(record)} other fields)")
    return record[name]


def _matches(record: dict, where: dict[str, Any]) -> bool:
    for key, expected in where.items():
        if isinstance(expected, str) and expected.startswith("$"):
            expected = record.get(expected[1:])
        if record.get(key) != expected:
            return False
    return True


def _row_from_record(spec: ReleaseManifest, record: dict, where: str) -> Row:
    fields = spec.fields
    table = _typed(record, fields.table, where, dict)
    choices = _typed(record, fields.choices, where, dict)
    depth = _typed(record, fields.depth, where, int)
    depth = depth if depth is not None else spec.default_depth
    if spec.symbols_from == "table":
        if not isinstance(table, dict):
            raise ReleaseError(f"{where}: symbols_from 'table' needs a mapping in field {fields.table!r}")
        symbols = sorted(set(map(str, table)) | set(map(str, table.values())))
    elif spec.symbols_from == "choices":
        symbols = sorted(choices or {})
    else:
        symbols = sorted(_typed(record, spec.scores_field, where, dict) or {})
    path = _typed(record, fields.path, where, list)
    answer = str(_field(record, fields.answer, where))
    return Row(
        row_id=str(_field(record, fields.row_id, where)),
        task=spec.task,
        surface=spec.surface,
        depth=depth,
        prompt=str(_field(record, fields.prompt, where) or ""),
        answer=answer,
        path=[str(symbol) for symbol in path] if path is not None else [answer],
        symbols=symbols,
        table={str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else None,
        start=str(_field(record, fields.start, where)) if fields.start else None,
        choices={str(k): str(v) for k, v in choices.items()} if isinstance(choices, dict) else None,
        meta={"source": spec.file},
    )


def load_release(mapping_path: str | Path, root_override: str | Path | None = None) -> LoadedRelease:
    """Read every file a mapping names; recompute correctness; keep file hashes."""
    mapping = load_mapping(mapping_path)
    root = resolve_root(mapping, mapping_path, root_override)
    loaded = LoadedRelease(mapping=mapping, root=root, manifests={}, evidence={}, counts={})

    for spec in mapping.manifests:
        path = root / spec.file
        selected = [record for record in read_records(path) if _matches(record, spec.where)]
        loaded.file_hashes[spec.file] = sha256_file(path)
        rows: list[Row] = []
        seen: set[str] = set()
        for number, record in enumerate(selected, start=1):
            try:
                row = _row_from_record(spec, record, f"{path}:{number}")
            except ValidationError as exc:
                first = exc.errors()[0]
                field_name = ".".join(str(part) for part in first["loc"])
                raise ReleaseError(f"{path}:{number}: row field {field_name}: {first['msg']}") from None
            if row.row_id in seen:
                raise ReleaseError(f"{path}:{number}: duplicate row id {row.row_id!r}")
            seen.add(row.row_id)
            rows.append(row)
        loaded.manifests[spec.id] = Manifest(name=spec.id, rows=tuple(rows))

    for prediction in mapping.predictions:
        path = root / prediction.file
        by_id = loaded.manifests[prediction.manifest].by_id()
        loaded.file_hashes[prediction.file] = sha256_file(path)
        records: list[ReleasedPrediction] = []
        unknown: list[str] = []
        for number, record in enumerate(read_records(path), start=1):
            where = f"{path}:{number}"
            row_id = str(_field(record, prediction.row_id, where))
            found = by_id.get(row_id)
            if found is None:
                unknown.append(row_id)
                continue
            records.append(_evidence(prediction, record, found, where))
        if unknown:
            raise ReleaseError(
                f"{path}: {len(unknown)} predictions name rows not in manifest {prediction.manifest!r} "
                f"(first: {unknown[0]!r})"
            )
        keys = [(record.row_id, record.loop) for record in records]
        if len(set(keys)) != len(keys):
            raise ReleaseError(f"{path}: more than one prediction for the same (row, loop)")
        loaded.evidence[(prediction.arm, prediction.manifest, prediction.file)] = records

    for count in mapping.counts:
        path = root / count.file
        documents = read_records(path)
        if len(documents) != 1:
            raise ReleaseError(f"{path}: counts are read from one JSON document, found {len(documents)}")
        (document,) = documents
        loaded.file_hashes[count.file] = sha256_file(path)
        node: Any = document
        for step in count.select:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                raise ReleaseError(f"{path}: path {count.select} fails at {step!r}") from None
        try:
            loaded.counts[count.id] = {
                int(depth): (int(cell[count.correct]), int(cell[count.total])) for depth, cell in node.items()
            }
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ReleaseError(
                f"{path}: path {count.select} does not lead to depth -> {{{count.correct}, {count.total}}} "
                f"integer counts ({type(exc).__name__}: {exc})"
            ) from None
    return loaded


def _evidence(spec: ReleasePredictions, record: dict, row: Row, where: str) -> ReleasedPrediction:
    loop: int | None
    if isinstance(spec.loop, int):
        loop = spec.loop
    else:
        loop = _typed(record, spec.loop, where, int)
    if spec.target is not None:
        target = _field(record, spec.target, where)
        target = str(target) if target is not None else None
    elif loop is not None and row.depth and loop < row.depth and len(row.path) > loop:
        target = row.path[loop]
    elif loop is not None and row.depth and loop > row.depth:
        target = None  # above the diagonal: no single right state
    else:
        target = row.answer
    rule = None
    if spec.text is not None:
        detail = read_generated_text_detail(str(_field(record, spec.text, where) or ""), row_symbols(row))
        prediction, rule = detail.symbol, detail.rule
    else:
        prediction = _field(record, spec.prediction, where)
        prediction = str(prediction) if prediction is not None else None
    margin = None
    if spec.scores is not None:
        scores = _typed(record, spec.scores, where, dict) or {}
        symbols = set(row.symbols)
        values = [value for key, value in scores.items() if key in symbols]
        if any(isinstance(value, bool) or not isinstance(value, (int, float)) for value in values):
            raise ReleaseError(f"{where}: field {spec.scores!r} must map symbols to numbers")
        ranked = sorted((float(value) for value in values), reverse=True)
        if len(ranked) >= 2:
            margin = ranked[0] - ranked[1]
    correct = None if target is None else prediction == target
    behavior = None
    if spec.behavior is not None and loop is not None and loop > row.depth:
        raw = _field(record, spec.behavior.field, where)
        if raw not in spec.behavior.values:
            known = ", ".join(sorted(spec.behavior.values))
            raise ReleaseError(
                f"{where}: field {spec.behavior.field!r} is {raw!r}, not one of the mapped labels ({known})"
            )
        behavior = spec.behavior.values[raw]
    return ReleasedPrediction(
        row.row_id, spec.arm, loop, prediction, target, correct, margin=margin, rule=rule, behavior=behavior
    )
