"""`ledger export --format hf`: a recorded checkpoint as a Hugging Face model folder that transformers loads
where the ledger cannot be imported, reproducing the readings the ledger recorded at every loop; `generate()`
works; lm-eval's own `hf` model reads it as `ledger lm-eval` does."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from harness_tasks import write_tasks
from run_helpers import SMOKE, ledger_cli

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store
from ledger.store.artifacts import open_artifacts

pytestmark = pytest.mark.models

HERE = Path(__file__).resolve().parent
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _final(folder: Path, arm: str) -> str:
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        return [row["sha256"] for row in store.rows_of("checkpoints") if row["arm"] == arm][-1]


def _export(ran: Path, arm: str, out: Path, *extra: str) -> Path:
    done = ledger_cli(
        "export", _final(ran, arm)[:12], "--out", str(out), "--format", "hf", *extra,
        "--db", f"sqlite:///{ran / 'ledger.db'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "a Hugging Face model folder" in done.stdout
    return out


def _clean_env(tmp_path: Path) -> dict[str, str]:
    return {**OFFLINE, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONNOUSERSITE": "1"}


@pytest.mark.parametrize("arm", ["A", "E"])
def test_the_hf_folder_loads_without_the_ledger_and_reads_as_recorded_at_every_loop(reference, tmp_path, arm):
    """A: the full-block arm (split bridge); E: the adapter arm, whose LoRA runs from loop 2 on (the merged loop
    block). The rows are batched as the ledger's evaluation batched them (by depth, left-padded), every loop up
    to the row's depth is read in a process where `import ledger` fails, and the ledger's reader decodes it."""
    import os

    from transformers import AutoTokenizer

    from ledger.reader.shared import Reader

    ran = reference[0]
    folder = _export(ran, arm, tmp_path / f"hf-{arm}")
    provenance = json.loads((folder / "ledger-provenance.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "ledger_recurrent" and config["loop_block"] == (arm == "E")
    assert provenance["checkpoint_sha256"] == _final(ran, arm) and provenance["num_loops"] == config["num_loops"] == 5

    protocol = load_protocol(SMOKE)
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
        env={**os.environ, **_clean_env(tmp_path)},
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(answer_file.read_text())
    assert answer["imported"] == [] and answer["class"] == "LedgerRecurrentForCausalLM"
    assert answer["num_loops"] == 3  # from_pretrained(..., num_loops=3) set the config
    assert answer["generated"] == answer["by_hand"]  # generate() decodes greedily, as forward's argmax does

    with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:
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


def test_a_dense_arm_is_its_base_class_and_bad_requests_are_one_line(reference, tmp_path):
    """A dense arm needs no remote code: its folder is the fine-tuned base as transformers writes it, with the
    checkpoint's tensors. --num-loops belongs to an hf export; nothing is written when it is refused."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from ledger.run.export import export_checkpoint

    ran = reference[0]
    folder = tmp_path / "hf-B"
    with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:  # in this process: no second start of torch
        export_checkpoint(store, _final(ran, "B"), folder, format="hf")
    assert not (folder / "modeling_ledger_recurrent.py").exists()
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    written = load_file(folder / "model.safetensors")
    state = model.state_dict()
    assert written and all(torch.equal(state[key], tensor) for key, tensor in written.items())
    with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:
        checkpoint = store.checkpoint(_final(ran, "B"))
        trained = load_file(open_artifacts(None, store.url).locate(checkpoint.path, checkpoint.sha256))
    shared = [key for key in trained if key.removeprefix("model.") in written or key in written]
    assert shared  # the checkpoint's tensors are the folder's
    for key in shared:
        assert torch.equal(trained[key], written[key if key in written else key.removeprefix("model.")])

    db = f"sqlite:///{ran / 'ledger.db'}"
    for args, message in (
        (["--format", "ledger", "--num-loops", "3"], "--num-loops"),
        (["--format", "hf", "--num-loops", "0"], "--num-loops"),
    ):
        done = ledger_cli("export", _final(ran, "A")[:12], "--out", str(tmp_path / "refused"), *args, "--db", db)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "refused").exists() and not (tmp_path / "refused.partial").exists()


@pytest.mark.long  # two lm-eval runs end to end: the long call
def test_lm_evals_own_hf_model_reads_the_folder_as_ledger_lm_eval_does(reference, tmp_path):
    """The same checkpoint at loop 2: lm-eval's stock `hf` model on the hf folder (`num_loops=2` through
    --model_args, in a process where `import ledger` fails) and `ledger lm-eval` on the ledger's own export give
    every choice of every question the same log-likelihood."""
    import os

    from ledger.run.export import export_checkpoint

    ran = reference[0]
    hf = _export(ran, "A", tmp_path / "hf-A")
    ours = tmp_path / "export-A"
    with open_store(f"sqlite:///{ran / 'ledger.db'}") as store:
        export_checkpoint(store, _final(ran, "A"), ours)
    write_tasks(tmp_path / "tasks", documents=8)
    env = {**os.environ, **_clean_env(tmp_path), "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets")}
    stock = subprocess.run(
        [
            sys.executable, "-c",
            f"import sys; sys.path.insert(0, {str(HERE)!r}); import hf_clean_load as h; "
            "sys.meta_path.insert(0, h._Refuse()); from lm_eval.__main__ import cli_evaluate; cli_evaluate()",
            "--model", "hf", "--model_args", f"pretrained={hf},trust_remote_code=True,num_loops=2",
            "--tasks", "arc_local", "--include_path", str(tmp_path / "tasks"), "--device", "cpu",
            "--batch_size", "4", "--output_path", str(tmp_path / "stock"), "--log_samples",
        ],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert stock.returncode == 0, stock.stderr[-3000:]
    ledger = ledger_cli(
        "lm-eval", "--model", f"A={ours}", "--loops", "2", "--tasks", "arc_local",
        "--include-path", str(tmp_path / "tasks"), "--out", str(tmp_path / "ours"), env=env,
    )  # fmt: skip
    assert ledger.returncode == 0, ledger.stderr[-3000:]

    (samples_file,) = (tmp_path / "stock").rglob("samples_arc_local*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text(encoding="utf-8").splitlines()]
    lines = (tmp_path / "ours" / "readings" / "A" / "arc_local.jsonl").read_text(encoding="utf-8").splitlines()
    readings = {reading["id"]: reading for reading in map(json.loads, lines)}
    assert len(samples) == len(readings) == 8
    for sample in samples:
        reading = readings[str(sample["doc_id"])]
        assert reading["loop"] == 2
        stock_lls = [float(resp[0]) for resp in sample["filtered_resps"]]  # logged as text here
        ours_lls = [reading["scores"][label] for label in "ABCD"]
        assert ours_lls == pytest.approx(stock_lls, rel=1e-5, abs=1e-5), sample["doc_id"]
