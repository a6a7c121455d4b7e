"""`ledger export --format hf`: a recorded checkpoint as a Hugging Face model folder that transformers loads
where the ledger cannot be imported, reproducing the readings the ledger recorded at every loop; `generate()`
works; lm-eval's own `hf` model reads it as `ledger lm-eval` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness_tasks import write_tasks
from hf_compare import clean_env, read_as_recorded
from run_helpers import SMOKE, ledger_cli

from ledger.store import open_store
from ledger.store.artifacts import open_artifacts

pytestmark = pytest.mark.models

HERE = Path(__file__).resolve().parent


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


@pytest.mark.parametrize("arm", ["A", "E"])
def test_the_hf_folder_loads_without_the_ledger_and_reads_as_recorded_at_every_loop(reference, tmp_path, arm):
    """A: the full-block arm (split bridge); E: the adapter arm, whose LoRA runs from loop 2 on (the merged loop
    block). The rows are batched as the ledger's evaluation batched them (by depth, left-padded), every loop up
    to the row's depth is read in a process where `import ledger` fails, and the ledger's reader decodes it."""
    ran = reference[0]
    folder = _export(ran, arm, tmp_path / f"hf-{arm}")
    provenance = json.loads((folder / "ledger-provenance.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "ledger_recurrent" and config["loop_block"] == (arm == "E")
    assert provenance["checkpoint_sha256"] == _final(ran, arm) and provenance["num_loops"] == config["num_loops"] == 5

    read_as_recorded(folder, SMOKE, arm, ran / "ledger.db", tmp_path)  # every reading compared with the evidence


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
    env = {**os.environ, **clean_env(tmp_path), "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets")}
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
