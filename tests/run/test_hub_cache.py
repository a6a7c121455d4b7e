"""A base named by its hub id is read from the local Hugging Face cache, exactly as its snapshot folder:
resolved before anything is written, hashed and recorded as the run does, the folder's own tokenizer, and
refused in one line (nothing written) where the cache does not hold it. The cache here is a fake one: the
shipped tiny base's files under `models--acme--tiny-base/snapshots/REV/`, linked to `blobs/` as the hub's
own client lays them out."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import ROOT, SMOKE, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

TINY_BASE = ROOT / "bases" / "tiny-base"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _fake_cache(root: Path) -> Path:
    repo = root / "hub" / "models--acme--tiny-base"
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION, encoding="utf-8")
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenization_word_level.py",
    ):
        data = (TINY_BASE / name).read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    return root / "hub"


def _protocol(folder: Path, source: str) -> Path:
    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke\n", "name: smoke-hub\n", 1)
    builtin = next(line for line in text.splitlines() if "source: builtin:" in line)
    text = text.replace(builtin, builtin.split("source:")[0] + f"source: {source}")
    text = text.replace("claims:\n  - ../claims/smoke.yaml\n", "")
    path = folder / "smoke-hub.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.long  # a run end to end: the long call
def test_a_cached_hub_id_runs_as_its_snapshot_folder_and_is_recorded_by_its_weights(tmp_path):
    env = {"HF_HUB_CACHE": str(_fake_cache(tmp_path)), "HF_HUB_OFFLINE": "1"}
    protocol = _protocol(tmp_path, "acme/tiny-base")
    checked = ledger_cli("check", str(protocol), "--dry-run", env=env)
    assert checked.returncode == 0, checked.stderr[-2000:]
    declared = (TINY_BASE / "SHA256").read_text(encoding="utf-8").split()[0]
    printed = re.sub(r"\s+", "", checked.stdout)  # the console wraps a long path where it likes
    assert f"snapshots/{REVISION},weights{declared[:12]}" in printed, checked.stdout
    db = tmp_path / "ledger.db"
    run = ledger_cli(
        "run", str(protocol), "--arms", "A", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--no-progress",
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    with open_store(f"sqlite:///{db}") as store:
        (base,) = [row for row in store.rows_of("checkpoints") if row["stage"] == "base"]
    assert base["sha256"] == declared
    assert json.loads(base["meta_json"]) == {"source": "acme/tiny-base", "revision": REVISION}


def test_a_hub_id_gets_the_tokenizer_its_folder_would(tmp_path):
    hub = _fake_cache(tmp_path)
    script = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from ledger.protocol.bases import BaseModelSpec\n"
        "from ledger.run.bases import load_protocol_base\n"
        "from arms.bases.loading import load_base\n"
        "out = {}\n"
        "for source in sys.argv[1:]:\n"
        "    _, tokenizer, files = load_protocol_base(BaseModelSpec(source=source, dtype='float32'), Path('.'))\n"
        "    _, direct = load_base(source)\n"  # the loader itself, called with the hub id: its folder too
        "    from transformers import AutoTokenizer\n"
        "    auto = AutoTokenizer.from_pretrained(source, trust_remote_code=True, local_files_only=True)\n"
        "    out[source] = [\n"
        "        [type(t).__name__ for t in (tokenizer, direct)],\n"
        "        [t('Question', add_special_tokens=False)['input_ids'] for t in (tokenizer, direct, auto)],\n"
        "    ]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "acme/tiny-base", str(TINY_BASE)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "m")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["acme/tiny-base"] == read[str(TINY_BASE)], read
    assert read[str(TINY_BASE)][1] == [[1]] * 3  # the word-level tokenizer, however loaded: one token, not letters


def test_a_hub_id_the_cache_lacks_is_refused_in_one_line_before_anything_is_written(tmp_path):
    env = {"HF_HUB_CACHE": str(_fake_cache(tmp_path)), "HF_HUB_OFFLINE": "1"}
    protocol = _protocol(tmp_path, "acme/not-cached")
    out = tmp_path / "out"
    run = ledger_cli("run", str(protocol), "--db", f"sqlite:///{tmp_path / 'ledger.db'}", "--out", str(out), env=env)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "acme/not-cached" in lines[0] and "local" in lines[0], run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "ledger.db").exists() and not out.exists()
    shutil.rmtree(tmp_path / "hub")
