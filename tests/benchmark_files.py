"""Stand-in benchmark files for tests: every question id of a shipped benchmark (``ledger.rows.tasks.benchmarks``)
in the ARC schema, with made-up questions, where a protocol names a file the user supplies (protocols/phaseA.yaml's
ARC battery). They let a test build, register and deviate such a protocol; their rows mean nothing."""

from __future__ import annotations

import json
from pathlib import Path

from ledger.protocol.protocol import Protocol
from ledger.rows.tasks.benchmarks import benchmark_ids


def write_stand_in(file: Path, benchmark: str, limit: int | None = None) -> Path:
    ids = list(benchmark_ids(benchmark))[:limit]
    file.parent.mkdir(parents=True, exist_ok=True)
    options = {"text": ["red", "green", "blue", "white"], "label": ["A", "B", "C", "D"]}
    lines = [
        json.dumps({"id": row_id, "question": f"Which colour is {row_id}?", "choices": options, "answerKey": "C"})
        for row_id in ids
    ]
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return file


def write_stand_in_corpus(folder: Path, spec) -> Path:
    """A token corpus's folder with one parquet shard of a few sequences of the manifest's length."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    sequences = [[(7 * row + 3 * position) % 256 for position in range(spec.sequence_length)] for row in range(8)]
    pq.write_table(pa.table({spec.column: pa.array(sequences, type=pa.list_(pa.int32()))}), folder / "shard-0.parquet")
    return folder


def supply_benchmark_files(protocol: Protocol) -> list[Path]:
    """Write a stand-in for every benchmark file or token corpus ``protocol`` reads that is not there yet; the
    files written."""
    from ledger.rows.builder import files_to_come

    specs = {spec.id: spec for spec in protocol.manifests}
    return [
        write_stand_in_corpus(file, specs[name])
        if specs[name].generator == "token_corpus"
        else write_stand_in(file, specs[name].ids)
        for name, file in files_to_come(protocol).items()
    ]
