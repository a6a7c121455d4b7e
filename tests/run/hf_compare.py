"""Read an hf export where the ledger cannot be imported (``hf_clean_load.py``), and compare what it reads with
the evidence the ledger recorded for the same checkpoint: every row of the arm's evaluation manifest, batched as
the ledger batched them (by depth, left-padded), at every loop up to the row's depth."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store

HERE = Path(__file__).resolve().parent
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def clean_env(tmp_path: Path) -> dict[str, str]:
    return {**OFFLINE, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONNOUSERSITE": "1"}


def read_as_recorded(
    folder: Path, protocol_file: Path, arm: str, db: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The clean process's answer (``hf_clean_load.py``), after checking every reading against the evidence."""
    from transformers import AutoTokenizer

    from ledger.reader.shared import Reader

    provenance = json.loads((folder / "ledger-provenance.json").read_text(encoding="utf-8"))
    protocol = load_protocol(protocol_file)
    reader = Reader(
        provenance["reader"]["symbols"],
        tokenizer=AutoTokenizer.from_pretrained(folder, trust_remote_code=True),  # the folder's own tokenizer
        chat_template=provenance["reader"]["chat_template"],
    )
    evaluation = protocol.arm(arm).evaluation
    by_depth: dict[int, list] = {}
    rows = build_manifests(protocol)["eval"].rows
    for row in rows:
        by_depth.setdefault(row.depth, []).append(row)
    chunks = [
        group[start : start + evaluation.batch_size]
        for _, group in sorted(by_depth.items())
        for start in range(0, len(group), evaluation.batch_size)
    ]
    batches = []
    for chunk in chunks:
        encoded = reader.encode(chunk, return_tensors="pt")
        batches.append(
            {
                "input_ids": encoded["input_ids"].tolist(),
                "attention_mask": encoded["attention_mask"].tolist(),
                "loops": chunk[0].depth,
            }
        )
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps(
            {
                "batches": batches,
                "num_loops": 3,
                "token_ids": [reader.symbol_token_ids[s] for s in reader.symbols],
            }
        )
    )
    answer_file = tmp_path / "answer.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "hf_clean_load.py"), str(folder), str(request), str(answer_file)],
        capture_output=True,
        text=True,
        env={**os.environ, **clean_env(tmp_path), **(env or {})},
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(answer_file.read_text())
    assert answer["imported"] == [] and answer["class"] == "LedgerRecurrentForCausalLM"
    assert answer["num_loops"] == 3  # from_pretrained(..., num_loops=3) set the config
    assert answer["generated"] == answer["by_hand"]  # generate() decodes greedily, as forward's argmax does

    with open_store(f"sqlite:///{db}") as store:
        recorded = {
            (row["row_id"], row["loop"]): row
            for row in store.rows_of("evidence", arm=arm, checkpoint_sha256=provenance["checkpoint_sha256"])
            if row["row_id"] in {r.row_id for r in rows}
        }
    compared = 0
    for chunk, by_loop in zip(chunks, answer["batches"], strict=True):
        for b, row in enumerate(chunk):
            for loop, scores in enumerate(by_loop, start=1):
                target = row.path[loop] if loop <= row.depth and len(row.path) > loop else None
                read = reader.decode_scores(scores[b], row, target=target)
                expected = recorded[(row.row_id, loop)]
                assert read.prediction == expected["prediction"], (row.row_id, loop)
                assert math.isclose(read.margin or 0.0, expected["score_margin"] or 0.0, rel_tol=1e-4, abs_tol=1e-5)
                compared += 1
    assert compared == len(recorded) == sum(row.depth for chunk in chunks for row in chunk)
    return answer
