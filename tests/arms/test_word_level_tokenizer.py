"""``AutoTokenizer`` on a tiny base folder (or an export of an arm on one) reads the folder's word-level tokenizer,
as the ledger does, and not the Qwen2 BPE that transformers 5 rebuilds for ``model_type: qwen2`` over the same
vocabulary. Transformers lets a folder say so only through remote code, so it takes ``trust_remote_code=True``."""

from __future__ import annotations

import json
import shutil

import pytest
from run_helpers import ROOT

from arms.bases.tokenization_word_level import ship_word_level_tokenizer

pytestmark = pytest.mark.models

TEXT = "Question : what is 3 plus 4 ? Answer"
BASES = sorted(path for path in (ROOT / "bases").iterdir() if (path / "tokenizer.json").is_file())


@pytest.mark.parametrize("folder", BASES, ids=[path.name for path in BASES])
def test_autotokenizer_reads_a_tiny_bases_own_tokenizer(folder, tmp_path, monkeypatch):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    own = PreTrainedTokenizerFast.from_pretrained(folder)
    auto = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert type(auto).__name__ == "WordLevelTokenizer"
    assert auto(TEXT)["input_ids"] == own(TEXT)["input_ids"]
    assert len(auto("Question", add_special_tokens=False)["input_ids"]) == 1  # a word, not its letters
    assert (auto.pad_token, auto.eos_token) == (own.pad_token, own.eos_token)


def test_a_family_tokenizer_is_left_as_it_is(tmp_path):
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert not ship_word_level_tokenizer(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8")) == config
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tokenizer_config.json"]


@pytest.mark.parametrize("base", BASES, ids=[path.name for path in BASES])
def test_shipping_is_what_the_committed_bases_hold(base, tmp_path):
    """A base written today (``pretrain`` ships it) and each committed one hold the same file and ``auto_map``."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(base / name, tmp_path / name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("auto_map")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert ship_word_level_tokenizer(tmp_path)
    for name in ("tokenizer_config.json", "tokenization_word_level.py"):
        assert (tmp_path / name).read_bytes() == (base / name).read_bytes(), name
